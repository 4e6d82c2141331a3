#!/usr/bin/env python3
"""MHA decoding (b32, 32 heads, 8k cached keys, d128, bf16) through attention_with_kvcache over the
contiguous cache and over shuffled pages of 16, each call once to warm up and then alternately
(contiguous, paged, contiguous, paged): the launches Nsight Compute profiles (run3.sh)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import qattn  # noqa: E402

b, hq, sk, d, page = 32, 32, 8192, 128, 16
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(b, 1, hq, d, device="cuda", generator=g).to(torch.bfloat16)
k = torch.randn(b, sk, hq, d, device="cuda", generator=g).to(torch.bfloat16)
v = torch.randn(b, sk, hq, d, device="cuda", generator=g).to(torch.bfloat16)
lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
pages = sk // page
perm = torch.randperm(b * pages, device="cuda", generator=g)
kp = torch.empty(b * pages, page, hq, d, device="cuda", dtype=torch.bfloat16)
vp = torch.empty_like(kp)
kp[perm] = k.view(b * pages, page, hq, d)
vp[perm] = v.view(b * pages, page, hq, d)
table = perm.view(b, pages).to(torch.int32)
calls = [lambda: qattn.attention_with_kvcache(q, k, v, lens), lambda: qattn.attention_with_kvcache(q, kp, vp, lens, table)]
outs = [c() for c in calls]  # warm: builds and first launches
torch.cuda.synchronize()
print("max |contiguous - paged|", (outs[0].float() - outs[1].float()).abs().max().item())
for _ in range(2):
    for c in calls:
        c()
torch.cuda.synchronize()
