// The fp64 reference attention (spec/reference.h) against a direct softmax formula on tiny cases,
// the mask variants, fully masked rows, the GQA head mapping, the naive low-precision model and
// the random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "spec/reference.h"

namespace qattn::spec {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Direct formula for one (b, h, i): softmax over the visible keys, written independently.
void direct_row(const AttentionProblem& p, const AttentionInputs& in, int64_t b, int64_t h, int64_t i,
                std::vector<double>& o, double& lse) {
  int64_t hk = h * p.heads_kv / p.heads_q;  // = h / (heads_q / heads_kv) for divisible heads
  std::vector<double> w;
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < p.seqlen_k; ++j) {
    if (!p.visible(i, j)) continue;
    double s = 0;
    for (int64_t c = 0; c < p.d_qk; ++c)
      s += in.q[((b * p.heads_q + h) * p.seqlen_q + i) * p.d_qk + c] * in.k[((b * p.heads_kv + hk) * p.seqlen_k + j) * p.d_qk + c];
    w.push_back(std::exp(p.softmax_scale * s));
    keys.push_back(j);
  }
  o.assign(size_t(p.d_v), 0.0);
  double z = 0;
  for (double x : w) z += x;
  lse = keys.empty() ? -kInf : std::log(z);
  for (size_t t = 0; t < keys.size(); ++t)
    for (int64_t c = 0; c < p.d_v; ++c)
      o[c] += w[t] / z * in.v[((b * p.heads_kv + hk) * p.seqlen_k + keys[t]) * p.d_v + c];
}

void expect_matches_direct(const AttentionProblem& p, uint64_t seed) {
  ASSERT_EQ(validate(p), "");
  auto in = random_inputs(p, seed);
  auto r = reference_attention(p, in.q, in.k, in.v);
  ASSERT_EQ(r.o.size(), p.o_size());
  ASSERT_EQ(r.lse.size(), p.lse_size());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        std::vector<double> o;
        double lse;
        direct_row(p, in, b, h, i, o, lse);
        int64_t row = (b * p.heads_q + h) * p.seqlen_q + i;
        if (std::isinf(lse)) EXPECT_EQ(r.lse[row], -kInf);
        else EXPECT_NEAR(r.lse[row], lse, 1e-12 * (1 + std::fabs(lse)));
        for (int64_t c = 0; c < p.d_v; ++c) EXPECT_NEAR(r.o[row * p.d_v + c], o[c], 1e-12) << "row " << row;
      }
}

AttentionProblem tiny(MaskKind m) {
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 5;
  p.seqlen_k = 7;
  p.d_qk = 3;
  p.d_v = 2;
  p.softmax_scale = 0.7;
  p.mask = m;
  return p;
}

TEST(Reference, NoMaskMatchesDirectFormula) { expect_matches_direct(tiny(MaskKind::None), 1); }
TEST(Reference, CausalMatchesDirectFormula) { expect_matches_direct(tiny(MaskKind::Causal), 2); }
TEST(Reference, CausalTopLeftMatchesDirectFormula) { expect_matches_direct(tiny(MaskKind::CausalTopLeft), 3); }
TEST(Reference, WindowMatchesDirectFormula) {
  auto p = tiny(MaskKind::Window);
  p.window_left = 2;
  p.window_right = 1;
  expect_matches_direct(p, 4);
}
TEST(Reference, MqaMatchesDirectFormula) {
  auto p = tiny(MaskKind::None);
  p.heads_kv = 1;
  expect_matches_direct(p, 5);
}

TEST(Reference, HandComputedSingleRow) {
  // One query, two keys: scores 1 and 0 (scale 1); O = softmax . V.
  AttentionProblem p;
  p.seqlen_k = 2;
  p.d_qk = 1;
  p.d_v = 1;
  auto r = reference_attention(p, {1.0}, {1.0, 0.0}, {10.0, 20.0});
  double e = std::exp(1.0);
  EXPECT_NEAR(r.o[0], (10 * e + 20) / (e + 1), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(e + 1), 1e-12);
}

TEST(Reference, MaskVisibility) {
  AttentionProblem p;
  p.seqlen_q = 3;
  p.seqlen_k = 5;  // off = 2
  p.mask = MaskKind::Causal;
  EXPECT_TRUE(p.visible(0, 2));
  EXPECT_FALSE(p.visible(0, 3));
  EXPECT_TRUE(p.visible(2, 4));
  EXPECT_FALSE(p.visible(0, 5));  // bounds
  EXPECT_FALSE(p.visible(0, -1));
  p.mask = MaskKind::CausalTopLeft;
  EXPECT_TRUE(p.visible(1, 1));
  EXPECT_FALSE(p.visible(1, 2));
  p.mask = MaskKind::Window;
  p.window_left = 1;
  p.window_right = 0;
  EXPECT_FALSE(p.visible(1, 1));  // q + off - 1 = 2
  EXPECT_TRUE(p.visible(1, 2));
  EXPECT_TRUE(p.visible(1, 3));
  EXPECT_FALSE(p.visible(1, 4));
}

TEST(Reference, FullyMaskedRowsAreZeroWithMinusInfLse) {
  // Bottom-right causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see no key.
  AttentionProblem p;
  p.seqlen_q = 6;
  p.seqlen_k = 4;
  p.d_qk = 2;
  p.d_v = 3;
  p.mask = MaskKind::Causal;
  auto in = random_inputs(p, 9);
  auto r = reference_attention(p, in.q, in.k, in.v);
  for (int i = 0; i < 6; ++i) {
    bool empty = i < 2;
    EXPECT_EQ(std::isinf(r.lse[i]), empty) << i;
    for (int c = 0; c < 3; ++c) {
      if (empty) EXPECT_EQ(r.o[i * 3 + c], 0.0);
      else EXPECT_NE(r.o[i * 3 + c], 0.0);
    }
  }
  // Row 2 sees key 0 only: O = V[0].
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(r.o[2 * 3 + c], in.v[c], 1e-15);
  EXPECT_NEAR(r.lse[2], p.softmax_scale * (in.q[4] * in.k[0] + in.q[5] * in.k[1]), 1e-12);
}

TEST(Reference, GqaHeadMapping) {
  // heads_q = 6, heads_kv = 2: heads 0-2 read kv head 0, heads 3-5 read kv head 1. Give every query
  // head the same Q; outputs must agree exactly within a group and differ across groups.
  AttentionProblem p;
  p.heads_q = 6;
  p.heads_kv = 2;
  p.seqlen_q = 3;
  p.seqlen_k = 4;
  p.d_qk = 2;
  p.d_v = 2;
  EXPECT_EQ(p.kv_head(2), 0);
  EXPECT_EQ(p.kv_head(3), 1);
  auto in = random_inputs(p, 3);
  for (int64_t h = 1; h < 6; ++h)
    for (int64_t t = 0; t < 3 * 2; ++t) in.q[h * 6 + t] = in.q[t];
  auto r = reference_attention(p, in.q, in.k, in.v);
  auto head = [&](int h) { return std::vector<double>(r.o.begin() + h * 6, r.o.begin() + h * 6 + 6); };
  EXPECT_EQ(head(0), head(1));
  EXPECT_EQ(head(0), head(2));
  EXPECT_EQ(head(3), head(5));
  EXPECT_NE(head(0), head(3));
}

// ---- the backward: the gradients against central differences of L = sum(dO * O) ----------------

double loss(const AttentionProblem& p, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<double>& dout, const ScoreVariant* var) {
  auto r = reference_attention(p, q, k, v, var);
  double l = 0;
  for (size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * dout[i];
  return l;
}

void expect_gradients_match_differences(const AttentionProblem& p, const ScoreVariant* var) {
  auto in = random_inputs(p, 5);
  auto dout = random_normal(p.o_size(), 5, 3);
  auto g = reference_attention_backward(p, in.q, in.k, in.v, dout, var);
  ASSERT_EQ(g.dq.size(), in.q.size());
  ASSERT_EQ(g.dk.size(), in.k.size());
  ASSERT_EQ(g.dv.size(), in.v.size());
  const double h = 1e-5;
  int nonzero = 0;
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* what) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i];
      x[i] = keep + h;
      const double up = loss(p, in.q, in.k, in.v, dout, var);
      x[i] = keep - h;
      const double down = loss(p, in.q, in.k, in.v, dout, var);
      x[i] = keep;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 1e-7 * (1 + std::fabs(fd))) << what << "[" << i << "]";
      nonzero += grad[i] != 0;
    }
  };
  check(in.q, g.dq, "dQ");
  check(in.k, g.dk, "dK");
  check(in.v, g.dv, "dV");
  EXPECT_GT(nonzero, int(g.dq.size() + g.dk.size() + g.dv.size()) / 3);  // not a test of zeros
}

TEST(ReferenceBackward, CausalGqaMatchesCentralDifferences) {
  AttentionProblem p;
  p.batch = 2, p.heads_q = 4, p.heads_kv = 2, p.seqlen_q = 5, p.seqlen_k = 7, p.d_qk = 3, p.d_v = 4;
  p.softmax_scale = 0.6;
  p.mask = MaskKind::Causal;
  expect_gradients_match_differences(p, nullptr);
}

TEST(ReferenceBackward, WindowWithEmptyRowsAndAKeepMaskMatchCentralDifferences) {
  AttentionProblem p;
  p.heads_q = 2, p.heads_kv = 1, p.seqlen_q = 7, p.seqlen_k = 4, p.d_qk = 3, p.d_v = 2;
  p.softmax_scale = 0.8;
  p.mask = MaskKind::Window;  // bottom-right: the first rows see no key
  p.window_left = 1, p.window_right = 0;
  ScoreVariant var;
  var.keep = [](int64_t, int64_t h, int64_t q, int64_t k) { return (q + k + h) % 3 != 0; };
  expect_gradients_match_differences(p, &var);
}

TEST(ReferenceBackward, NaiveLowPrecisionIsCloseAndRounds) {
  AttentionProblem p;
  p.heads_q = 2, p.heads_kv = 2, p.seqlen_q = 9, p.seqlen_k = 11, p.d_qk = 8, p.d_v = 8;
  p.softmax_scale = 0.35;
  auto in = random_inputs(p, 2);
  auto dout = random_normal(p.o_size(), 2, 3);
  auto exact = reference_attention_backward(p, in.q, in.k, in.v, dout);
  auto bf = [](double x) {  // round to 8 significant bits
    int e;
    double m = std::frexp(x, &e);
    return std::ldexp(std::nearbyint(m * 256) / 256, e);
  };
  auto lowp = naive_attention_backward_lowp(p, in.q, in.k, in.v, dout, bf);
  const double err = max_abs_diff(lowp.dq, exact.dq);
  EXPECT_GT(err, 0);     // it does round
  EXPECT_LT(err, 0.05);  // and stays an approximation
  for (double x : lowp.dk) EXPECT_EQ(x, bf(x));  // the stored gradient is in the storage precision
}

TEST(Reference, Validate) {
  AttentionProblem p;
  EXPECT_EQ(validate(p), "");
  p.heads_q = 3;
  p.heads_kv = 2;
  EXPECT_NE(validate(p), "");
  p.heads_kv = 3;
  p.seqlen_k = 0;
  EXPECT_NE(validate(p), "");
}

TEST(Reference, NaiveLowPrecisionIsCloseButNotExact) {
  auto p = tiny(MaskKind::Causal);
  auto in = random_inputs(p, 4);
  auto ref = reference_attention(p, in.q, in.k, in.v);
  auto same = naive_attention_lowp(p, in.q, in.k, in.v, [](double x) { return x; });
  EXPECT_LT(max_abs_diff(same.o, ref.o), 1e-6);  // only the fp32 softmax differs
  auto coarse = naive_attention_lowp(p, in.q, in.k, in.v, [](double x) { return std::round(x * 64) / 64; });
  double err = max_abs_diff(coarse.o, ref.o);
  EXPECT_GT(err, 1e-4);
  EXPECT_LT(err, 0.2);
}

TEST(Reference, RandomNormalIsDeterministicAndNormal) {
  auto a = random_normal(10001, 42, 1);
  auto b = random_normal(10001, 42, 1);
  auto c = random_normal(10001, 42, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, var = 0;
  for (double x : a) mean += x;
  mean /= double(a.size());
  for (double x : a) var += (x - mean) * (x - mean);
  var /= double(a.size());
  EXPECT_NEAR(mean, 0, 0.05);
  EXPECT_NEAR(var, 1, 0.05);
}

TEST(Reference, ErrorMeasures) {
  EXPECT_EQ(max_abs_diff({1, -kInf}, {1.5, -kInf}), 0.5);
  EXPECT_EQ(max_abs_diff({std::nan("")}, {0}), kInf);
  EXPECT_NEAR(rel_frobenius({3, 4}, {0, 0}), 5, 1e-15);
  EXPECT_NEAR(rel_frobenius({1, 1}, {1, 2}), 1 / std::sqrt(5.0), 1e-15);
}

}  // namespace
}  // namespace qattn::spec

// ---- attention variants: auxiliary tensors, ScoreVariant in the reference and the lowp model ----
namespace qattn::spec {
namespace {

TEST(ReferenceAux, AtClampsEveryIndex) {
  AuxTensor t;
  t.shape = {2, 3};
  t.data = {0, 1, 2, 10, 11, 12};
  EXPECT_EQ(t.at({0, 0}), 0);
  EXPECT_EQ(t.at({1, 2}), 12);
  EXPECT_EQ(t.at({0, 7}), 2);    // past the last column: the last entry of the row
  EXPECT_EQ(t.at({5, -3}), 10);  // past the last row, before the first column
  EXPECT_EQ(t.at({-1, 1}), 1);
  EXPECT_TRUE(std::isnan(t.at({0})));  // wrong rank: NaN, never a crash
  AuxTensor v;
  v.shape = {4};
  v.data = {1, 2, 3, 4};
  EXPECT_EQ(v.at({9}), 4);
  EXPECT_EQ(v.at({-9}), 1);
  EXPECT_TRUE(std::isnan(AuxTensor{}.at({0})));
}

TEST(ReferenceAux, RandomAuxIsDeterministicSortedAndShared) {
  auto a = random_aux({3, 200}, true, 11);
  auto b = random_aux({3, 200}, true, 11);
  EXPECT_EQ(a.data, b.data);
  EXPECT_TRUE(a.is_int);
  ASSERT_EQ(a.data.size(), 600u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(a.at({r, 0}), 0);  // ids start at 0 on every row
    int segments = 1;
    for (int i = 1; i < 200; ++i) {
      double d = a.at({r, i}) - a.at({r, i - 1});
      EXPECT_TRUE(d == 0 || d == 1) << "row " << r << " col " << i;  // nondecreasing, consecutive
      segments += d == 1;
      EXPECT_EQ(a.at({r, i}), std::floor(a.at({r, i})));
    }
    EXPECT_GE(segments, 2) << r;  // segments are at most half a row long
  }
  EXPECT_NE(std::vector<double>(a.data.begin(), a.data.begin() + 200),
            std::vector<double>(a.data.begin() + 200, a.data.begin() + 400));  // rows differ
  // seg_q and seg_k made with one seed agree where their row lengths do.
  auto q = random_aux({3, 200}, true, 5), k = random_aux({3, 200}, true, 5);
  EXPECT_EQ(q.data, k.data);
  EXPECT_NE(random_aux({3, 200}, true, 6).data, q.data);
  // fp32 tensors: deterministic standard normals that are fp32 values.
  auto f = random_aux({4, 32}, false, 3);
  EXPECT_FALSE(f.is_int);
  ASSERT_EQ(f.data.size(), 128u);
  EXPECT_EQ(f.data, random_aux({4, 32}, false, 3).data);
  EXPECT_NE(f.data, random_aux({4, 32}, false, 4).data);
  for (double x : f.data) EXPECT_EQ(x, double(float(x)));
  // Known values pin the generator (splitmix64 + Box-Muller only: the same on every platform).
  EXPECT_EQ(random_aux({1, 16}, true, 1).data,
            (std::vector<double>{0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3}));
  auto pinned = random_aux({3}, false, 1).data;
  ASSERT_EQ(pinned.size(), 3u);
  EXPECT_EQ(float(pinned[0]), -0.37381795f);
  EXPECT_EQ(float(pinned[1]), 0.0909867212f);
  EXPECT_EQ(float(pinned[2]), -0.340724319f);
}

TEST(ReferenceVariant, SoftcapByHand) {
  // One query, two keys, d = 1, scale 1: scores 3 and -1; softcap 2 gives 2 tanh(1.5) and 2 tanh(-0.5).
  AttentionProblem p;
  p.seqlen_k = 2;
  p.d_qk = p.d_v = 1;
  ScoreVariant var;
  var.score = [](int64_t, int64_t, int64_t, int64_t, double s) { return 2.0 * std::tanh(s / 2.0); };
  auto r = reference_attention(p, {1.0}, {3.0, -1.0}, {10.0, 20.0}, &var);
  double a = std::exp(2 * std::tanh(1.5)), b = std::exp(2 * std::tanh(-0.5));
  EXPECT_NEAR(r.o[0], (10 * a + 20 * b) / (a + b), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(a + b), 1e-12);
  // The score sees s = softmax_scale * q.k (natural-log units).
  p.softmax_scale = 0.5;
  std::vector<double> seen;
  ScoreVariant spy;
  spy.score = [&seen](int64_t, int64_t, int64_t, int64_t, double s) { seen.push_back(s); return s; };
  reference_attention(p, {1.0}, {3.0, -1.0}, {10.0, 20.0}, &spy);
  EXPECT_EQ(seen, (std::vector<double>{1.5, -0.5}));
}

TEST(ReferenceVariant, KeepHidesKeysOnTopOfTheMask) {
  auto p = tiny(MaskKind::Causal);
  auto in = random_inputs(p, 12);
  // keep = "even keys only", written as a mask on top of causal, equals the reference of a problem
  // whose odd keys have been replaced by keys with a score of -inf: check against a direct formula.
  ScoreVariant var;
  var.keep = [](int64_t, int64_t, int64_t, int64_t k) { return k % 2 == 0; };
  auto r = reference_attention(p, in.q, in.k, in.v, &var);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        int64_t row = (b * p.heads_q + h) * p.seqlen_q + i, hk = p.kv_head(h);
        std::vector<double> o(size_t(p.d_v), 0.0);
        double z = 0;
        for (int64_t j = 0; j < p.seqlen_k; j += 2) {
          if (!p.visible(i, j)) continue;
          double s = 0;
          for (int64_t c = 0; c < p.d_qk; ++c)
            s += in.q[row * p.d_qk + c] * in.k[((b * p.heads_kv + hk) * p.seqlen_k + j) * p.d_qk + c];
          double w = std::exp(p.softmax_scale * s);
          z += w;
          for (int64_t c = 0; c < p.d_v; ++c) o[c] += w * in.v[((b * p.heads_kv + hk) * p.seqlen_k + j) * p.d_v + c];
        }
        if (z == 0) {
          EXPECT_EQ(r.lse[row], -kInf) << row;  // no visible key: O = 0, LSE = -inf
          for (int64_t c = 0; c < p.d_v; ++c) EXPECT_EQ(r.o[row * p.d_v + c], 0.0);
          continue;
        }
        EXPECT_NEAR(r.lse[row], std::log(z), 1e-12);
        for (int64_t c = 0; c < p.d_v; ++c) EXPECT_NEAR(r.o[row * p.d_v + c], o[c] / z, 1e-12);
      }
}

TEST(ReferenceVariant, ReceivesBatchHeadQueryKey) {
  auto p = tiny(MaskKind::None);
  auto in = random_inputs(p, 1);
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
  ScoreVariant var;
  var.keep = [&seen](int64_t b, int64_t h, int64_t q, int64_t k) {
    seen.insert({b, h, q, k});
    return true;
  };
  auto plain = reference_attention(p, in.q, in.k, in.v);
  auto r = reference_attention(p, in.q, in.k, in.v, &var);
  EXPECT_EQ(r.o, plain.o);  // keep-all changes nothing
  EXPECT_EQ(seen.size(), size_t(p.batch * p.heads_q * p.seqlen_q * p.seqlen_k));
  EXPECT_TRUE(seen.count({1, 3, 4, 6}));
}

TEST(ReferenceVariant, LowpModelAppliesTheScoreInFp32) {
  auto p = tiny(MaskKind::Causal);
  auto in = random_inputs(p, 8);
  ScoreVariant var;
  var.score = [](int64_t, int64_t h, int64_t q, int64_t k, double s) { return 5.0 * std::tanh(s / 5.0) - 0.1 * h; };
  var.keep = [](int64_t b, int64_t, int64_t q, int64_t k) { return (k + b) % 3 != 0; };
  auto ref = reference_attention(p, in.q, in.k, in.v, &var);
  auto same = naive_attention_lowp(p, in.q, in.k, in.v, [](double x) { return x; }, [](double x) { return x; }, &var);
  EXPECT_LT(max_abs_diff(same.o, ref.o), 1e-5);
  EXPECT_GT(max_abs_diff(same.o, ref.o), 0.0);  // fp32 rounding of the softmax and of the score
  for (size_t i = 0; i < ref.lse.size(); ++i) EXPECT_EQ(std::isinf(ref.lse[i]), std::isinf(same.lse[i])) << i;
  auto plain = naive_attention_lowp(p, in.q, in.k, in.v, [](double x) { return x; });
  EXPECT_GT(max_abs_diff(plain.o, same.o), 1e-3);  // the variant is applied
}

}  // namespace
}  // namespace qattn::spec
