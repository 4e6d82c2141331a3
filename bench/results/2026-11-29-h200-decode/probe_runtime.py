# ad hoc: a runtime's decoding calls (no cache, contiguous cache, pages 16/64/256), each repeated, with progress
import os, sys, time, torch
import qattn
torch.manual_seed(0)
REP = int(os.environ.get("REP", "30"))
for (b, hq, hkv, sk) in [(32, 32, 1, 8192), (2, 8, 1, 1024), (32, 32, 8, 8192), (128, 32, 8, 4096), (1, 32, 8, 65536)]:
    q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lens = torch.full((b,), sk, device="cuda", dtype=torch.int32)
    t0 = time.time()
    ref = qattn.attention(q, k, v)
    for _ in range(REP): qattn.attention(q, k, v)
    torch.cuda.synchronize()
    print(f"b{b} {hq}/{hkv} {sk} attention ok {time.time()-t0:.1f} s", flush=True)
    for page in (0, 16, 64, 256):
        t0 = time.time()
        if page:
            npg = b * sk // page
            perm = torch.randperm(npg, device="cuda")
            kc = torch.empty(npg, page, hkv, 128, device="cuda", dtype=torch.bfloat16); vc = torch.empty_like(kc)
            kc[perm] = k.reshape(npg, page, hkv, 128); vc[perm] = v.reshape(npg, page, hkv, 128)
            tb = perm.view(b, sk // page).int()
        else:
            kc, vc, tb = k, v, None
        o = qattn.attention_with_kvcache(q, kc, vc, lens, tb)
        for _ in range(REP): qattn.attention_with_kvcache(q, kc, vc, lens, tb)
        torch.cuda.synchronize()
        print(f"  page {page}: ok {time.time()-t0:.1f} s, max|kv - attention| {(o.float()-ref.float()).abs().max().item():.2e}", flush=True)
        del kc, vc
    del q, k, v; torch.cuda.empty_cache()
print("ALL DONE", flush=True)
