#!/usr/bin/env python3
"""One key-split call per process, for finding a hang or a wrong result in the split paths without
losing the GPU session: faulthandler prints every thread's Python stack and exits after DEADLINE
seconds (a kernel that never ends leaves the process inside a CUDA synchronisation, where no Python
timeout runs).

    [SPLITS=2 CAUSAL=0 CAP=2048] python3 tests/gpu/split_probe.py CASE [DEADLINE]
    CASE: plain | kv_full | kv_empty | kv_paged | fold
Prints the build and launch times and the largest difference from the unsplit call. CAUSAL=1 calls
with causal=True, which takes the unmasked split kernel (one query sees every key). The kernel-level
probe (a library launched directly, its parts merged and compared with fp32):
tests/gpu/split_kernel_probe.py."""
import faulthandler
import os
import sys
import time

faulthandler.dump_traceback_later(int(sys.argv[2]) if len(sys.argv) > 2 else 60, exit=True)
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import qattn  # noqa: E402
from qattn import _attention  # noqa: E402

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f} s]", *a, flush=True)


case = sys.argv[1]
splits = int(os.environ.get("SPLITS", "2"))
os.environ["QATTN_SPLIT_MODE"] = "fold" if case == "fold" else "tl"  # tl: the kernel that splits in its TL (Hopper)
_attention.split_keys = lambda *a, **k: splits
log(case, "splits", splits, "tl_split", _attention.tl_split(torch, torch.device("cuda")))
g = torch.Generator(device="cuda").manual_seed(0)
b, hq, hkv, d, cap = 4, 8, 1, 128, int(os.environ.get("CAP", "2048"))
causal = os.environ.get("CAUSAL", "0") == "1"
q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
k = torch.randn(b, cap, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
v = torch.randn(b, cap, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
lens = torch.tensor([cap] * b if case in ("kv_full", "plain") else [cap, 0, 1, 300], dtype=torch.int32, device="cuda")
table = None
if case == "kv_paged":
    page = 64 if cap % 64 == 0 else 8
    table = torch.randperm(b * cap // page, device="cuda").to(torch.int32).view(b, cap // page)
    kp, vp = torch.empty(b * cap // page, page, hkv, d, device="cuda", dtype=k.dtype), torch.empty_like(k).view(-1, page, hkv, d)
    kp[table.view(-1).long()] = k.reshape(-1, page, hkv, d)
    vp[table.view(-1).long()] = v.reshape(-1, page, hkv, d)
kc, vc = (kp, vp) if table is not None else (k, v)


def call():
    if case == "plain":
        return qattn.attention(q, k, v, causal=causal, return_lse=True)
    return qattn.attention_with_kvcache(q, kc, vc, lens, table, causal=causal, return_lse=True)


log("first call (builds)")
o, lse = call()
log("returned; synchronising")
torch.cuda.synchronize()
log("done", tuple(o.shape), "finite", bool(torch.isfinite(o).all()))
os.environ["QATTN_SPLIT_KV"] = "0"
_attention.split_keys = lambda *a, **k: 1
o1, l1 = call()
torch.cuda.synchronize()
log("unsplit: max |o - o1|", (o.float() - o1.float()).abs().max().item(), "max |lse - l1| (finite)",
    (lse - l1)[torch.isfinite(l1)].abs().max().item())
