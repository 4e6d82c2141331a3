"""qattn.attention called from several Python threads at once (a serving thread pool, a data
loader): every launch must succeed and give the same bits as the same call made alone.

    python3 tests/gpu/threads_check.py [--threads 8] [--iters 20]

Calls: bf16/fp16, d64/d128, causal / not / window, MHA/GQA, contiguous inputs and slices (a
(1, n, h, d) slice keeps the parent's batch stride). Each call runs once alone (the kernels get
built, the reference bits recorded), then all of them again from --threads threads at once, with
NaN-poisoned outputs (a fresh allocation per call). Kernel builds from several threads at once are
checked too (--cold: QATTN_CACHE_DIR is a new folder, and the threads build). Exit 1 on any error
or difference.
"""
import argparse
import os
import sys
import tempfile
import threading
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def calls(dev):
    g = torch.Generator(device="cpu").manual_seed(3)
    out = []
    for (b, n, hq, hkv, d, dt, kw) in [(1, 4099, 8, 8, 128, torch.bfloat16, dict(causal=True, return_lse=True)),
                                       (2, 700, 8, 2, 128, torch.bfloat16, dict(causal=False)),
                                       (1, 1000, 8, 1, 64, torch.float16, dict(causal="top_left", return_lse=True)),
                                       (1, 3001, 8, 8, 128, torch.bfloat16, dict(window=(256, 0)))]:
        q = torch.randn(b, n, hq, d, generator=g).to(dt)
        k = torch.randn(b, n, hkv, d, generator=g).to(dt)
        v = torch.randn(b, n, hkv, d, generator=g).to(dt)
        out.append((q.to(dev), k.to(dev), v.to(dev), kw))
        out.append((q[:, :256].to(dev), k[:, :256].to(dev), v[:, :256].to(dev), kw))  # slices, as cp_check --warm made
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--cold", action="store_true")
    a = ap.parse_args()
    if a.cold:
        os.environ["QATTN_CACHE_DIR"] = tempfile.mkdtemp(prefix="qattn-threads-")
    import qattn
    dev = torch.device("cuda", 0)
    cs = calls(dev)
    errors = []
    lock = threading.Lock()

    def run(i):
        q, k, v, kw = cs[i]
        try:
            r = qattn.attention(q, k, v, **kw)
            return r if isinstance(r, tuple) else (r,)
        except Exception as e:  # noqa: BLE001 (reported below with the call)
            with lock:
                errors.append(f"call {i} q{tuple(q.shape)} strides {q.stride()} {kw}: {type(e).__name__}: {e}\n"
                              + traceback.format_exc(limit=3))
            return None

    if a.cold:  # the first calls of every kernel from the threads at once: builds race on one cache
        ts = [threading.Thread(target=run, args=(i % len(cs),)) for i in range(max(a.threads, len(cs)))]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(f"cold start from {len(ts)} threads: {len(errors)} errors", flush=True)
    n0 = len(errors)
    ref = [run(i) for i in range(len(cs))]
    torch.cuda.synchronize()
    print(f"alone: {len(errors) - n0} errors in {len(cs)} calls", flush=True)
    for e in errors[n0:n0 + 3]:
        print(e.splitlines()[0][:600], flush=True)
    n0 = len(errors)
    diffs = []

    def worker(t):
        for it in range(a.iters):
            i = (t + it) % len(cs)
            got = run(i)
            if got is None or ref[i] is None:
                continue
            torch.cuda.current_stream().synchronize()
            for x, y in zip(got, ref[i]):
                if not torch.equal(x, y):
                    with lock:
                        diffs.append(f"thread {t} call {i}: differs from the call alone")
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(a.threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for e in errors[n0:n0 + 5] + diffs[:5]:
        print(e.splitlines()[0][:600], flush=True)
    print(f"threads: {a.threads} x {a.iters} calls: {len(errors)} errors, {len(diffs)} differences", flush=True)
    return 1 if errors or diffs else 0


if __name__ == "__main__":
    sys.exit(main())
