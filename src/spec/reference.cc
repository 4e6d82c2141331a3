// fp64 reference attention, the naive low-precision model, random inputs and error measures.
#include "spec/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qattn::spec {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// Visits every (batch, head, query) row: calls fn(qrow, krows, vrows, orow_index) with pointers to
// the row of Q, the (seqlen_k, d_qk) block of K and the (seqlen_k, d_v) block of V.
template <class Fn>
void for_each_row(const AttentionProblem& p, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, Fn fn) {
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      int64_t hk = p.kv_head(h);
      const double* kb = k.data() + (b * p.heads_kv + hk) * p.seqlen_k * p.d_qk;
      const double* vb = v.data() + (b * p.heads_kv + hk) * p.seqlen_k * p.d_v;
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        int64_t row = (b * p.heads_q + h) * p.seqlen_q + i;
        fn(i, q.data() + row * p.d_qk, kb, vb, row);
      }
    }
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t t = 0; t < n; ++t) s += a[t] * b[t];
  return s;
}

}  // namespace

const char* to_string(MaskKind m) {
  switch (m) {
    case MaskKind::None: return "none";
    case MaskKind::Causal: return "causal";
    case MaskKind::CausalTopLeft: return "causal_top_left";
    case MaskKind::Window: return "window";
  }
  return "?";
}

bool AttentionProblem::visible(int64_t q, int64_t k) const {
  if (k < 0 || k >= seqlen_k) return false;
  int64_t off = seqlen_k - seqlen_q;
  switch (mask) {
    case MaskKind::None: return true;
    case MaskKind::Causal: return k <= q + off;
    case MaskKind::CausalTopLeft: return k <= q;
    case MaskKind::Window: return k >= q + off - window_left && k <= q + off + window_right;
  }
  return true;
}

double AttentionProblem::flops_madd() const {
  return double(batch) * double(heads_q) * double(seqlen_q) * double(seqlen_k) * double(d_qk + d_v);
}

std::string validate(const AttentionProblem& p) {
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.seqlen_q < 1 || p.seqlen_k < 1 || p.d_qk < 1 ||
      p.d_v < 1)
    return "every problem size must be at least 1";
  if (p.heads_q % p.heads_kv != 0)
    return "heads_q (" + std::to_string(p.heads_q) + ") is not a multiple of heads_kv (" +
           std::to_string(p.heads_kv) + ")";
  if (!std::isfinite(p.softmax_scale)) return "softmax_scale is not finite";
  return {};
}

AttentionResult reference_attention(const AttentionProblem& p, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v) {
  AttentionResult r;
  r.o.assign(p.o_size(), 0.0);
  r.lse.assign(p.lse_size(), kNegInf);
  std::vector<double> s(size_t(p.seqlen_k));
  for_each_row(p, q, k, v, [&](int64_t i, const double* qr, const double* kb, const double* vb, int64_t row) {
    double m = kNegInf;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      s[j] = p.visible(i, j) ? p.softmax_scale * dot(qr, kb + j * p.d_qk, p.d_qk) : kNegInf;
      m = std::max(m, s[j]);
    }
    if (m == kNegInf) return;  // no visible key: O = 0, LSE = -inf
    double l = 0;
    double* o = r.o.data() + row * p.d_v;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      if (s[j] == kNegInf) continue;
      double e = std::exp(s[j] - m);
      l += e;
      for (int64_t c = 0; c < p.d_v; ++c) o[c] += e * vb[j * p.d_v + c];
    }
    for (int64_t c = 0; c < p.d_v; ++c) o[c] /= l;
    r.lse[size_t(row)] = m + std::log(l);
  });
  return r;
}

AttentionResult naive_attention_lowp(const AttentionProblem& p, const std::vector<double>& q,
                                     const std::vector<double>& k, const std::vector<double>& v,
                                     const RoundFn& round_p, const RoundFn& round_o) {
  AttentionResult r;
  r.o.assign(p.o_size(), 0.0);
  r.lse.assign(p.lse_size(), kNegInf);
  std::vector<double> s(size_t(p.seqlen_k));
  std::vector<double> acc(size_t(p.d_v));
  for_each_row(p, q, k, v, [&](int64_t i, const double* qr, const double* kb, const double* vb, int64_t row) {
    double m = kNegInf;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      s[j] = p.visible(i, j) ? f32(f32(dot(qr, kb + j * p.d_qk, p.d_qk)) * p.softmax_scale) : kNegInf;
      m = std::max(m, s[j]);
    }
    if (m == kNegInf) return;
    double l = 0;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      s[j] = s[j] == kNegInf ? 0.0 : f32(std::exp(f32(s[j] - m)));
      l = f32(l + s[j]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      double pj = round_p(f32(s[j] / l));
      if (pj == 0) continue;
      for (int64_t c = 0; c < p.d_v; ++c) acc[c] += pj * vb[j * p.d_v + c];
    }
    double* o = r.o.data() + row * p.d_v;
    for (int64_t c = 0; c < p.d_v; ++c) o[c] = round_o(f32(acc[c]));
    r.lse[size_t(row)] = f32(m + f32(std::log(l)));
  });
  return r;
}

std::vector<double> random_normal(size_t n, uint64_t seed, uint64_t stream) {
  // splitmix64 over a counter seeded from (seed, stream).
  uint64_t state = seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xD1B54A32D192ED03ull;
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [&next]() {  // in (0, 1): 53 random bits, never 0
    return (double(next() >> 11) + 0.5) * 0x1.0p-53;
  };
  std::vector<double> out(n);
  const double two_pi = 6.283185307179586476925;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = uniform(), u2 = uniform();
    double rad = std::sqrt(-2.0 * std::log(u1));
    out[i] = rad * std::cos(two_pi * u2);
    if (i + 1 < n) out[i + 1] = rad * std::sin(two_pi * u2);
  }
  return out;
}

AttentionInputs random_inputs(const AttentionProblem& p, uint64_t seed) {
  return {random_normal(p.q_size(), seed, 0), random_normal(p.k_size(), seed, 1), random_normal(p.v_size(), seed, 2)};
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (a[i] == b[i]) continue;  // includes equal infinities
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  return m;
}

double rel_frobenius(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (a[i] != b[i]) {
      double d = a[i] - b[i];
      num += d * d;
    }
    if (std::isfinite(b[i])) den += b[i] * b[i];
  }
  num = std::sqrt(num);
  den = std::sqrt(den);
  return den > 0 ? num / den : num;
}

}  // namespace qattn::spec
