// plan::verify, the TL oracle of stage 1 (issue 18, "verified must mean verified"): a program is
// interpreted at several problem sizes chosen from its own tiles, so a loop that stops early, a
// grid that covers too few query tiles and a non-finite error or tolerance all fail.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "tl/verdict.h"

namespace qattn::plan {
namespace {

bool has_code(const support::DiagSink& d, const std::string& code) {
  for (const auto& x : d.all())
    if (x.code == code && x.severity == support::Severity::Error) return true;
  return false;
}

Plan plan_for(const std::string& preset, const std::string& gpu, const std::string& score_mod = "") {
  support::DiagSink d;
  auto s = spec::spec_from_cli(preset, "", {{"gpu", gpu}}, d);
  EXPECT_TRUE(s) << d.render();
  s->variants.score_mod = score_mod;
  auto p = make_plan(*s, *hw::find_gpu(gpu), d);
  EXPECT_TRUE(p) << d.render();
  return *p;
}

// Replaces the bound of the first line that starts with `head` by min(cap, bound) (attributes kept).
std::string capped(std::string code, const std::string& head, int cap) {
  const size_t a = code.find(head);
  EXPECT_NE(a, std::string::npos) << head << "\n" << code;
  size_t end = code.find('\n', a);
  size_t brace = code.find(" {", a);
  if (brace != std::string::npos && brace < end) end = brace;
  // a Grid line: the bound is the first variable's, `cdiv(...)`
  if (head.rfind("Grid", 0) == 0) end = code.find("), ", a) + 1;
  const size_t b = a + head.size();
  const std::string bound = code.substr(b, end - b);
  return code.substr(0, b) + "min(" + std::to_string(cap) + ", " + bound + ")" + code.substr(end);
}

TEST(verifyLoops, AKeyLoopThatStopsAfterTwoTilesFails) {
  for (const char* gpu : {"a100", "h100"}) {
    Plan p = plan_for("llama3-8b", gpu);
    {
      support::DiagSink ok;
      EXPECT_TRUE(verify(p, ok).passed()) << gpu << "\n" << ok.render() << p.code;
    }
    p.code = capped(p.code, "for j = 0: ", 2);
    ASSERT_NE(p.code.find("for j = 0: min(2, "), std::string::npos) << p.code;
    support::DiagSink d;
    EXPECT_FALSE(verify(p, d).passed()) << gpu << ": a key loop stopped after two tiles passed\n" << p.code;
    EXPECT_TRUE(has_code(d, "TL0801")) << gpu << "\n" << d.render();
  }
}

// A cap far above two tiles: 16 key tiles (the long-key size has 17) also fails.
TEST(verifyLoops, AKeyLoopCappedAtSixteenTilesFails) {
  Plan p = plan_for("llama3-8b", "a100");
  p.code = capped(p.code, "for j = 0: ", 16);
  support::DiagSink d;
  const auto v = verify(p, d);
  EXPECT_FALSE(v.passed()) << "a key loop capped at 16 tiles passed\n" << v.sizes();
  EXPECT_TRUE(has_code(d, "TL0801")) << d.render();
  EXPECT_GT(v.dims.at("seqlen_k"), 16 * p.tiles.bn) << "decided by the long-key size";
}

TEST(verifyLoops, AGridThatStopsAfterTwoQueryTilesFails) {
  Plan p = plan_for("llama3-8b", "a100");
  p.code = capped(p.code, "Grid m_block = 0: ", 2);
  ASSERT_NE(p.code.find("Grid m_block = 0: min(2, cdiv(seqlen_q, BM)), head"), std::string::npos) << p.code;
  support::DiagSink d;
  EXPECT_FALSE(verify(p, d).passed()) << "a grid of two query tiles passed\n" << p.code;
  EXPECT_TRUE(has_code(d, "TL0801")) << d.render();
}

TEST(verifyFinite, InfiniteErrorAndToleranceInStoragePrecisionFail) {
  // S * 1e40 overflows fp32: the program's O and the naive attention's O are NaN in storage
  // precision (error inf, tolerance inf), while fp64 is exact.
  Plan p = plan_for("llama3-8b", "a100", "score * 1e40");
  support::DiagSink d;
  const auto v = verify(p, d);
  EXPECT_FALSE(v.passed()) << "inf <= inf passed\n" << v.storage.summary;
  EXPECT_TRUE(has_code(d, "TL0801")) << d.render();
  EXPECT_NE(d.render().find("not finite"), std::string::npos) << d.render();
}

TEST(verifySizes, ChosenFromTheProgramsOwnTilesAcrossEveryBoundary) {
  for (const char* gpu : {"a100", "h100"}) {
    Plan p = plan_for("llama3-8b", gpu);  // GQA 32/8, causal
    const int64_t bm = p.tiles.bm, bn = p.tiles.bn;
    p.tiles.bm = p.tiles.bn = 999;  // the program's `Const BM, BN` decide, not the plan's fields
    const auto cases = verification_cases(p);
    ASSERT_GE(cases.size(), 3u);
    bool under_one_tile = false, batch_and_heads = false, q_longer = false, k_longer = false, many_q = false,
         many_k = false, long_k = false;
    for (const auto& c : cases) {
      const int64_t sq = c.dims.at("seqlen_q"), sk = c.dims.at("seqlen_k");
      under_one_tile |= sq < bm && sk < bn;
      batch_and_heads |= c.dims.at("batch") >= 2 && c.dims.at("heads_kv") >= 2 && c.dims.at("heads_q") > c.dims.at("heads_kv");
      q_longer |= sq > sk;
      k_longer |= sk > sq;
      many_q |= sq > 2 * bm && sq % bm != 0;  // 3 query tiles, the last one ragged
      many_k |= sk > 4 * bn && sk % bn != 0;  // 5 key tiles, the last one ragged
      long_k |= sk > 16 * bn && sq < bm;        // 17 key tiles under one query tile
    }
    EXPECT_TRUE(under_one_tile && batch_and_heads && q_longer && k_longer && many_q && many_k && long_k) << gpu;
    support::DiagSink d;
    const auto v = verify(p, d);
    EXPECT_TRUE(v.passed()) << gpu << "\n" << d.render();
    for (const auto& c : v.cases) EXPECT_TRUE(c.ran && c.passed()) << gpu << " " << c.what;
    // One line naming every size.
    const std::string line = v.sizes();
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    for (const auto& c : cases)
      EXPECT_NE(line.find(std::to_string(c.dims.at("seqlen_q")) + "x" + std::to_string(c.dims.at("seqlen_k")) + " ["),
                std::string::npos)
          << line;
    EXPECT_NE(line.find("4 of 4 sizes"), std::string::npos) << line;
  }
}

TEST(verifySizes, DocumentMasksKeepBothLengthsEqual) {
  support::DiagSink d;
  auto s = spec::spec_from_cli("llama3-8b", "", {{"gpu", "a100"}, {"document", "true"}}, d);
  ASSERT_TRUE(s) << d.render();
  auto p = make_plan(*s, *hw::find_gpu("a100"), d);
  ASSERT_TRUE(p) << d.render();
  for (const auto& c : verification_cases(*p)) EXPECT_EQ(c.dims.at("seqlen_q"), c.dims.at("seqlen_k")) << c.what;
  EXPECT_TRUE(verify(*p, d).passed()) << d.render();
}

TEST(verifySizes, AFailureNamesItsSizeAndStops) {
  Plan p = plan_for("llama3-8b", "a100");
  p.code = capped(p.code, "for j = 0: ", 2);
  support::DiagSink d;
  const auto v = verify(p, d);
  ASSERT_FALSE(v.passed());
  EXPECT_NE(v.sizes().find("FAIL"), std::string::npos) << v.sizes();
  EXPECT_GT(v.dims.at("seqlen_k"), 2 * p.tiles.bn) << "the deciding size is the failing one";
  bool note = false;
  for (const auto& x : d.all())
    note |= x.severity == support::Severity::Note && x.code == "TL0801" && x.message.find("seqlen_k=") != std::string::npos;
  EXPECT_TRUE(note) << d.render();
}

// The LSE bound's absolute term scales with |LSE|: this kernel (the Python binding's ALiBi +
// relative-bias test kernel) failed at 3x5 tiles with 6.3e-5 against 5.9e-5 under a fixed 1e-5.
TEST(verifyTolerance, LseBoundScalesWithTheLse) {
  support::DiagSink d;
  auto s = spec::parse_json(R"({"name": "py_bf16_d64_causal_alibi_relative_bias32_lse", "heads_q": 2, "heads_kv": 1,
      "head_dim_qk": 64, "head_dim_v": 64, "dtype": "bf16", "layout": "bshd", "return_lse": true, "gpu": "h100",
      "mask": {"kind": "causal", "align": "bottom_right"}, "variants": {"alibi": true, "relative_bias": 32}})",
                            d);
  ASSERT_TRUE(s) << d.render();
  auto p = make_plan(*s, *hw::find_gpu("h100"), d);
  ASSERT_TRUE(p) << d.render();
  const auto v = verify(*p, d);
  EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
  for (const auto& c : v.cases) EXPECT_LE(c.storage.lse_max_abs_err, c.storage.lse_tolerance) << c.what;
}

TEST(verifyFinite, ANonFiniteErrorOrToleranceIsAFailure) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (int which = 0; which < 5; ++which) {
    tl::RunResult r;
    r.ran = r.passed = true;
    r.tolerance = r.lse_tolerance = 1e-3;
    double* field[] = {&r.max_abs_err, &r.rel_err, &r.tolerance, &r.lse_max_abs_err, &r.lse_tolerance};
    *field[which] = which % 2 ? nan : inf;
    if (which == 2) r.max_abs_err = inf;  // inf <= inf
    support::DiagSink d;
    EXPECT_FALSE(tl::require_finite(r, tl::Precision::Storage, d)) << which;
    EXPECT_FALSE(r.passed);
    EXPECT_TRUE(has_code(d, "TL0801")) << d.render();
    EXPECT_NE(d.render().find("storage-precision check"), std::string::npos) << d.render();
  }
  tl::RunResult ok;
  ok.ran = ok.passed = true;
  ok.tolerance = 1e-3;
  support::DiagSink d;
  EXPECT_TRUE(tl::require_finite(ok, tl::Precision::Storage, d));
  EXPECT_TRUE(d.all().empty());
}

}  // namespace
}  // namespace qattn::plan
