"""Which code path the binding generates for a GPU: the ONE place this is decided.

The planner knows every GPU of data/gpus.json; the translator lowers sm75 (Turing), the sm80
family (Ampere, Ada: cp.async + ldmatrix + mma.sync) and Hopper (sm90a: TMA + wgmma, warp
specialised, every variant of the binding). An H100/H200 gets the **sm90 path** (target `h100`):
about 1.7x the sm80 path there (README, "Benchmarks against PyTorch's attention kernels").
qattn.explain() shows the choice and its reason. $QATTN_TARGET overrides the table with any name of
`qattn gpus` (QATTN_TARGET=a100 builds the sm80 path, with native sm_90 code, on a Hopper GPU).
"""
import os

from .errors import DeviceError, SpecError

# compute capability (major, minor) -> (target given to the planner, why)
POLICY = {
    (7, 5): ("sm75", "Turing: the sm75 path (mma.sync m16n8k8, fp16 only)"),
    (8, 0): ("sm80", "Ampere: the sm80 path (cp.async + ldmatrix + mma.sync)"),
    (8, 6): ("sm86", "Ampere (sm86): the sm80 lowering with sm86's shared-memory budget"),
    (8, 9): ("sm89", "Ada: the sm80 lowering with sm89's shared-memory budget"),
    (9, 0): ("h100", "Hopper: the sm90a path (TMA + wgmma, producer/consumer warpgroups; QATTN_TARGET=a100 "
                     "selects the sm80 path instead)"),
}


def _key(name):
    return "".join(c for c in str(name).lower() if c not in "-_ ")


def facts_for_name(name):
    """The gpus.json entry for a GPU name or alias (as `qattn gpus NAME` matches), or SpecError."""
    from ._cli import gpu_table
    table = gpu_table()
    k = _key(name)
    for g in table:
        if _key(g["name"]) == k or any(_key(a) == k for a in g.get("aliases", [])):
            return g
    names = ", ".join(g["name"] for g in table)
    raise SpecError(f"unknown GPU '{name}'", code="PY0402", hint=f"one of: {names} (or an alias: `qattn gpus`)")


def target_for_capability(cc, device_name=""):
    """(target, reason) for a GPU of compute capability cc = (major, minor)."""
    override = os.environ.get("QATTN_TARGET")
    if override:
        return override, f"$QATTN_TARGET={override}"
    cc = tuple(int(x) for x in cc)
    if cc in POLICY:
        return POLICY[cc]
    what = f"{device_name} (sm{cc[0]}{cc[1]})" if device_name else f"sm{cc[0]}{cc[1]}"
    raise DeviceError(f"no qattn code path for {what}", code="PY0403",
                      hint="supported: sm75, sm80, sm86, sm89, sm90; set QATTN_TARGET to a "
                           "GPU of `qattn gpus` whose code runs on this one")


def target_for_gpu(name):
    """(target, reason) for a GPU named by the user (compile(spec, gpu=...) or the spec's "gpu")."""
    g = facts_for_name(name)
    target, reason = target_for_capability(g["compute_capability"], g["name"])
    return target, f"{g['name']}: {reason}"


def local_capability(device=None):
    """(major, minor, name) of a torch CUDA device; DeviceError when torch sees none."""
    from ._torch_util import import_torch
    torch = import_torch()
    if not torch.cuda.is_available():
        raise DeviceError("no CUDA device is visible to torch", code="PY0401",
                          hint="run on a machine with an NVIDIA GPU, or pass gpu=NAME to qattn.compile() "
                               "to build without one")
    idx = torch.cuda.current_device() if device is None else torch.device(device).index
    if idx is None:
        idx = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    return major, minor, torch.cuda.get_device_name(idx)
