#!/usr/bin/env python3
"""The combine kernel of a split over the keys (qattn_combine, `qattn generate --combine`) on a GPU:
random partial results merged by the kernel against an fp64 torch merge.

  python3 tests/gpu/combine_check.py [--dtypes bf16,fp16] [--dv 64,128,256,512] [--libs LIB.so ...]

Without --libs the libraries are built through the package (qattn._combine.build_for: `qattn
generate --combine` on an ordinary spec of that dtype and head_dim_v, cached); with --libs the given
libraries are checked (their dtype and d_v from qattn_kernel_info). Cases per library: seqlen_q 1, 3,
17 (and 65 rows over 5 heads), splits 1, 2, 7, 16, contiguous and strided (padded heads, the split
dimension inside the row dimension, LSE rows padded, O written through a BHSD view), with and
without the LSE (NULL). Some parts are empty (LSE -inf), and rows whose parts are all empty must give
O = 0 and LSE = -inf. Outputs are poisoned with NaN first. Verdict: |O - ref| <= 2 u (|ref| + 0.01
max |ref|) elementwise (u: the unit roundoff of the output dtype, 2^-8 bf16, 2^-11 fp16: the merge
is fp32, one rounding at the store; each line shows the largest ratio of the two) and |LSE - ref|
<= 1e-5 max(1, |ref|). One line per case; exit status 1 when a case fails.

The cases and the verdict are qattn._combine_check's (which qattn.verify uses too).
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from qattn import _combine  # noqa: E402
from qattn._combine_check import CASES, lib_runner, package_runner, run_case  # noqa: E402

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--dv", default="64,128,256,512")
    ap.add_argument("--libs", nargs="*", default=[], help="check these combine libraries instead of building")
    a = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    runs = []
    if a.libs:
        for path in a.libs:
            lib = _combine.CombineLibrary(path)
            runs.append((os.path.basename(path), lib.info["dtype"], int(lib.info["d_v"]), lib_runner(lib)))
    else:
        for dt in a.dtypes.split(","):
            for dv in (int(x) for x in a.dv.split(",")):
                try:
                    bld = _combine.build_for(torch, dt, dv, torch.device("cuda", torch.cuda.current_device()))
                    lib = bld.library
                except Exception as e:  # noqa: BLE001 - a build failure is a failed library, reported
                    print(f"{dt} d_v={dv}: FAIL building the combine library: {e}", flush=True)
                    runs.append((f"{dt}_dv{dv}", dt, dv, None))
                    continue
                runs.append((bld.spec["name"], dt, dv, lib_runner(lib)))
        runs.append(("package", "bf16", 128, package_runner()))  # the Python wrapper once too
    total = fails = 0
    for name, dt, dv, run in runs:
        if run is None:
            fails += 1
            total += 1
            continue
        for i, case in enumerate(CASES):
            total += 1
            try:
                r = run_case(run, dt, dv, case, seed=1000 * dv + i)
            except Exception as e:  # noqa: BLE001 - one line per case, whatever happened
                r = {"ok": False, "detail": f"{dt} d_v={dv} {case}: {type(e).__name__}: {e}"}
            fails += not r["ok"]
            print(f"{name}: {'ok  ' if r['ok'] else 'FAIL'} {r['detail']}", flush=True)
    print(f"combine: {total - fails}/{total} cases passed over {len(runs)} libraries", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
