"""attn_implementation="qattn" in real transformers models on a GPU (qattn.integrations.transformers).

    python3 tests/gpu/transformers_check.py [--csv F] [--speed-csv F]

Random-weight Llama (GQA 8/2, d 128), Qwen2 (GQA 8/2, d 128, biased q/k/v projections), Mistral
(sliding window 64) and Gemma2 (softcap 50, sliding layers, d 128) models of 2 layers in bf16 (built
from configs; no download). For each: a padded
prefill batch (left or right padding, 3 rows up to 300 tokens) and 24 teacher-forced decoding steps
with the KV cache. The logits of qattn, of sdpa (bf16) and of the same model in float32 with eager
attention (the reference) are compared on the real tokens: pass when qattn's max error is at most
2x sdpa's + 1e-2. Then generate() (greedy, 32 new tokens) runs with qattn and with sdpa; the share
of equal tokens is reported (random models have near-ties, so it is not a gate). Exit 1 on failure.

With --speed-csv: generate() throughput of Llama and Qwen2 models of 4 layers (hidden 2048, GQA 16/4,
d 128, bf16) on a left-padded batch of 8 prompts of 256-1024 tokens, 128 new tokens each (greedy,
min_new_tokens = max_new_tokens), qattn and sdpa in the same process: one warm-up generate each,
then 3 timed ones alternating, the median kept; tokens/s = new tokens / time.
"""
import time
import argparse
import copy
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import qattn.integrations.transformers as qtf  # noqa: E402


def model_for(kind, big=False, reference=True):
    torch.manual_seed(0)
    common = dict(vocab_size=1000, hidden_size=1024, intermediate_size=2048, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096)
    if big:
        common.update(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
                      num_key_value_heads=4)
    if kind == "llama":
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif kind == "qwen2":
        cfg, cls = transformers.Qwen2Config(use_sliding_window=False, **common), transformers.Qwen2ForCausalLM
    elif kind == "mistral":
        cfg, cls = transformers.MistralConfig(sliding_window=64, **common), transformers.MistralForCausalLM
    else:
        cfg = transformers.Gemma2Config(sliding_window=64, head_dim=128, attn_logit_softcapping=50.0,
                                        query_pre_attn_scalar=128, **common)
        cls = transformers.Gemma2ForCausalLM
    cfg._attn_implementation = "eager"
    m = cls(cfg).eval()
    ref = copy.deepcopy(m).float().cuda() if reference else None
    return m.to(torch.bfloat16).cuda(), ref


def speed(path):
    """generate() tokens/s with qattn and sdpa (see the module comment); rows to `path`."""
    out = []
    for kind in ("llama", "qwen2"):
        model, _ = model_for(kind, big=True, reference=False)
        g = torch.Generator(device="cpu").manual_seed(3)
        b, n, new = 8, 1024, 128
        ids = torch.randint(0, 1000, (b, n), generator=g).cuda()
        mask = torch.ones(b, n, dtype=torch.long, device="cuda")
        for i, ln in enumerate(torch.randint(256, n + 1, (b,), generator=g).tolist()):
            mask[i, :n - ln] = 0
        times = {qtf.NAME: [], "sdpa": []}

        def gen(impl):
            model.set_attn_implementation(impl)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                r = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                   do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            assert r.shape[1] == n + new
            return time.perf_counter() - t0
        for impl in times:
            gen(impl)  # warm-up: kernels built and loaded
        for rnd in range(3):
            for impl in (list(times) if rnd % 2 == 0 else list(times)[::-1]):
                times[impl].append(gen(impl))
        med = {k: sorted(v)[1] for k, v in times.items()}
        for impl, t in med.items():
            tps = b * new / t
            out.append((kind, impl, b, int(mask.sum()), new, round(t, 4), round(tps, 1), round(med["sdpa"] / t, 3)))
            print(f"{kind:6s} {impl:6s} generate {b} x {new} new tokens after {int(mask.sum())} prompt tokens: "
                  f"{t:.3f} s, {tps:.0f} tokens/s ({med['sdpa'] / t:.2f}x sdpa)", flush=True)
        model = None
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        f.write("model,impl,batch,prompt_tokens,new_tokens,seconds,tokens_per_s,vs_sdpa,gpu\n")
        for r in out:
            f.write(",".join(str(x) for x in r) + "," + torch.cuda.get_device_name() + "\n")


def run(model, impl, ids, mask, steps):
    """Prefill logits (batch, len, vocab) and the decoding steps' last logits (steps + 1, batch, vocab)."""
    model.set_attn_implementation(impl)
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        pre = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits.float()
        out = [pre[:, -1]]
        m = mask
        for t in range(steps.shape[1]):
            m = torch.cat([m, torch.ones_like(m[:, :1])], 1)
            out.append(model(input_ids=steps[:, t:t + 1], attention_mask=m, past_key_values=cache,
                             use_cache=True).logits[:, -1].float())
    return pre, torch.stack(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv")
    ap.add_argument("--speed-csv")
    ap.add_argument("--speed-only", action="store_true")
    a = ap.parse_args()
    if a.speed_csv:
        speed(a.speed_csv)
        if a.speed_only:
            return 0
    rows, fails = [], 0
    for kind, padding in (("llama", "left"), ("qwen2", "left"), ("mistral", "right"), ("gemma2", "left")):
        model, ref = model_for(kind)
        g = torch.Generator(device="cpu").manual_seed(1)
        n = 300
        ids = torch.randint(0, 1000, (3, n), generator=g).cuda()
        mask = torch.ones(3, n, dtype=torch.long, device="cuda")
        if padding == "left":
            mask[0, :37] = 0
            mask[2, :150] = 0
        else:
            mask[1, 211:] = 0
        steps = torch.randint(0, 1000, (3, 24), generator=g).cuda()
        if padding == "right":  # decoding continues after the real tokens: only rows without right padding
            keep = torch.tensor([0, 2], device="cuda")
            dec_ids, dec_mask, dec_steps = ids[keep], mask[keep], steps[keep]
        else:
            dec_ids, dec_mask, dec_steps = ids, mask, steps
        real = mask.bool()
        pre_q, _ = run(model, qtf.NAME, ids, mask, steps[:, :0])
        pre_s, _ = run(model, "sdpa", ids, mask, steps[:, :0])
        pre_r, _ = run(ref, "eager", ids, mask, steps[:, :0])
        _, dec_q = run(model, qtf.NAME, dec_ids, dec_mask, dec_steps)
        _, dec_s = run(model, "sdpa", dec_ids, dec_mask, dec_steps)
        _, dec_r = run(ref, "eager", dec_ids, dec_mask, dec_steps)
        for what, q, s, r in (("prefill", pre_q[real], pre_s[real], pre_r[real]), ("decode", dec_q, dec_s, dec_r)):
            eq, es = (q - r).abs().max().item(), (s - r).abs().max().item()
            ok = eq <= 2 * es + 1e-2
            fails += not ok
            rows.append((kind, padding, what, eq, es, "pass" if ok else "fail"))
            print(f"{kind:8s} {padding:5s} {what:8s} max |qattn - fp32| {eq:.4f}  |sdpa - fp32| {es:.4f}  "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
        gen = {}
        for impl in (qtf.NAME, "sdpa"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                gen[impl] = model.generate(input_ids=dec_ids[:, -100:], attention_mask=dec_mask[:, -100:],
                                           max_new_tokens=32, do_sample=False)[:, 100:]
        same = (gen[qtf.NAME] == gen["sdpa"]).float().mean().item()
        print(f"{kind:8s} generate: 32 greedy tokens x {gen['sdpa'].shape[0]} rows, {same:.0%} equal to sdpa's", flush=True)
        rows.append((kind, padding, "generate_equal_tokens", same, float("nan"), "info"))
        del model, ref
        torch.cuda.empty_cache()
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("model,padding,check,qattn_max_err,sdpa_max_err,result\n")
            for r in rows:
                f.write(",".join(str(x) for x in r) + "\n")
    print(f"transformers_check: {sum(1 for r in rows if r[-1] == 'pass')}/{sum(1 for r in rows if r[-1] != 'info')} "
          f"checks pass", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
