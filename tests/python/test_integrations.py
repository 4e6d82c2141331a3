"""qattn.integrations.transformers without a GPU (runs where torch and transformers are installed:
the GPU machine's suite; the CPU CI has neither, and these skip). The real kernels in real models:
tests/gpu/transformers_check.py.

qattn.attention is replaced by an fp32 torch attention that implements its arguments (causal
bottom-right, window, softcap, scale, segment ids); tiny random Llama / Mistral (sliding window) /
Gemma2 (softcap, sliding layers) models then run with attn_implementation="qattn" and "eager" on
the same weights: left- and right-padded prefill, decoding steps with the KV cache, packed
sequences, and the refusals.
"""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import qattn  # noqa: E402
from qattn import _attention  # noqa: E402
from qattn.integrations import transformers as qtf  # noqa: E402
from qattn import _varlen  # noqa: E402
from attention_standin import standin, varlen_standin  # noqa: E402


@pytest.fixture(autouse=True)
def fake_kernel(monkeypatch):
    monkeypatch.setattr(_attention, "attention", standin)
    monkeypatch.setattr(_varlen, "attention_varlen", varlen_standin)


def tiny(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif kind == "mistral":
        cfg = transformers.MistralConfig(sliding_window=12, **common)
        cls = transformers.MistralForCausalLM
    else:
        cfg = transformers.Gemma2Config(sliding_window=12, head_dim=32, attn_logit_softcapping=0.05,
                                        query_pre_attn_scalar=32, **common)
        cls = transformers.Gemma2ForCausalLM
    cfg._attn_implementation = "eager"
    return cls(cfg).to(torch.bfloat16).eval()


def logits(model, impl, **inputs):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(**inputs).logits.float()


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
@pytest.mark.parametrize("padding", ["left", "right", "none"])
def test_prefill_matches_eager(kind, padding):
    model = tiny(kind)
    ids = torch.randint(0, 256, (3, 30))
    mask = torch.ones(3, 30, dtype=torch.long)
    if padding == "left":
        mask[0, :7] = 0
        mask[2, :20] = 0
    elif padding == "right":
        mask[1, 25:] = 0
    want = logits(model, "eager", input_ids=ids, attention_mask=mask)
    got = logits(model, qtf.NAME, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    assert (got[real] - want[real]).abs().max().item() < 2e-2


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
def test_decoding_with_the_kv_cache_matches_eager(kind):
    """Left-padded prompts, then 16 decoding steps (q_len 1 against the cache) past the window."""
    model = tiny(kind)
    ids = torch.randint(0, 256, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :4] = 0
    steps = torch.randint(0, 256, (2, 16))
    outs = {}
    for impl in ("eager", qtf.NAME):
        model.set_attn_implementation(impl)
        cache = transformers.DynamicCache(config=model.config)
        m = mask.clone()
        with torch.no_grad():
            out = [model(input_ids=ids, attention_mask=m, past_key_values=cache, use_cache=True).logits[:, -1].float()]
            for t in range(steps.shape[1]):
                m = torch.cat([m, torch.ones(2, 1, dtype=torch.long)], 1)
                out.append(model(input_ids=steps[:, t:t + 1], attention_mask=m, past_key_values=cache,
                                 use_cache=True).logits[:, -1].float())
        outs[impl] = torch.stack(out)
    assert (outs[qtf.NAME] - outs["eager"]).abs().max().item() < 2e-2


def test_generate_runs_and_packed_sequences_stay_apart():
    model = tiny("llama")
    model.set_attn_implementation(qtf.NAME)
    ids = torch.randint(0, 256, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert out.shape == (2, 14)
    # two documents packed in one row (position_ids restart): the same logits as each one alone
    a, b = torch.randint(0, 256, (1, 10)), torch.randint(0, 256, (1, 7))
    pos = torch.cat([torch.arange(10), torch.arange(7)])[None]
    packed = logits(model, qtf.NAME, input_ids=torch.cat([a, b], 1), position_ids=pos)
    alone = torch.cat([logits(model, "eager", input_ids=a), logits(model, "eager", input_ids=b)], 1)
    assert (packed - alone).abs().max().item() < 2e-2


def test_refusals_name_what_qattn_cannot_run():
    model = tiny("llama")
    ids = torch.randint(0, 256, (1, 10))
    holes = torch.ones(1, 10, dtype=torch.long)
    holes[0, 4] = 0
    with pytest.raises(qattn.QattnError) as e:
        logits(model, qtf.NAME, input_ids=ids, attention_mask=holes)
    assert e.value.code == "PY0902" and "sdpa" in e.value.hint
    model.float()
    with pytest.raises(qattn.QattnError) as e:
        logits(model, qtf.NAME, input_ids=ids)
    assert e.value.code == "PY0901"
    assert qtf.mask_function(1, 4, 4, attention_mask=torch.ones(1, 4, dtype=torch.bool)) is None


def test_padding_is_resolved_once_per_forward(monkeypatch):
    """Every layer of a forward gets the same mask: a padded prefill packs the real tokens for the
    ragged-batch kernel, and a decoding step makes segment ids (marked ordered for qattn.attention's
    own check), each once per forward however many layers run."""
    model = tiny("llama")
    made, real = [], qtf._segments
    monkeypatch.setattr(qtf, "_segments", lambda *a, **kw: made.append(1) or real(*a, **kw))
    varlen_calls, seen = [], []
    monkeypatch.setattr(_varlen, "attention_varlen", lambda *a, **kw: varlen_calls.append(a[3]) or varlen_standin(*a, **kw))
    monkeypatch.setattr(_attention, "attention", lambda *a, **kw: seen.append(kw.get("segment_ids")) or standin(*a, **kw))
    ids = torch.randint(0, 256, (2, 20))
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[0, :5] = 0
    cache = transformers.DynamicCache(config=model.config)
    model.set_attn_implementation(qtf.NAME)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
    layers = model.config.num_hidden_layers
    assert len(made) == 1 and len(varlen_calls) == layers and not seen  # the prefill: packed, 15 + 20 tokens
    assert all(c is varlen_calls[0] for c in varlen_calls) and varlen_calls[0].tolist() == [0, 15, 35]
    step = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
    with torch.no_grad():
        model(input_ids=ids[:, :1], attention_mask=step, past_key_values=cache, use_cache=True)
    assert len(made) == 2 and len(seen) == layers  # the decoding step: segment ids, made once
    assert all(s is seen[0] for s in seen) and all(_attention._known_sorted(t) for t in seen[0])
    assert not _attention._known_sorted(torch.zeros(1, 4, dtype=torch.int32))


@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_training_on_a_padded_batch_matches_eager_gradients(monkeypatch, kind):
    """Under autograd a padded batch's real tokens go packed to the ragged launch (attention_varlen,
    differentiable) as in inference; the weight gradients equal eager attention's on the real tokens'
    loss (within 2x the bf16 autocast's own difference). attention_with_kvcache refuses inputs that
    require grad (PY0109) instead of returning an output that carries no gradient."""
    varlen_calls = []
    monkeypatch.setattr(_varlen, "attention_varlen", lambda *a, **kw: varlen_calls.append(1) or varlen_standin(*a, **kw))
    model = tiny(kind).float().train()  # fp32 weights: the gradients compare without bf16 rounding
    ids = torch.randint(0, 256, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[0, :6] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[0, 6] = -100  # the first real token is predicted from a padding position (labels shift by one)
    grads = {}
    # the reference: eager attention in fp32; the noise scale: eager under the same bf16 autocast as qattn
    for impl, amp in (("eager", False), ("eager-bf16", True), (qtf.NAME, True)):
        model.zero_grad(set_to_none=True)
        model.set_attn_implementation(impl.split("-")[0])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):  # qattn runs 16-bit inputs
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        grads[impl] = {n: p.grad.detach().clone() for n, p in model.named_parameters() if "q_proj" in n or "v_proj" in n}
    assert varlen_calls
    assert grads[qtf.NAME]  # the attention's inputs got gradients
    for n, g in grads["eager"].items():
        err = (grads[qtf.NAME][n] - g).abs().max().item()
        noise = (grads["eager-bf16"][n] - g).abs().max().item()
        assert err <= 2 * noise + 1e-3 * g.abs().max().item(), (n, err, noise)
    q = torch.randn(6, 2, 16, requires_grad=True)
    monkeypatch.undo()
    with pytest.raises(qattn.QattnError) as e:
        qattn.attention_with_kvcache(q[None], q.detach()[None], q.detach()[None], torch.tensor([6], dtype=torch.int32))
    assert e.value.code == "PY0109"
