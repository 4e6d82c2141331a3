// fp64 reference attention, the naive low-precision model, random inputs and error measures.
#include "spec/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qattn::spec {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// splitmix64 over a counter seeded from (seed, stream): the generator behind every random input.
struct SplitMix {
  uint64_t state;
  SplitMix(uint64_t seed, uint64_t stream) : state(seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xD1B54A32D192ED03ull) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1): 53 bits, never 0
};

// One (batch, head, query) row: its indices and its flat row number in O / LSE.
struct Row {
  int64_t b, h, i, row;
};

// Visits every (batch, head, query) row: calls fn(row, qrow, krows, vrows) with pointers to the
// row of Q, the (seqlen_k, d_qk) block of K and the (seqlen_k, d_v) block of V.
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
        fn(Row{b, h, i, row}, q.data() + row * p.d_qk, kb, vb);
      }
    }
}

// Whether key j is visible from row r: the problem's mask and the bounds, then the variant's keep().
bool visible(const AttentionProblem& p, const ScoreVariant* var, const Row& r, int64_t j) {
  if (!p.visible(r.i, j)) return false;
  return !var || !var->keep || var->keep(r.b, r.h, r.i, j);
}

// The variant's score modification of s (identity without one).
double modified(const ScoreVariant* var, const Row& r, int64_t j, double s) {
  return var && var->score ? var->score(r.b, r.h, r.i, j, s) : s;
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t t = 0; t < n; ++t) s += a[t] * b[t];
  return s;
}

}  // namespace

bool AttentionProblem::visible(int64_t q, int64_t k) const {
  if (k < 0 || k >= seqlen_k) return false;
  int64_t off = seqlen_k - seqlen_q;
  switch (mask) {
    case MaskKind::None: case MaskKind::Bounds: case MaskKind::Named: return true;
    case MaskKind::Causal: return k <= q + off;
    case MaskKind::CausalTopLeft: return k <= q;
    case MaskKind::Window:  // a side < 0 is unbounded
      return (window_left < 0 || k >= q + off - window_left) && (window_right < 0 || k <= q + off + window_right);
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

// ---- auxiliary tensors of variants ---------------------------------------------------------
double AuxTensor::at(std::initializer_list<int64_t> idx) const {
  if (idx.size() != shape.size() || shape.empty()) return std::numeric_limits<double>::quiet_NaN();
  size_t off = 0, d = 0;
  for (int64_t i : idx) {
    const int64_t n = shape[d++];
    if (n < 1) return std::numeric_limits<double>::quiet_NaN();
    off = off * size_t(n) + size_t(std::clamp<int64_t>(i, 0, n - 1));
  }
  return off < data.size() ? data[off] : std::numeric_limits<double>::quiet_NaN();
}

AuxTensor random_aux(const std::vector<int64_t>& shape, bool is_int, uint64_t seed) {
  AuxTensor t;
  t.shape = shape;
  t.is_int = is_int;
  size_t n = shape.empty() ? 0 : 1;
  for (int64_t e : shape) n *= size_t(std::max<int64_t>(e, 0));
  if (!is_int) {
    t.data = random_normal(n, seed, 7);
    for (double& x : t.data) x = f32(x);  // an fp32 tensor holds fp32 values
    return t;
  }
  // Packed-sequence ids, one row of the last dimension at a time: segments of random length in
  // [1, max(1, len / 2)] (about four per row), numbered 0, 1, 2, ... Row r's generator depends on
  // (seed, r) only, so rows of equal length agree across tensors made with one seed.
  t.data.assign(n, 0.0);
  const int64_t len = n ? shape.back() : 0;
  const uint64_t longest = uint64_t(std::max<int64_t>(1, len / 2));
  for (size_t r = 0; len > 0 && r < n / size_t(len); ++r) {
    SplitMix rng(seed, 0x5E6000ull + r);
    int64_t id = 0, left = 1 + int64_t(rng.next() % longest);
    for (int64_t i = 0; i < len; ++i) {
      if (left == 0) ++id, left = 1 + int64_t(rng.next() % longest);
      t.data[r * size_t(len) + size_t(i)] = double(id);
      --left;
    }
  }
  return t;
}

AttentionResult reference_attention(const AttentionProblem& p, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const ScoreVariant* variant) {
  AttentionResult r;
  r.o.assign(p.o_size(), 0.0);
  r.lse.assign(p.lse_size(), kNegInf);
  std::vector<double> s(size_t(p.seqlen_k));
  for_each_row(p, q, k, v, [&](const Row& at, const double* qr, const double* kb, const double* vb) {
    const int64_t row = at.row;
    double m = kNegInf;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      // The score modification applies to s = softmax_scale * q.k, before any masking.
      s[j] = visible(p, variant, at, j) ? modified(variant, at, j, p.softmax_scale * dot(qr, kb + j * p.d_qk, p.d_qk))
                                        : kNegInf;
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
                                     const RoundFn& round_p, const RoundFn& round_o, const ScoreVariant* variant) {
  AttentionResult r;
  r.o.assign(p.o_size(), 0.0);
  r.lse.assign(p.lse_size(), kNegInf);
  std::vector<double> s(size_t(p.seqlen_k));
  std::vector<double> acc(size_t(p.d_v));
  for_each_row(p, q, k, v, [&](const Row& at, const double* qr, const double* kb, const double* vb) {
    const int64_t row = at.row;
    double m = kNegInf;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      // The score modification runs in fp32: its input and its result are rounded to fp32.
      s[j] = visible(p, variant, at, j)
                 ? f32(modified(variant, at, j, f32(f32(dot(qr, kb + j * p.d_qk, p.d_qk)) * p.softmax_scale)))
                 : kNegInf;
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

namespace {

// The backward of one (batch, head) row set, exact or in the storage precision (rnd != nullptr):
// P per row from the forward's softmax, then dV, dP, D, dS, dQ, dK as in reference.h.
AttentionGrads attention_backward(const AttentionProblem& p, const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, const std::vector<double>& dout, const RoundFn* rnd,
                                  const ScoreVariant* variant) {
  AttentionGrads g;
  g.dq.assign(p.q_size(), 0.0);
  g.dk.assign(p.k_size(), 0.0);
  g.dv.assign(p.v_size(), 0.0);
  const auto lo = [&](double x) { return rnd ? (*rnd)(x) : x; };   // a stored low-precision value
  const auto f = [&](double x) { return rnd ? f32(x) : x; };       // an fp32 intermediate
  std::vector<double> s(size_t(p.seqlen_k)), dp(size_t(p.seqlen_k)), dmod(size_t(p.seqlen_k), 1.0);
  std::vector<double> dq_acc(size_t(p.d_qk));
  const bool modifies = variant && variant->score;
  for_each_row(p, q, k, v, [&](const Row& at, const double* qr, const double* kb, const double* vb) {
    double m = kNegInf;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      if (!visible(p, variant, at, j)) {
        s[j] = kNegInf;
        continue;
      }
      const double raw = f(f(dot(qr, kb + j * p.d_qk, p.d_qk)) * p.softmax_scale);
      s[j] = raw;
      if (modifies) {
        // the score modification and its derivative (a central difference: independent of the TL's
        // symbolic one, accurate to ~1e-10 for the smooth modifications TL can write)
        s[j] = f(modified(variant, at, j, raw));
        const double h = 1e-5 * std::max(1.0, std::fabs(raw));
        dmod[size_t(j)] = (modified(variant, at, j, raw + h) - modified(variant, at, j, raw - h)) / (2 * h);
      }
      m = std::max(m, s[j]);
    }
    if (m == kNegInf) return;  // no visible key: no gradient flows through this row
    double l = 0;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      s[j] = s[j] == kNegInf ? 0.0 : f(std::exp(f(s[j] - m)));
      l = f(l + s[j]);
    }
    const double* dor = dout.data() + at.row * p.d_v;
    const int64_t hk = p.kv_head(at.h);
    double* dkb = g.dk.data() + (at.b * p.heads_kv + hk) * p.seqlen_k * p.d_qk;
    double* dvb = g.dv.data() + (at.b * p.heads_kv + hk) * p.seqlen_k * p.d_v;
    double dsum = 0;
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      s[j] = lo(f(s[j] / l));  // P
      dp[j] = lo(f(dot(dor, vb + j * p.d_v, p.d_v)));
      dsum += s[j] * dp[j];
    }
    dsum = f(dsum);  // D = rowsum(P * dP) = rowsum(dO * O)
    std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
    for (int64_t j = 0; j < p.seqlen_k; ++j) {
      if (s[j] == 0) continue;
      for (int64_t c = 0; c < p.d_v; ++c) dvb[j * p.d_v + c] += s[j] * dor[c];
      const double ds = lo(f(f(s[j] * (dp[j] - dsum)) * dmod[size_t(j)]));
      for (int64_t c = 0; c < p.d_qk; ++c) {
        dq_acc[size_t(c)] += ds * kb[j * p.d_qk + c];
        dkb[j * p.d_qk + c] += ds * qr[c];
      }
    }
    double* dqr = g.dq.data() + at.row * p.d_qk;
    for (int64_t c = 0; c < p.d_qk; ++c) dqr[c] = lo(f(p.softmax_scale * dq_acc[size_t(c)]));
  });
  for (double& x : g.dk) x = lo(f(p.softmax_scale * x));
  for (double& x : g.dv) x = lo(f(x));
  return g;
}

}  // namespace

AttentionGrads reference_attention_backward(const AttentionProblem& p, const std::vector<double>& q,
                                            const std::vector<double>& k, const std::vector<double>& v,
                                            const std::vector<double>& dout, const ScoreVariant* variant) {
  return attention_backward(p, q, k, v, dout, nullptr, variant);
}

AttentionGrads naive_attention_backward_lowp(const AttentionProblem& p, const std::vector<double>& q,
                                             const std::vector<double>& k, const std::vector<double>& v,
                                             const std::vector<double>& dout, const RoundFn& round_fn,
                                             const ScoreVariant* variant) {
  return attention_backward(p, q, k, v, dout, &round_fn, variant);
}

std::vector<double> random_normal(size_t n, uint64_t seed, uint64_t stream) {
  SplitMix rng(seed, stream);
  auto uniform = [&rng]() { return rng.uniform(); };
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
