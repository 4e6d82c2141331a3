// The fp64 reference attention (spec/reference.h) against a direct softmax formula on tiny cases,
// the mask variants, fully masked rows, the GQA head mapping, the naive low-precision model and
// the random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
