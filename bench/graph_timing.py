"""CUDA-graph timing shared by the benchmarks (bench_split_kv.py, bench_kvcache.py, bench_decode_tiles.py):
each implementation captured as one graph of `calls` back-to-back calls, the graphs replayed in rounds,
adjacent in time and in rotating order, the median per call kept."""
import torch


def graphed(fn, calls):
    """A CUDA graph of `calls` calls of fn (warmed up once on a side stream, as capture requires)."""
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
