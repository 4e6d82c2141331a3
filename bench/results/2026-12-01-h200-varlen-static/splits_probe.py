"""Issue 20's MQA decoding rows against the copy bandwidth: attention_with_kvcache with the key split
the planner's rule picks (num_splits=0: parts_to_fill, as many parts as fill the SMs) and with other
part counts, beside a copy of the same K + V bytes, in one process (CUDA graphs of 20 calls, medians
of 9 rounds). Run from the repository root with tests/gpu/device_env.sh sourced."""
import sys

import torch

sys.path.insert(0, "bench")
import qattn  # noqa: E402
from qattn import _attention  # noqa: E402
from qattn._kvcache_check import make_cache  # noqa: E402
from bench_util import DECODE_ROWS, graphed, replay_rounds  # noqa: E402

print(torch.cuda.get_device_name())
for name, counts in (("mqa_32_1_b32_8k", (2, 3, 4, 5, 6, 8)), ("mqa_16_1_b8_16k", (8, 12, 16)),
                     ("gqa_32_8_b1_64k", (8, 12, 16)), ("gqa_32_8_b4_16k", (2, 3, 4, 6))):
    b, hq, hkv, sk = DECODE_ROWS[name]
    g = torch.Generator(device="cuda").manual_seed(b)
    k, v, kc, vc, _ = make_cache(b, sk, hkv, 128, 128, torch.bfloat16, 0, [sk] * b, g)
    lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    q = torch.randn(b, 1, hq, 128, device="cuda", generator=g).to(torch.bfloat16)
    src = torch.cat([kc.reshape(-1), vc.reshape(-1)])
    dst = torch.empty_like(src)
    fns = {"copy": lambda: dst.copy_(src), "auto": lambda: qattn.attention_with_kvcache(q, kc, vc, lens)}
    for n in counts:
        fns[f"s{n}"] = lambda n=n: qattn.attention_with_kvcache(q, kc, vc, lens, num_splits=n)
    ref = fns["auto"]()
    for n in counts:
        assert (fns[f"s{n}"]().float() - ref.float()).abs().max().item() < 2e-2
    med = replay_rounds({n: graphed(f, 20) for n, f in fns.items()}, 9, 20)
    kv = src.numel() * 2
    copy_gbs = 2 * kv / (med["copy"] * 1e-6) / 1e9  # read + write
    auto_parts = _attention.parts_to_fill(torch, q.device, b * hkv, sk)
    line = " | ".join(f"{n} {med[n]:6.1f} us ({kv / (med[n] * 1e-6) / 1e9 / copy_gbs:.3f})" for n in med if n != "copy")
    print(f"{name} (auto = {auto_parts} parts) copy {copy_gbs:5.0f} GB/s | {line}", flush=True)
