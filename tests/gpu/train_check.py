"""Issue 19's training run: random-init transformers models trained for --steps steps of AdamW with
attn_implementation="qattn" and with a reference attention, the same data and initial weights; the
loss curves must agree within bf16 noise.

    python3 tests/gpu/train_check.py [--steps 100] [--csv F] [--models llama,llama-padded,gemma2] [--device cuda]

- llama: LlamaForCausalLM (4 layers, hidden 512, GQA 8/2, d 64, causal); reference "sdpa".
- llama-padded: the same Llama on left-padded batches (each row 0-127 padding tokens, masked in
  attention_mask and in the labels): qattn packs the real tokens for attention_varlen, whose
  backward is the document mask's; reference "sdpa".
- gemma2: Gemma2ForCausalLM (the same sizes, attention logits soft-capped at 50, sliding windows of
  128 keys on every other layer, final logits capped at 30); reference "flex_attention"
  (FlexAttention with transformers' softcap score_mod and sliding-window block mask).
Both in bf16 (weights, activations and the AdamW update: every attention sees bf16 q, k, v),
batch 8 x 512 tokens from a fixed random Markov chain of 512 tokens (4 successors per token), 4
batches repeated (so the models also memorise them: the loss falls from ln 512 = 6.2 to about 0.01
in 100 steps, through a steep middle where curves that differ by rounding drift apart); AdamW lr 1e-3, betas
(0.9, 0.95), weight decay 0.01; one torch seed for the initial weights of every run.

"bf16 noise" is measured, not assumed: each model also trains with "eager" attention (transformers'
matmul + softmax in bf16, another correct implementation). Pass, per model: max over steps of
|loss_qattn - loss_ref| <= 2 x max over steps of |loss_eager - loss_ref| + 0.02, and every run's
loss falls by more than 1 nat (the model learns). Also printed: the median ms per training step
after 10 steps (information only; bench/ holds the speed targets). Exit 1 on a failure.
With --plant: qattn's backward returns dK with its sign flipped (a planted bug that must fail the rule).
"""
import argparse
import csv
import math
import os
import statistics
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import qattn.integrations.transformers as qtf  # noqa: E402  (importing it registers "qattn")

VOCAB, BATCH, SEQ, NBATCHES = 512, 8, 512, 4


def make_data(device):
    """NBATCHES (BATCH, SEQ) batches of a random Markov chain: each token has 4 successors."""
    g = torch.Generator().manual_seed(7)
    succ = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)
    x = torch.empty(NBATCHES * BATCH, SEQ, dtype=torch.long)
    x[:, 0] = torch.randint(0, VOCAB, (NBATCHES * BATCH,), generator=g)
    for t in range(1, SEQ):
        x[:, t] = succ[x[:, t - 1], torch.randint(0, 4, (NBATCHES * BATCH,), generator=g)]
    return [b.to(device) for b in x.split(BATCH)]


def make_masks(device):
    """Left padding per row (0-127 tokens) for each batch: (attention_mask, labels mask) pairs."""
    g = torch.Generator().manual_seed(11)
    out = []
    for _ in range(NBATCHES):
        pad = torch.randint(0, 128, (BATCH,), generator=g)
        keep = torch.arange(SEQ)[None, :] >= pad[:, None]
        first_real = torch.arange(SEQ)[None, :] == pad[:, None]  # predicted from a padding position
        out.append((keep.long().to(device), (keep & ~first_real).to(device)))
    return out


def config(kind):
    kind = kind.removesuffix("-padded")
    common = dict(vocab_size=VOCAB, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=SEQ)
    if kind == "llama":
        return transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    if kind == "gemma2":
        return (transformers.Gemma2Config(sliding_window=128, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                          query_pre_attn_scalar=64, **common), transformers.Gemma2ForCausalLM)
    raise SystemExit(f"unknown model {kind!r}: expected llama or gemma2")


def train(kind, impl, steps, data, device, init_state):
    masks = make_masks(device) if kind.endswith("-padded") else None
    cfg, cls = config(kind)
    cfg._attn_implementation = impl
    model = cls(cfg)
    model.load_state_dict(init_state)
    model = model.to(device=device, dtype=torch.bfloat16).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
    losses, times = [], []
    for step in range(steps):
        x = data[step % len(data)]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if masks is None:
            loss = model(input_ids=x, labels=x).loss
        else:
            am, lm = masks[step % len(masks)]
            loss = model(input_ids=x, attention_mask=am, labels=x.masked_fill(~lm, -100)).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        v = loss.item()  # synchronises
        times.append(time.perf_counter() - t0)
        if not math.isfinite(v):
            raise RuntimeError(f"{kind}/{impl}: loss {v} at step {step}")
        losses.append(v)
    return losses, statistics.median(times[10:]) * 1e3 if len(times) > 10 else float("nan")


def plant():
    """qattn's backward with dK negated: the rule must catch it."""
    from qattn import _backward
    real = _backward.launch

    def flipped(*a, **k):
        dq, dk, dv, *rest = real(*a, **k)  # (+ the gradients of learnable slopes / tables, where asked)
        return (dq, -dk, dv, *rest)
    _backward.launch = flipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--csv")
    ap.add_argument("--models", default="llama,llama-padded,gemma2")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--plant", action="store_true")
    a = ap.parse_args()
    if a.plant:
        plant()
    device = torch.device(a.device)
    data = make_data(device)
    refs = {"llama": "sdpa", "llama-padded": "sdpa", "gemma2": "flex_attention"}
    rows, fails = [], 0
    assert qtf.NAME == "qattn"
    for kind in a.models.split(","):
        cfg, cls = config(kind)
        torch.manual_seed(0)
        init_state = cls(cfg).state_dict()
        curves, ms = {}, {}
        for impl in (refs[kind], "eager", "qattn"):
            t0 = time.time()
            curves[impl], ms[impl] = train(kind, impl, a.steps, data, device, init_state)
            print(f"{kind:6s} {impl:14s} loss {curves[impl][0]:.3f} -> {curves[impl][-1]:.3f}  "
                  f"{ms[impl]:7.2f} ms/step  ({time.time() - t0:.0f} s with builds)", flush=True)
        ref = curves[refs[kind]]
        dq = max(abs(x - y) for x, y in zip(curves["qattn"], ref))
        de = max(abs(x - y) for x, y in zip(curves["eager"], ref))
        bound = 2 * de + 0.02
        learned = all(c[0] - c[-1] > 1.0 for c in curves.values())
        ok = dq <= bound and learned
        fails += not ok
        print(f"{kind}: max |qattn - {refs[kind]}| {dq:.4f}, max |eager - {refs[kind]}| {de:.4f}, bound {bound:.4f}; "
              f"{'learns' if learned else 'DOES NOT LEARN'} -> {'pass' if ok else 'FAIL'}", flush=True)
        for impl, c in curves.items():
            for step, v in enumerate(c):
                rows.append(dict(model=kind, impl=impl, step=step, loss=round(v, 5), ms_per_step=round(ms[impl], 3)))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["model", "impl", "step", "loss", "ms_per_step"], lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    print(f"train_check: {fails} failure(s){' (planted bug)' if a.plant else ''}", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
