# ad hoc: device-to-device copy bandwidth against the size (CUDA graph of 20 copies, median of 7)
import torch
for mib in (64, 128, 256, 384, 512, 768, 1024):
    n = (mib << 20) // 2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16); dst = torch.empty_like(src)
    dst.copy_(src); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): dst.copy_(src)
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / 20)
    ts.sort(); t = ts[3]
    print(f"copy {mib:5d} MiB: {t*1e3:8.1f} us  {2*(mib<<20)/(t*1e-3)/1e9:6.0f} GB/s (read + write)", flush=True)
    del src, dst, g; torch.cuda.empty_cache()
