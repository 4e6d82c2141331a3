"""Where attention_varlen's decoding (the ragged kernel on the decoding tile) spends the 1 us it takes
more than attention_with_kvcache on the MQA rows: each call's kernels' device times (torch profiler,
median of 50 calls) for MQA 32/1 batch 32 over 8k keys and 16/1 batch 8 over 16k, contiguous cache.
Run from the repository root with tests/gpu/device_env.sh sourced."""
import sys

import torch

sys.path.insert(0, "bench")
import qattn  # noqa: E402
from qattn._kvcache_check import make_cache  # noqa: E402
from bench_util import DECODE_ROWS, kernel_times  # noqa: E402

print(torch.cuda.get_device_name())
for name in sys.argv[1].split(",") if len(sys.argv) > 1 else ["mqa_32_1_b32_8k", "mqa_16_1_b8_16k", "gqa_32_8_b1_64k"]:
    b, hq, hkv, sk = DECODE_ROWS[name]
    g = torch.Generator(device="cuda").manual_seed(b)
    k, v, kc, vc, _ = make_cache(b, sk, hkv, 128, 128, torch.bfloat16, 0, [sk] * b, g)
    lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    q = torch.randn(b, 1, hq, 128, device="cuda", generator=g).to(torch.bfloat16)
    cq = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    for what, fn in (("batched", lambda: qattn.attention_with_kvcache(q, kc, vc, lens)),
                     ("varlen", lambda: qattn.attention_varlen(q.view(b, hq, 128), kc, vc, cq, None, 1, sk,
                                                              cache_seqlens=lens))):
        t = kernel_times(fn, 50)
        parts = " | ".join(f"{n[:70]} {sorted(x)[len(x) // 2]:.1f} us x{len(x) // 50}" for n, x in t.items())
        print(f"{name} {what}: {parts}", flush=True)
