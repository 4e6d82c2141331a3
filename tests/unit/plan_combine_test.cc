// The rules engine's combine step (src/plan/combine.cc, docs/planner.md "The combine step"): the
// tiling follows the stated query length with its reason, the program verifies against the fp64
// merge at sizes that cross its row tiles, and head dims the row tiling cannot deal are refused.
#include <gtest/gtest.h>

#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace qattn::plan {
namespace {

std::optional<Plan> combine_plan(std::map<std::string, std::string> flags, support::DiagSink& d) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  flags["gpu"] = "h100";
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  PlanOptions o;
  o.combine = true;
  return make_plan(s, *hw::find_gpu("h100"), d, o);
}

TEST(PlanCombine, TheTilingFollowsTheStatedQueryLength) {
  support::DiagSink d1, d2, d3;
  auto decode = combine_plan({{"seqlen", "1/8192"}}, d1);
  ASSERT_TRUE(decode.has_value()) << d1.render();
  EXPECT_NE(decode->code.find("Const BM = 1, WARPS = 1"), std::string::npos) << decode->code;
  EXPECT_NE(decode->tiles.reason.find("decoding"), std::string::npos) << decode->tiles.reason;
  auto longq = combine_plan({{"seqlen", "4096/4096"}}, d2);
  ASSERT_TRUE(longq.has_value()) << d2.render();
  EXPECT_NE(longq->code.find("Const BM = 4, WARPS = 1"), std::string::npos) << longq->code;
  auto unstated = combine_plan({}, d3);
  ASSERT_TRUE(unstated.has_value()) << d3.render();
  EXPECT_NE(unstated->code.find("Const BM = 4, WARPS = 1"), std::string::npos);
  // the forward's output dtype: fp8 kernels write bf16 parts
  support::DiagSink d4;
  auto fp8 = combine_plan({{"dtype", "fp8_e4m3"}}, d4);
  ASSERT_TRUE(fp8.has_value()) << d4.render();
  EXPECT_NE(fp8->code.find("Allocate O_part in global (seqlen_q, d_v) bf16 with offset [b, s, head]"), std::string::npos);
}

TEST(PlanCombine, VerifiesAgainstTheMergeAtSizesThatCrossItsTiles) {
  for (const char* seqlen : {"1/8192", "4096/4096"}) {
    SCOPED_TRACE(seqlen);
    support::DiagSink d;
    auto p = combine_plan({{"seqlen", seqlen}}, d);
    ASSERT_TRUE(p.has_value()) << d.render();
    auto v = verify(*p, d);
    EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
    ASSERT_EQ(v.cases.size(), 3u);
    int64_t most_parts = 0;
    for (const auto& c : v.cases) most_parts = std::max(most_parts, c.dims.at("splits"));
    EXPECT_EQ(most_parts, 16);
    EXPECT_NE(v.sizes().find("over 16 parts"), std::string::npos) << v.sizes();
  }
}

TEST(PlanCombine, HeadDimsTheRowTilingCannotDealAreRefused) {
  support::DiagSink d;
  auto p = combine_plan({{"head_dim", "80"}}, d);
  EXPECT_FALSE(p.has_value());
  bool found = false;
  for (const auto& x : d.all()) found = found || x.code == "PLAN0601";
  EXPECT_TRUE(found) << d.render();
}

}  // namespace
}  // namespace qattn::plan
