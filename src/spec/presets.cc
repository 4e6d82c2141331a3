// Named presets: the attention shapes of real models, taken from their published configs
// (Hugging Face config.json unless noted). Defaults: bf16, bshd, causal for decoder LLMs.
#include <cmath>

#include "spec/spec.h"

namespace qattn::spec {

namespace {

Preset make(std::string name, int hq, int hkv, int dqk, int dv, Mask mask, std::string description,
            std::string source) {
  Preset p;
  p.spec.name = std::move(name);
  p.spec.heads_q = hq;
  p.spec.heads_kv = hkv;
  p.spec.head_dim_qk = dqk;
  p.spec.head_dim_v = dv;
  p.spec.dtype = DType::BF16;
  p.spec.mask = mask;
  p.description = std::move(description);
  p.source = std::move(source);
  return p;
}

const Mask kCausal{MaskKind::Causal};
const Mask kNone{};

std::vector<Preset> build() {
  std::vector<Preset> v;
  v.push_back(make("llama2-7b", 32, 32, 128, 128, kCausal, "Llama 2 7B: MHA, 32 heads of 128",
                   "meta-llama/Llama-2-7b-hf: hidden_size 4096, num_attention_heads 32, num_key_value_heads 32"));
  v.push_back(make("llama3-8b", 32, 8, 128, 128, kCausal, "Llama 3 8B: GQA, 32 query heads share 8 KV heads",
                   "meta-llama/Meta-Llama-3-8B: hidden_size 4096, num_attention_heads 32, num_key_value_heads 8"));
  v.push_back(make("llama3.1-405b", 128, 8, 128, 128, kCausal, "Llama 3.1 405B: GQA 128/8 (group of 16)",
                   "meta-llama/Llama-3.1-405B: hidden_size 16384, num_attention_heads 128, num_key_value_heads 8"));
  v.push_back(make("qwen2.5-72b", 64, 8, 128, 128, kCausal, "Qwen2.5 72B: GQA 64/8",
                   "Qwen/Qwen2.5-72B: hidden_size 8192, num_attention_heads 64, num_key_value_heads 8"));
  v.push_back(make("llama3.2-1b", 32, 8, 64, 64, kCausal, "Llama 3.2 1B: GQA 32/8 with head dim 64",
                   "meta-llama/Llama-3.2-1B: hidden_size 2048, num_attention_heads 32, num_key_value_heads 8, "
                   "head_dim 64"));
  v.push_back(make("mistral-7b", 32, 8, 128, 128, Mask{MaskKind::Window, 4096, 0},
                   "Mistral 7B v0.1: GQA 32/8, causal sliding window (a token sees itself and 4096 before)",
                   "mistralai/Mistral-7B-v0.1: num_attention_heads 32, num_key_value_heads 8, sliding_window "
                   "4096; mistral-src masks with triu(diagonal=-sliding_window)"));
  v.push_back(make("starcoder-15b", 48, 1, 128, 128, kCausal, "StarCoder 15.5B: MQA, 48 query heads share 1 KV head",
                   "bigcode/starcoder: n_embd 6144, n_head 48, multi_query true"));
  v.push_back(make("gemma-7b", 16, 16, 256, 256, kCausal, "Gemma 7B: MHA with head dim 256",
                   "google/gemma-7b: num_attention_heads 16, num_key_value_heads 16, head_dim 256"));
  {
    // Gemma 2: the attention logits are soft-capped at 50 (attn_logit_softcapping); every other
    // layer also has a 4096-key sliding window (add --window 4096,0 for those). query_pre_attn_scalar
    // 256 makes the softmax scale 1/sqrt(256), the default for head dim 256.
    Preset p = make("gemma2-9b", 16, 8, 256, 256, kCausal, "Gemma 2 9B: GQA 16/8 with head dim 256, logit softcapping 50",
                    "google/gemma-2-9b: num_attention_heads 16, num_key_value_heads 8, head_dim 256, "
                    "attn_logit_softcapping 50.0, sliding_window 4096 (alternate layers), query_pre_attn_scalar 256");
    p.spec.variants.softcap = 50.0;
    v.push_back(p);
  }
  v.push_back(make("phi3-mini", 32, 32, 96, 96, kCausal, "Phi-3 mini: MHA with head dim 96",
                   "microsoft/Phi-3-mini-4k-instruct: hidden_size 3072, num_attention_heads 32, "
                   "num_key_value_heads 32"));
  {
    // MLA prefill: K/V are decompressed per head, so it is MHA with d_qk = 128 (nope) + 64 (rope) and
    // d_v = 128. DeepSeek scales 1/sqrt(192) by mscale^2, mscale = 0.1 * ln(40) + 1 (YaRN factor 40).
    Preset p = make("deepseek-v3-mla-prefill", 128, 128, 192, 128, kCausal,
                    "DeepSeek-V3 MLA in prefill form: 128 heads, d_qk 192, d_v 128, YaRN softmax scale",
                    "deepseek-ai/DeepSeek-V3: num_attention_heads 128, qk_nope_head_dim 128, qk_rope_head_dim 64, "
                    "v_head_dim 128, rope_scaling yarn factor 40 mscale_all_dim 1.0");
    double mscale = 0.1 * std::log(40.0) + 1.0;
    p.spec.softmax_scale = mscale * mscale / std::sqrt(192.0);
    v.push_back(p);
  }
  v.push_back(make("bert-large", 16, 16, 64, 64, kNone, "BERT large: bidirectional encoder, MHA 16 heads of 64, no mask",
                   "google-bert/bert-large-uncased: hidden_size 1024, num_attention_heads 16"));
  return v;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = build();
  return all;
}

const AttentionSpec* find_preset(std::string_view name) {
  std::string key = name_key(name);
  for (const auto& p : presets())
    if (name_key(p.spec.name) == key) return &p.spec;
  return nullptr;
}

const AttentionSpec* find_preset(std::string_view name, DiagSink& diags) {
  if (const AttentionSpec* s = find_preset(name)) return s;
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.spec.name);
  std::string near = closest_name(name, names);
  diags.error("SPEC0110", SrcLoc{}, "unknown preset \"" + std::string(name) + "\"",
              (near.empty() ? std::string() : "did you mean \"" + near + "\"? ") + "presets: " + join(names) +
                  " (`qattn presets` lists them)");
  return nullptr;
}

}  // namespace qattn::spec
