"""Kernel packs from the command line (docs/python.md, "Kernel packs").

    python -m qattn.pack build OUT [SPEC ...] [--common] [--gpu h100] [--short] [--backward] [--deterministic] [--jobs N]
    python -m qattn.pack list OUT

build: qattn.precompile() of the SPECs (preset names or spec JSON files) and, with --common, of
qattn.COMMON_KERNELS, into the pack folder OUT. list: the kernels of a pack, its manifest checked.
An application ships OUT and calls qattn.use_pack(OUT) (or sets QATTN_PACKS=OUT).
"""
import argparse
import json
import sys

from ._pack import COMMON_KERNELS, check_files, read_manifest
from .errors import QattnError


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qattn.pack", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build kernels into a pack folder")
    b.add_argument("out")
    b.add_argument("specs", nargs="*", help="preset names or spec JSON files")
    b.add_argument("--common", action="store_true", help="also qattn.COMMON_KERNELS")
    b.add_argument("--gpu", default=None, help="the GPU to build for (a `qattn gpus` name); default: the local one")
    b.add_argument("--short", action="store_true",
                   help="also what decoding uses: the Hopper kernels for short GQA/MQA queries and MHA decoding, the key split's LSE twins")
    b.add_argument("--backward", action="store_true",
                   help="also what training uses: the forward's LSE twin and the backward libraries (MHA, GQA)")
    b.add_argument("--deterministic", action="store_true",
                   help="also the deterministic backward libraries (torch.use_deterministic_algorithms(True))")
    b.add_argument("--jobs", type=int, default=None)
    ls = sub.add_parser("list", help="the kernels of a pack (checked)")
    ls.add_argument("out")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "build":
            from ._compile import precompile
            specs = list(a.specs) + (list(COMMON_KERNELS) if a.common else [])
            if not specs:
                ap.error("give SPECs or --common")
            n = precompile(specs, a.out, gpu=a.gpu, short=a.short, backward=a.backward, deterministic=a.deterministic,
                           jobs=a.jobs)
            print(f"{a.out}: {n} kernel(s)")
            return 0
        entries = read_manifest(a.out)
        for e in sorted(entries.values(), key=lambda x: x["name"]):
            check_files(a.out, e)
            s = e["spec"]
            print(f"{e['name']:<40} {e['target']:<6} {e.get('pass', 'forward'):<8} {s['dtype']} "
                  f"d{s['head_dim_qk']}/{s['head_dim_v']} {json.dumps(s.get('mask'))} {json.dumps(s.get('variants', {}))}")
        print(f"{len(entries)} kernel(s)")
        return 0
    except QattnError as e:
        print(f"qattn: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
