"""Helpers shared by the benchmarks: CUDA-graph timing (bench_split_kv.py, bench_kvcache.py,
bench_decode_tiles.py: each implementation captured as one graph of `calls` back-to-back calls, the
graphs replayed in rounds, adjacent in time and in rotating order, the median per call kept), a call
under an environment variable (with_env), the results.csv writer (write_csv), and the device times of
the CUDA kernels a call launches (kernel_times: torch.profiler; decode_profile.py,
bench_variant_kernels.py)."""
import csv
import os

# The decoding rows the benchmarks share (one query token, bf16, d 128): name -> (batch, hq, hkv, seqlen_k)
DECODE_ROWS = {
    "mqa_32_1_b32_8k": (32, 32, 1, 8192),
    "gqa_32_8_b32_8k": (32, 32, 8, 8192),
    "gqa_64_8_b8_32k": (8, 64, 8, 32768),
    "mha_32_32_b8_4k": (8, 32, 32, 4096),
    "gqa_32_8_b128_4k": (128, 32, 8, 4096),
    "gqa_32_8_b1_64k": (1, 32, 8, 65536),
    "mqa_16_1_b8_16k": (8, 16, 1, 16384),
    "gqa_32_8_b4_16k": (4, 32, 8, 16384),
}


def with_env(name, value, fn):
    """fn wrapped to run with $name = value (qattn reads QATTN_SPLIT_KV / QATTN_COMBINE at each call, so
    the setting also holds while a CUDA graph is captured)."""
    def run():
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            return fn()
        finally:
            if old is None:
                os.environ.pop(name)
            else:
                os.environ[name] = old
    return run


def write_csv(path, rows, cols=None, append=False):
    """rows (dicts) to a CSV file with the columns `cols` (default: the first row's keys), a header
    unless appending to a file that exists; "\n" line ends."""
    if not rows:
        return
    cols = cols or list(rows[0])
    header = not (append and os.path.exists(path))
    with open(path, "a" if append else "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        if header:
            w.writeheader()
        w.writerows(rows)


def graphed(fn, calls):
    """A CUDA graph of `calls` calls of fn (warmed up once on a side stream, as capture requires)."""
    import torch
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return g


def replay_rounds(graphs, rounds, calls):
    """{name: median us per call}: each CUDA graph (of `calls` calls) replayed once per round, the
    graphs adjacent in time and in rotating order."""
    import torch
    names = list(graphs)
    ts = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[n].replay()
            e1.record()
            torch.cuda.synchronize()
            ts[n].append(e0.elapsed_time(e1) * 1e3 / calls)
    return {n: sorted(v_)[len(v_) // 2] for n, v_ in ts.items()}


def kernel_times(fn, reps):
    """{kernel name: [device us of each launch]} over `reps` profiled calls of fn (one call first,
    unprofiled: builds and first-launch costs stay out)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type.name == "CUDA" and e.device_time > 0:
            times.setdefault(e.name, []).append(e.device_time)
    return times
