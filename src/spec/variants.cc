// Built-in attention variants: auxiliary inputs, application order and the C++ reference formulas
// (docs/spec.md "Variants"). With off = seqlen_k - seqlen_q (bottom-right alignment):
//   alibi:          s' = s - slopes[h] * |q + off - k|
//   relative_bias:  s' = s + table[h, clamp(k - q - off, -NB/2, NB/2 - 1) + NB/2]
//   softcap:        s' = c * tanh(s / c)
//   prefix_lm P:    keep when k <= q + off or k < P
//   document:       keep when seg_q[b, q] == seg_k[b, k]
#include "spec/variants.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace qattn::spec {

std::vector<AuxInput> aux_inputs(const Variants& v) {
  std::vector<AuxInput> out;
  if (v.alibi) out.push_back({"alibi_slopes", {"heads_q"}, false, "ALiBi slope of each query head"});
  if (v.document) {
    out.push_back({"seg_q", {"batch", "seqlen_q"}, true, "segment (document) id of each query, nondecreasing"});
    out.push_back({"seg_k", {"batch", "seqlen_k"}, true, "segment (document) id of each key, nondecreasing"});
  }
  if (v.relative_bias)
    out.push_back({"rel_bias", {"heads_q", "NB"}, false, "bias of each relative-position bucket, per query head"});
  return out;
}

std::vector<std::string> score_order(const Variants& v) {
  std::vector<std::string> out;
  if (v.alibi) out.push_back("alibi");
  if (v.relative_bias) out.push_back("relpos");
  if (!v.score_mod.empty()) out.push_back("score_mod");
  if (v.softcap) out.push_back("softcap");  // last: it bounds the final logits (Gemma 2)
  return out;
}

std::vector<std::string> mask_order(const Variants& v) {
  std::vector<std::string> out;
  if (v.prefix_lm) out.push_back("prefix_lm");
  if (v.document) out.push_back("document");
  if (!v.mask_mod.empty()) out.push_back("mask_mod");
  return out;
}

std::optional<ScoreVariant> reference_variant(const Variants& v, const AttentionProblem& p, const AuxMap& aux) {
  if (v.custom()) return std::nullopt;
  ScoreVariant out;
  if (!v.any()) return out;
  auto get = [&aux](const char* name, size_t rank) -> const AuxTensor* {
    auto it = aux.find(name);
    return it != aux.end() && it->second.shape.size() == rank ? &it->second : nullptr;
  };
  const int64_t off = p.seqlen_k - p.seqlen_q;

  // Score modifications, in score_order: alibi, relative bias, softcap.
  const AuxTensor* slopes = nullptr;
  const AuxTensor* table = nullptr;
  if (v.alibi && !(slopes = get("alibi_slopes", 1))) return std::nullopt;
  if (v.relative_bias && !(table = get("rel_bias", 2))) return std::nullopt;
  if (v.alibi || v.relative_bias || v.softcap) {
    const AuxTensor sl = slopes ? *slopes : AuxTensor{};
    const AuxTensor tb = table ? *table : AuxTensor{};
    const bool alibi = v.alibi;
    const int64_t nb = v.relative_bias.value_or(0);
    const double cap = v.softcap.value_or(0.0);
    out.score = [sl, tb, alibi, nb, cap, off](int64_t b, int64_t h, int64_t q, int64_t k, double s) {
      if (alibi) s -= sl.at({h}) * double(std::llabs(q + off - k));
      if (nb > 0) s += tb.at({h, std::clamp<int64_t>(k - q - off, -nb / 2, nb / 2 - 1) + nb / 2});
      if (cap > 0) s = cap * std::tanh(s / cap);
      return s;
    };
  }

  // Extra masks: prefix-LM, document.
  const AuxTensor* seg_q = nullptr;
  const AuxTensor* seg_k = nullptr;
  if (v.document && (!(seg_q = get("seg_q", 2)) || !(seg_k = get("seg_k", 2)))) return std::nullopt;
  if (v.prefix_lm || v.document) {
    const AuxTensor sq = seg_q ? *seg_q : AuxTensor{};
    const AuxTensor sk = seg_k ? *seg_k : AuxTensor{};
    const bool document = v.document;
    const int64_t prefix = v.prefix_lm ? int64_t(*v.prefix_lm) : -1;
    out.keep = [sq, sk, document, prefix, off](int64_t b, int64_t h, int64_t q, int64_t k) {
      if (prefix >= 0 && !(k <= q + off || k < prefix)) return false;
      if (document && sq.at({b, q}) != sk.at({b, k})) return false;
      return true;
    };
  }
  return out;
}

}  // namespace qattn::spec
