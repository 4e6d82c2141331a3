// The fp64 reference attention every interpreter run is compared with, a low-precision "naive"
// attention that sets the tolerance (FlashAttention's rule), and deterministic random inputs.
// Tensors are flat std::vector<double> in BHSD order: Q (batch, heads_q, seqlen_q, d_qk),
// K (batch, heads_kv, seqlen_k, d_qk), V (batch, heads_kv, seqlen_k, d_v),
// O (batch, heads_q, seqlen_q, d_v), LSE (batch, heads_q, seqlen_q).
// Independent of the TL (spec must not depend on tl).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "qattn/kinds.h"

namespace qattn::spec {

// Which keys a query sees (include/qattn/kinds.h). With off = seqlen_k - seqlen_q:
//   None: every key; Causal (bottom-right aligned): k <= q + off; CausalTopLeft: k <= q;
//   Window: q + off - window_left <= k <= q + off + window_right (a side < 0: no limit on that
//   side). Bounds and Named see every key
//   here (the bounds always apply; a Named mask is the ScoreVariant's keep).
using MaskKind = qattn::MaskKind;
using qattn::to_string;

struct AttentionProblem {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, d_qk = 1, d_v = 1;
  double softmax_scale = 1.0;
  MaskKind mask = MaskKind::None;
  int64_t window_left = 0, window_right = 0;  // Window only

  size_t q_size() const { return size_t(batch * heads_q * seqlen_q * d_qk); }
  size_t k_size() const { return size_t(batch * heads_kv * seqlen_k * d_qk); }
  size_t v_size() const { return size_t(batch * heads_kv * seqlen_k * d_v); }
  size_t o_size() const { return size_t(batch * heads_q * seqlen_q * d_v); }
  size_t lse_size() const { return size_t(batch * heads_q * seqlen_q); }
  // The kv head read by query head h (GQA/MQA): h / (heads_q / heads_kv).
  int64_t kv_head(int64_t h) const { return h / (heads_q / heads_kv); }
  // Whether key k is visible to query q under the mask (bounds excluded: 0 <= k < seqlen_k).
  bool visible(int64_t q, int64_t k) const;
  // Multiply-adds of one attention evaluation: batch * heads_q * seqlen_q * seqlen_k * (d_qk + d_v).
  double flops_madd() const;
};

// Empty when the problem is well formed (all sizes >= 1, heads_q a multiple of heads_kv,
// finite softmax_scale), otherwise a one-line reason.
std::string validate(const AttentionProblem& p);

// ---- attention variants (docs/spec.md "Variants", docs/tl.md "Score and Mask declarations") ----
// Small auxiliary inputs of a variant (ALiBi slopes, segment ids, a bias table), row-major, held as
// doubles (int32 tensors hold integral values). at() clamps every index into [0, extent - 1], the
// TL's rule for auxiliary reads (rows past seqlen_q and keys past seqlen_k read the last entry).
struct AuxTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  bool is_int = false;
  double at(std::initializer_list<int64_t> idx) const;
};
using AuxMap = std::map<std::string, AuxTensor>;

// Deterministic random contents for an auxiliary tensor of `shape`: int32 tensors get packed-
// sequence ids (per row of the last dimension: nondecreasing ids starting at 0, segment lengths
// random; equal row lengths give equal rows for equal seeds, so seg_q and seg_k agree when
// seqlen_q == seqlen_k); fp32 tensors get standard-normal values.
AuxTensor random_aux(const std::vector<int64_t>& shape, bool is_int, uint64_t seed);

// A score modification and an extra mask, applied by the reference at every element: with
// s = softmax_scale * (q . k) in natural-log units, s' = score(b, h, q, k, s) (identity when empty),
// then the key is hidden when keep(b, h, q, k) is false (every key kept when empty), on top of
// AttentionProblem::mask and the bounds.
struct ScoreVariant {
  std::function<double(int64_t b, int64_t h, int64_t q, int64_t k, double s)> score;
  std::function<bool(int64_t b, int64_t h, int64_t q, int64_t k)> keep;
  bool empty() const { return !score && !keep; }
};

struct AttentionResult {
  std::vector<double> o;    // O, BHSD
  std::vector<double> lse;  // LSE per (batch, head, query); -inf for a row with no visible key
};

// Exact attention in fp64. A row with no visible key gets O = 0 and LSE = -inf.
// Precondition: validate(p) is empty and the inputs have the sizes above.
// `variant` (may be null) adds a score modification and an extra mask.
AttentionResult reference_attention(const AttentionProblem& p, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const ScoreVariant* variant = nullptr);

using RoundFn = std::function<double(double)>;

// ---- the backward pass (docs/tl.md, "The backward pass") ----
// Gradients of the attention above for an upstream gradient dO (BHSD, shaped like O): dQ (like Q),
// dK (like K), dV (like V); dK and dV sum the query heads that read a kv head (GQA/MQA). With
// P = softmax(S) per row, dP = dO V^T, D = rowsum(dO * O) = rowsum(P * dP), dS = P * (dP - D):
// dV = P^T dO, dQ = softmax_scale * dS K, dK = softmax_scale * dS^T Q. A row with no visible key
// contributes nothing. `variant` may hide keys (keep) and modify scores (score): s' = score(s), and
// the gradient of s is dS times ds'/ds, taken by a central difference of variant->score (independent
// of the TL's symbolic derivative, `Compute Derivative`).
struct AttentionGrads {
  std::vector<double> dq, dk, dv;
};
AttentionGrads reference_attention_backward(const AttentionProblem& p, const std::vector<double>& q,
                                            const std::vector<double>& k, const std::vector<double>& v,
                                            const std::vector<double>& dout, const ScoreVariant* variant = nullptr);
// The same written with framework ops in the storage precision (the tolerance's model, FlashAttention's
// rule for gradients): S and the softmax in fp32, P = round(softmax), dP = round(fp32(dO V^T)),
// D = fp32(rowsum(P * dP)), dS = round(fp32(P * (dP - D))), and each gradient summed exactly and
// rounded once: dV = round(P^T dO), dQ = round(scale * dS K), dK = round(scale * dS^T Q).
AttentionGrads naive_attention_backward_lowp(const AttentionProblem& p, const std::vector<double>& q,
                                             const std::vector<double>& k, const std::vector<double>& v,
                                             const std::vector<double>& dout, const RoundFn& round_fn,
                                             const ScoreVariant* variant = nullptr);

// A naive attention in the storage precision, modelling what `softmax(Q K^T) V` written with
// framework ops in that precision computes: S = fp32(scale * Q K^T) (products summed exactly,
// rounded to fp32), row softmax in fp32, P = round_p(softmax) (the normalized probabilities in
// the storage dtype), O = round_o(P V) (fp32-exact sum, rounded to the output dtype); LSE in fp32.
// The inputs are used as given (they are already in the storage dtype).
AttentionResult naive_attention_lowp(const AttentionProblem& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const RoundFn& round_p, const RoundFn& round_o,
                                     const ScoreVariant* variant = nullptr);
inline AttentionResult naive_attention_lowp(const AttentionProblem& p, const std::vector<double>& q,
                                            const std::vector<double>& k, const std::vector<double>& v,
                                            const RoundFn& round_fn) {
  return naive_attention_lowp(p, q, k, v, round_fn, round_fn);
}

// n standard-normal values, deterministic in (seed, stream) and identical on every platform
// (splitmix64 + Box-Muller; no <random> distributions, whose output is implementation-defined).
std::vector<double> random_normal(size_t n, uint64_t seed, uint64_t stream = 0);

// Fresh random Q, K, V for p from one seed (streams 0, 1, 2).
struct AttentionInputs {
  std::vector<double> q, k, v;
};
AttentionInputs random_inputs(const AttentionProblem& p, uint64_t seed);

// Error measures between an output and the reference (same size): max |a - b| (a NaN counts as
// +inf; equal infinities count as 0), and ||a - b||_F / ||b||_F (||a - b||_F when ||b|| = 0).
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
double rel_frobenius(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace qattn::spec
