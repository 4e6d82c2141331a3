// Stage 1 on the rules engine (src/plan): every preset x every GPU of the table x causal and not
// gives TL code that parses, passes the checker, refines its sketch and matches the reference in
// the interpreter; every rules-table row fits the resource model; impossible requests are refused
// with a diagnostic.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <regex>
#include <set>

#include "hw/gpu.h"
#include "plan/budget.h"
#include "plan/plan.h"
#include "plan/rules.h"
#include "plan/sketch.h"
#include "tl/checker.h"
#include "tl/parser.h"

namespace qattn::plan {
namespace {

bool has_code(const support::DiagSink& d, const std::string& code) {
  for (const auto& x : d.all())
    if (x.code == code) return true;
  return false;
}

// The spec a user would run on this GPU: bf16 where the GPU has it, else fp16.
spec::AttentionSpec for_gpu(spec::AttentionSpec s, const hw::GpuFacts& g) {
  if (!g.supports(s.dtype)) s.dtype = spec::DType::FP16;
  s.gpu = g.aliases.empty() ? g.name : g.aliases.front();
  return s;
}

// TL code with comments and the kernel name removed: programs equal under this are the same
// kernel, so the interpreter runs each distinct one once.
std::string normalized(const std::string& code) {
  std::string out = std::regex_replace(code, std::regex("#[^\n]*"), "");
  return std::regex_replace(out, std::regex("Kernel [A-Za-z0-9_]+"), "Kernel k");
}

TEST(planMatrix, EveryPresetEveryGpuCausalAndNot) {
  std::map<std::string, std::string> interpreted;  // normalized code -> first config that ran it
  int plans = 0;
  for (const auto& preset : spec::presets()) {
    for (const auto& g : hw::gpus()) {
      for (bool causal : {false, true}) {
        spec::AttentionSpec s = for_gpu(preset.spec, g);
        if (causal && s.mask.kind == spec::Mask::Kind::None) s.mask.kind = spec::Mask::Kind::Causal;
        if (!causal) s.mask = spec::Mask{};
        const std::string what = preset.spec.name + " on " + g.name + (causal ? " causal" : "");
        support::DiagSink d;
        auto plan = make_plan(s, g, d);
        ASSERT_TRUE(plan.has_value()) << what << "\n" << d.render();
        ++plans;
        // Parses, checks and refines its sketch (make_plan already did; this is the independent check).
        support::DiagSink d2;
        auto sk = tl::parse(plan->sketch, d2, "sketch.tl");
        auto code = tl::parse(plan->code, d2, "code.tl");
        ASSERT_FALSE(d2.has_errors()) << what << "\n" << d2.render();
        EXPECT_TRUE(tl::check(code, d2)) << what << "\n" << d2.render();
        EXPECT_TRUE(refines(sk, code, d2)) << what << "\n" << d2.render();
        EXPECT_TRUE(plan->budget.fits) << what;
        EXPECT_LE(plan->budget.smem_bytes, g.smem_per_block_optin) << what;
        // The kernel's head dims and tiles are in the TL, as the translator will read them.
        EXPECT_NE(plan->code.find("BM = " + std::to_string(plan->tiles.bm)), std::string::npos) << what;
        EXPECT_NE(plan->code.find(std::to_string(preset.spec.head_dim_qk)), std::string::npos) << what;
        if (s.heads_kv != s.heads_q) EXPECT_NE(plan->code.find("kv_head"), std::string::npos) << what;

        auto key = normalized(plan->code);
        if (interpreted.count(key)) continue;
        interpreted[key] = what;
        support::DiagSink d3;
        auto v = verify(*plan, d3);
        EXPECT_TRUE(v.fp64.passed) << what << ": fp64 rel_err " << v.fp64.rel_err << "\n" << d3.render();
        EXPECT_LE(v.fp64.rel_err, 1e-6) << what;
        EXPECT_TRUE(v.storage.passed) << what << ": storage max_abs_err " << v.storage.max_abs_err << " tol "
                                      << v.storage.tolerance << "\n" << d3.render();
      }
    }
  }
  EXPECT_EQ(plans, int(spec::presets().size() * hw::gpus().size() * 2));
  EXPECT_GE(interpreted.size(), 10u);
}

TEST(planRules, EveryRowFitsTheResourceModel) {
  // For each row, a problem at the row's largest head dim on each GPU of the row's architecture.
  for (const auto& row : rules_table()) {
    for (const auto& g : hw::gpus()) {
      if (g.sm < row.sm_lo || g.sm > row.sm_hi) continue;
      Problem p;
      p.name = "row";
      p.heads_q = p.heads_kv = 8;
      p.d_qk = p.d_v = row.d_max;
      p.dtype = row.fp8 ? tl::DType::F8E4M3 : tl::DType::F16;
      p.mask = row.causal == 1 ? tl::MaskSpec::Kind::Causal : tl::MaskSpec::Kind::None;
      Budget b = estimate(p, make_target(g), row.tiles);
      EXPECT_TRUE(b.fits) << "sm" << row.sm_lo << " d" << row.d_max << " on " << g.name << ": " << b.why_not;
      EXPECT_FALSE(row.tiles.reason.empty());
    }
  }
}

TEST(planRules, Sm90TilesAreHopperShaped) {
  const hw::GpuFacts* h100 = hw::find_gpu("h100");
  ASSERT_NE(h100, nullptr);
  support::DiagSink d;
  auto plan = make_plan(*spec::find_preset("llama2-7b"), *h100, d);
  ASSERT_TRUE(plan) << d.render();
  EXPECT_EQ(plan->tiles.bm % 64, 0);            // one consumer warpgroup per 64 rows
  EXPECT_EQ(plan->tiles.warps, 4 * (plan->tiles.bm / 64 + 1));
  EXPECT_EQ(plan->tiles.stages, 2);
  EXPECT_EQ(plan->code.find("Allocate Q in register"), std::string::npos);  // wgmma reads shared memory
  // FA3-class: at least as large a tile as FA2's 128x64 on A100.
  EXPECT_GE(plan->tiles.bm * plan->tiles.bn, 128 * 64);
}

TEST(planCandidates, EnumeratedBestFirstAndAllFit) {
  const hw::GpuFacts* a100 = hw::find_gpu("a100");
  ASSERT_NE(a100, nullptr);
  Problem p = make_problem(*spec::find_preset("llama3-8b"));
  auto cands = enumerate_candidates(p, make_target(*a100));
  ASSERT_GT(cands.size(), 5u);
  for (size_t i = 0; i < cands.size(); ++i) {
    EXPECT_TRUE(cands[i].budget.fits);
    if (i) EXPECT_GE(cands[i - 1].score, cands[i].score);
  }
}

TEST(planImpossible, Fp8OnAmpereIsRefused) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  s.dtype = spec::DType::FP8_E4M3;
  support::DiagSink d;
  EXPECT_FALSE(make_plan(s, *hw::find_gpu("a100"), d).has_value());
  EXPECT_TRUE(d.has_errors());
  EXPECT_NE(d.render().find("fp8"), std::string::npos) << d.render();
}

TEST(planImpossible, HeadDimThatFitsNowhereOnTuring) {
  spec::AttentionSpec s = *spec::find_preset("llama2-7b");
  s.dtype = spec::DType::FP16;
  s.head_dim_qk = s.head_dim_v = 512;
  support::DiagSink d;
  EXPECT_FALSE(make_plan(s, *hw::find_gpu("t4"), d).has_value());
  EXPECT_TRUE(has_code(d, "PLAN0101")) << d.render();
  EXPECT_NE(d.render().find("shared memory"), std::string::npos) << d.render();
}

TEST(planOverride, TilesThatDoNotFitAreRefused) {
  PlanOptions o;
  o.bm = 128;
  o.bn = 256;
  o.warps = 4;
  o.stages = 2;
  support::DiagSink d;
  EXPECT_FALSE(make_plan(*spec::find_preset("gemma-7b"), *hw::find_gpu("a100"), d, o).has_value());
  EXPECT_TRUE(has_code(d, "PLAN0102")) << d.render();
}

TEST(planOverride, TileOverrideChangesTheTl) {
  const hw::GpuFacts* a100 = hw::find_gpu("a100");
  support::DiagSink d;
  auto base = make_plan(*spec::find_preset("llama3-8b"), *a100, d);
  PlanOptions o;
  o.bm = 64;
  o.bn = 32;
  o.warps = 4;
  auto other = make_plan(*spec::find_preset("llama3-8b"), *a100, d, o);
  ASSERT_TRUE(base && other) << d.render();
  EXPECT_NE(base->code, other->code);
  EXPECT_NE(other->code.find("Const BM = 64, BN = 32"), std::string::npos) << other->code;
  EXPECT_EQ(base->sketch, other->sketch);  // the sketch has no parameters
}

TEST(planSketch, HasNoParametersAndParses) {
  auto p = make_problem(*spec::find_preset("deepseek-v3-mla-prefill"));
  auto text = sketch_text(p, make_target(*hw::find_gpu("h100")));
  std::string stmts = std::regex_replace(text, std::regex("#[^\n]*"), "");
  support::DiagSink d;
  auto prog = tl::parse(text, d, "sketch.tl");
  EXPECT_FALSE(d.has_errors()) << d.render();
  EXPECT_EQ(stmts.find("Allocate"), std::string::npos);
  EXPECT_EQ(stmts.find("Reshape"), std::string::npos);
  EXPECT_EQ(stmts.find("coordinate"), std::string::npos);
  EXPECT_NE(stmts.find("Compute GEMM Q, K^T and get S"), std::string::npos);
}

TEST(planRefines, DetectsADroppedOrChangedStatement) {
  auto p = make_problem(*spec::find_preset("llama3-8b"));
  auto t = make_target(*hw::find_gpu("a100"));
  TileConfig tiles{128, 64, 4, 1, "test"};
  std::string code = code_text(p, t, tiles);
  support::DiagSink d;
  auto sk = tl::parse(sketch_text(p, t), d);
  ASSERT_TRUE(refines(sk, tl::parse(code, d), d)) << d.render();

  std::string dropped = std::regex_replace(code, std::regex("  Compute Rescale O, alpha\n"), "");
  support::DiagSink d1;
  EXPECT_FALSE(refines(sk, tl::parse(dropped, d1), d1));
  EXPECT_TRUE(has_code(d1, "PLAN0201"));

  std::string changed = std::regex_replace(code, std::regex("GEMM Q, K\\^T"), "GEMM Q, K");
  support::DiagSink d2;
  EXPECT_FALSE(refines(sk, tl::parse(changed, d2), d2));
  EXPECT_TRUE(has_code(d2, "PLAN0201"));
}

}  // namespace
}  // namespace qattn::plan

namespace qattn::plan {
namespace {
TEST(planDocs, PlannerMdHoldsTheCurrentTables) {
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/docs/planner.md");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(rules_markdown()), std::string::npos)
      << "docs/planner.md is stale: regenerate its last section with `qattn plan --rules`";
}
}  // namespace
}  // namespace qattn::plan
