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

#include "backend/translate.h"
#include "hw/gpu.h"
#include "plan/budget.h"
#include "plan/plan.h"
#include "plan/rules.h"
#include "plan/sketch.h"
#include "spec/variants.h"
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
  if (!g.supports(s.dtype)) s.dtype = spec::DType::F16;
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
        if (causal && s.mask.kind == spec::MaskKind::None) s.mask.kind = spec::MaskKind::Causal;
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
        if (s.heads_kv != s.heads_q) {
          EXPECT_NE(plan->code.find("kv_head"), std::string::npos) << what;
        }

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

// The sm90 rows describe 1 producer + BM / 64 consumer warpgroups: the Roles the planner writes.
TEST(planSchedule, Sm90RowsAreOneProducerPlusOneConsumerPer64Rows) {
  int rows = 0;
  for (const auto& row : rules_table()) {
    if (row.sm_lo < 90) continue;
    ++rows;
    EXPECT_EQ(row.tiles.warps % 4, 0) << row.tiles.reason;
    const int consumers = row.tiles.warps / 4 - 1;
    EXPECT_TRUE(consumers == 2 || consumers == 3) << row.tiles.reason;
    EXPECT_EQ(consumers * 64, row.tiles.bm) << row.tiles.reason;
    // FlashAttention-3's split fits the register file: 24 / 240 (2 consumers), 32 / 160 (3); a
    // persistent grid's producer warp runs the tile scheduler too: 40 / 232.
    const int producer_regs = consumers == 3 ? 32 : row.tiles.persistent ? 40 : 24;
    const int consumer_regs = consumers == 3 ? 160 : row.tiles.persistent ? 232 : 240;
    EXPECT_LE(128 * (producer_regs + consumers * consumer_regs), 65536);
  }
  EXPECT_GT(rows, 0);
}

// The sm90 TL code states the Hopper schedule (docs/tl.md, "Hopper schedule"); sm80 code has none.
TEST(planSchedule, Sm90CodeHasRolesAndAttributesSm80None) {
  struct Want {
    const char* preset;
    std::map<std::string, std::string> flags;  // CLI flags applied to the preset
    int consumers, producer_regs, consumer_regs;
    bool persistent;
  };
  for (const Want& w : {Want{"llama3-8b", {}, 2, 40, 232, true}, Want{"llama3.2-1b", {}, 3, 32, 160, false},
                        Want{"llama2-7b", {{"mask", "none"}}, 2, 40, 232, true},
                        Want{"llama2-7b", {{"head-dim", "256"}}, 2, 24, 240, false}}) {
    SCOPED_TRACE(std::string(w.preset) + (w.flags.empty() ? "" : " " + w.flags.begin()->first + "=" + w.flags.begin()->second));
    support::DiagSink d;
    spec::AttentionSpec sp = *spec::find_preset(w.preset);
    ASSERT_TRUE(spec::apply_flags(sp, w.flags, d)) << d.render();
    auto plan = make_plan(sp, *hw::find_gpu("h100"), d);
    ASSERT_TRUE(plan) << d.render();
    const std::string& c = plan->code;
    const int consumers = plan->tiles.warps / 4 - 1;  // the rules table's warps: producer + consumers
    EXPECT_EQ(consumers, w.consumers);
    EXPECT_EQ(consumers * 64, plan->tiles.bm);
    const std::string consumer_line = "Role consumer warpgroups " + std::to_string(w.consumers) + " registers " +
                                      std::to_string(w.consumer_regs) + (w.consumers == 2 ? " pingpong\n" : "\n");
    EXPECT_NE(c.find("\nRole producer warpgroups 1 registers " + std::to_string(w.producer_regs) + "\n"), std::string::npos) << c;
    EXPECT_NE(c.find("\n" + consumer_line), std::string::npos) << c;
    EXPECT_LT(c.find("Role consumer"), c.find("Allocate"));
    for (const char* line : {"Allocate K in shared (BN, d) bf16 {stages: STAGES}\n", "Allocate V in shared (BN, d) bf16 {stages: STAGES}\n",
                             "Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}\n",
                             "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async}\n",
                             "  Copy V (BN, d) in coordinate [j, 0] from global to shared {async}\n",
                             "  Compute GEMM Q, K^T and get S {wait: Q, wait: K, release: K}\n",
                             "  Compute GEMM Pc, V and accumulate O {wait: V, release: V}\n", ") {overlap}\n"})
      EXPECT_NE(c.find(line), std::string::npos) << line << "\n" << c;
    // The checker reads the same schedule back.
    support::DiagSink cd;
    tl::CheckInfo info;
    ASSERT_TRUE(tl::check(tl::parse(c, cd), cd, {}, info)) << cd.render();
    EXPECT_TRUE(info.schedule.present);
    EXPECT_EQ(info.schedule.consumer_wg, w.consumers);
    EXPECT_EQ(info.schedule.producer_regs, w.producer_regs);
    EXPECT_EQ(info.schedule.consumer_regs, w.consumer_regs);
    EXPECT_EQ(info.schedule.pingpong, w.consumers == 2);
    EXPECT_EQ(info.schedule.stages.at("K"), plan->tiles.stages);
    EXPECT_TRUE(info.schedule.overlap);
    // d128: the Grid is persistent, d256 not (the rules table's column; docs/tl.md "Hopper schedule")
    EXPECT_EQ(info.schedule.persistent, w.persistent) << c;
    EXPECT_EQ(c.find("batch {persistent}\n") != std::string::npos, w.persistent) << c;
    // The sketch stays free of parameters and schedule.
    EXPECT_EQ(plan->sketch.find("Role"), std::string::npos);
    EXPECT_EQ(plan->sketch.find("{"), std::string::npos);
    // And the interpreter runs the schedule to the reference.
    support::DiagSink vd;
    EXPECT_TRUE(verify(*plan, vd).passed()) << vd.render();
  }
  // A variant keeps its skip attribute next to overlap.
  spec::AttentionSpec doc = *spec::find_preset("llama3-8b");
  doc.variants.document = true;
  support::DiagSink dd;
  auto dplan = make_plan(doc, *hw::find_gpu("h100"), dd);
  ASSERT_TRUE(dplan) << dd.render();
  EXPECT_NE(dplan->code.find(" {skip: document, overlap}\n"), std::string::npos) << dplan->code;
  // MLA prefill (192/128) without a mask: persistent too (measured faster at 512-2k on the H100).
  spec::AttentionSpec mla = *spec::find_preset("deepseek-v3-mla-prefill");
  support::DiagSink md;
  ASSERT_TRUE(spec::apply_flags(mla, {{"mask", "none"}}, md)) << md.render();
  auto mplan = make_plan(mla, *hw::find_gpu("h100"), md);
  ASSERT_TRUE(mplan) << md.render();
  EXPECT_NE(mplan->code.find("batch {persistent}\n"), std::string::npos) << mplan->code;
  EXPECT_NE(mplan->code.find("\nRole producer warpgroups 1 registers 40\n"), std::string::npos) << mplan->code;
  // sm80 (and the other pre-Hopper targets): no Role, no attribute but skip.
  for (const char* gpu : {"a100", "l40s", "t4"}) {
    SCOPED_TRACE(gpu);
    const hw::GpuFacts* g = hw::find_gpu(gpu);
    support::DiagSink d;
    auto plan = make_plan(for_gpu(*spec::find_preset("llama3-8b"), *g), *g, d);
    ASSERT_TRUE(plan) << d.render();
    EXPECT_EQ(plan->code.find("Role"), std::string::npos) << plan->code;
    EXPECT_EQ(plan->code.find("{"), std::string::npos) << plan->code;
    support::DiagSink cd;
    tl::CheckInfo info;
    ASSERT_TRUE(tl::check(tl::parse(plan->code, cd), cd, {}, info)) << cd.render();
    EXPECT_FALSE(info.schedule.present);
  }
}

// GQA packing (TL `{pack: heads_q / heads_kv}`): on for sm90 when the spec states a query length
// whose tiles one head fills poorly (H100, 2026-11-24, bench/results/2026-11-24-h100-sm90-gqa-pack:
// 1.8-3.8x at seqlen_q 16-64, 0.99x at 128-512, so not there); never without a stated length, for
// MHA, off Hopper, with variants, or when the group does not divide a 64-row warpgroup tile. The
// packed TL interprets against the reference like every other plan. Decoding's tile (plan::decode_tile):
// at most 64 packed rows (seqlen_q x group) take BM 64 on one consumer warpgroup (H200:
// bench/results/2026-11-30-h200-decode-bm64), more rows the table's 128.
TEST(planPack, PacksShortQueriesOfGqaOnHopper) {
  struct Want {
    const char* preset;
    std::map<std::string, std::string> flags;
    const char* gpu;
    bool pack;
    int bm = 0;  // sm90 packed plans: the tile's rows
  };
  for (const Want& w : {Want{"llama3-8b", {}, "h100", false}, Want{"llama3-8b", {{"seqlen", "16/4096"}}, "h100", true, 64},
                        Want{"llama3-8b", {{"seqlen", "17/4096"}}, "h100", true, 128},  // 68 packed rows
                        Want{"llama3-8b", {{"seqlen", "64/4096"}}, "h100", true, 128},
                        Want{"llama3-8b", {{"seqlen", "1/8192"}}, "h100", true, 64},
                        Want{"llama3-8b", {{"seqlen", "128/4096"}}, "h100", false},
                        Want{"llama3-8b", {{"seqlen", "512/4096"}}, "h100", false},
                        Want{"llama3-8b", {{"seqlen", "1/8192"}, {"head-dim", "256"}}, "h100", true, 128},  // d256: BM 128 kept
                        Want{"qwen2.5-72b", {{"seqlen", "100/4096"}}, "h100", false},  // 896 rows for 8 heads vs 1024: < 1/5 saved
                        Want{"qwen2.5-72b", {{"seqlen", "40/4096"}}, "h100", true, 128},  // 384 vs 1024
                        Want{"qwen2.5-72b", {{"seqlen", "8/4096"}}, "h100", true, 64},    // 64 packed rows
                        Want{"llama2-7b", {{"seqlen", "16/4096"}}, "h100", false, 64},   // MHA: nothing packed, one tile
                        Want{"llama2-7b", {{"seqlen", "65/4096"}}, "h100", false},       // MHA beyond a tile
                        Want{"llama3-8b", {{"seqlen", "16/4096"}}, "a100", false},       // mma.sync: not lowered
                        Want{"starcoder-15b", {{"seqlen", "16/4096"}}, "h100", false},   // 48 heads per kv head
                        Want{"gemma2-9b", {{"seqlen", "16/4096"}}, "h100", false}}) {    // softcap (a Score declaration)
    SCOPED_TRACE(std::string(w.preset) + " " + w.gpu + (w.flags.empty() ? "" : " seqlen " + w.flags.begin()->second));
    support::DiagSink d;
    spec::AttentionSpec sp = *spec::find_preset(w.preset);
    std::map<std::string, std::string> flags = w.flags;
    flags["gpu"] = w.gpu;
    ASSERT_TRUE(spec::apply_flags(sp, flags, d)) << d.render();
    auto plan = make_plan(sp, *hw::find_gpu(w.gpu), d);
    ASSERT_TRUE(plan) << d.render();
    EXPECT_EQ(plan->tiles.pack_gqa, w.pack);
    EXPECT_EQ(plan->code.find("{pack: heads_q / heads_kv}") != std::string::npos, w.pack) << plan->code;
    EXPECT_EQ(plan->tiles.reason.find("GQA packing:") != std::string::npos, w.pack) << plan->tiles.reason;
    if (std::string(w.preset) == "starcoder-15b") {
      EXPECT_NE(plan->tiles.reason.find("does not divide a 64-row"), std::string::npos) << plan->tiles.reason;
    }
    if (!w.pack && w.bm == 0) continue;
    EXPECT_EQ(plan->tiles.bm, w.bm);
    EXPECT_EQ(plan->tiles.warps, w.bm == 64 ? 8 : 12);
    EXPECT_EQ(plan->tiles.reason.find("decoding: the") != std::string::npos, w.bm == 64) << plan->tiles.reason;
    if (w.bm == 64) {
      EXPECT_NE(plan->code.find("Role consumer warpgroups 1 registers"), std::string::npos) << plan->code;
    }
    auto v = verify(*plan, d);
    EXPECT_TRUE(v.passed()) << d.render();
  }
}

// K and V `{async, stream}` (an L2 evict-first hint on launches that read each head's keys once):
// the GQA-packed sm90 kernels whose stated queries fit one tile per kv head (decoding, with a KV
// cache or not, ragged queries included); never MHA, a prefill kernel or a ragged one that states no
// queries (their code stays as it was), nor off Hopper.
// The translation passes the launch's flag (Params::kv_stream) on exactly those loads.
TEST(planStream, KeysOfDecodingKernelsAreStreamed) {
  struct Want {
    std::map<std::string, std::string> flags;
    bool stream;
  };
  for (const Want& w : {Want{{}, false}, Want{{{"seqlen", "1/8192"}}, true}, Want{{{"seqlen", "17/4096"}}, true},
                        Want{{{"seqlen", "64/4096"}}, false}, Want{{{"seqlen", "512/4096"}}, false},
                        Want{{{"seqlen", "1/8192"}, {"gpu", "a100"}}, false}, Want{{{"seqlen", "1/8192"}, {"heads", "32/32"}}, false},
                        Want{{{"kv-cache", "paged"}, {"seqlen", "1/4096"}}, true}, Want{{{"kv-cache", "paged"}}, false},
                        Want{{{"kv-cache", "lengths"}, {"split-keys", "true"}, {"lse", "true"}, {"seqlen", "1/8192"}}, true},
                        Want{{{"varlen", "true"}, {"kv-cache", "paged"}}, false},
                        Want{{{"varlen", "true"}, {"kv-cache", "paged"}, {"seqlen", "1/4096"}}, true},
                        Want{{{"varlen", "true"}, {"seqlen", "1/4096"}, {"heads", "32/32"}}, false}}) {
    std::map<std::string, std::string> flags = w.flags;
    flags.emplace("gpu", "h100");
    std::string what;
    for (const auto& [k, v] : flags) what += k + "=" + v + " ";
    SCOPED_TRACE(what);
    support::DiagSink d;
    spec::AttentionSpec sp = *spec::find_preset("llama3-8b");
    ASSERT_TRUE(spec::apply_flags(sp, flags, d)) << d.render();
    auto plan = make_plan(sp, *hw::find_gpu(flags["gpu"]), d);
    ASSERT_TRUE(plan) << d.render();
    const auto count = [](const std::string& text, const std::string& x) {
      int n = 0;
      for (size_t at = text.find(x); at != std::string::npos; at = text.find(x, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count(plan->code, "{async, stream}"), w.stream ? 2 : 0) << plan->code;
    if (flags["gpu"] != "h100") continue;
    auto t = backend::translate_text(plan->code, make_target(*hw::find_gpu("h100")), d, "code.tl");
    ASSERT_TRUE(t.has_value()) << d.render();
    EXPECT_EQ(count(t->cuda_source, ", p.kv_stream);"), w.stream ? 2 : 0);
  }
}

TEST(planCandidates, EnumeratedBestFirstAndAllFit) {
  const hw::GpuFacts* a100 = hw::find_gpu("a100");
  ASSERT_NE(a100, nullptr);
  Problem p = make_problem(*spec::find_preset("llama3-8b"));
  auto cands = enumerate_candidates(p, make_target(*a100));
  ASSERT_GT(cands.size(), 5u);
  for (size_t i = 0; i < cands.size(); ++i) {
    EXPECT_TRUE(cands[i].budget.fits);
    if (i) {
      EXPECT_GE(cands[i - 1].score, cands[i].score);
    }
  }
}

TEST(planImpossible, Fp8OnAmpereIsRefused) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  s.dtype = spec::DType::F8E4M3;
  support::DiagSink d;
  EXPECT_FALSE(make_plan(s, *hw::find_gpu("a100"), d).has_value());
  EXPECT_TRUE(d.has_errors());
  EXPECT_NE(d.render().find("fp8"), std::string::npos) << d.render();
}

TEST(planImpossible, HeadDimThatFitsNowhereOnTuring) {
  spec::AttentionSpec s = *spec::find_preset("llama2-7b");
  s.dtype = spec::DType::F16;
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

  // a layout move (Copy from shared to register, like a Reshape) may be added; an extra Compute not
  std::string moved = std::regex_replace(code, std::regex("(  Compute GEMM Q, K\\^T)"), "  Copy K from shared to register\n$1");
  ASSERT_NE(moved, code);
  support::DiagSink d3;
  EXPECT_TRUE(refines(sk, tl::parse(moved, d3), d3)) << d3.render();
  std::string added = std::regex_replace(code, std::regex("(  Compute GEMM Q, K\\^T)"), "  Compute Exp2 S\n$1");
  support::DiagSink d4;
  EXPECT_FALSE(refines(sk, tl::parse(added, d4), d4));
  EXPECT_TRUE(has_code(d4, "PLAN0201"));
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

// ---- the backward pass (plan/backward.cc) ----------------------------------------------------

TEST(planBackward, PresetsPlanCheckAndInterpret) {
  struct Case { const char* preset; const char* gpu; std::map<std::string, std::string> flags; bool accumulate; };
  const std::vector<Case> cases = {
      {"llama3-8b", "h100", {}, true},                                       // GQA causal: dK, dV accumulate in fp32
      {"llama3.2-1b", "a100", {{"mask", "none"}, {"heads", "16,16"}}, false},  // MHA: stored once in bf16
      {"mistral-7b", "h100", {{"window", "256,0"}}, true},                   // window
      {"llama2-7b", "a100", {{"mask", "causal_top_left"}, {"dtype", "fp16"}}, false},
      {"deepseek-v3-mla-prefill", "h100", {}, false},                         // d_qk 192, d_v 128
      {"llama3-8b", "h100", {{"head-dim", "64,128"}}, true},                 // V wider than Q, K (transposed form)
      {"llama3-8b", "a100", {{"head-dim", "128,256"}}, true},
      {"gemma2-9b", "h100", {}, true},                                       // softcap: Compute Derivative
      {"llama3-8b", "a100", {{"alibi", "true"}, {"mask", "none"}, {"document", "true"}}, true},  // a Score and a Mask
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.preset) + " on " + c.gpu);
    support::DiagSink d;
    spec::AttentionSpec s = *spec::find_preset(c.preset);
    auto flags = c.flags;
    flags["gpu"] = c.gpu;
    ASSERT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
    PlanOptions o;
    o.backward = true;
    auto plan = make_plan(s, *hw::find_gpu(c.gpu), d, o);
    ASSERT_TRUE(plan.has_value()) << d.render();
    EXPECT_NE(plan->code.find(" backward with mask "), std::string::npos) << plan->code;
    EXPECT_NE(plan->code.find("Copy dQ (BM, "), std::string::npos);
    EXPECT_EQ(plan->code.find("Copy dK (BN, d) in coordinate [n_block, 0] from register to global and accumulate") != std::string::npos ||
                  plan->code.find("Copy dK (BN, d_qk) in coordinate [n_block, 0] from register to global and accumulate") != std::string::npos,
              c.accumulate)
        << plan->code;
    EXPECT_FALSE(plan->tiles.reason.empty());
    for (const auto& name : spec::score_order(s.variants))  // the chain rule through every Score
      EXPECT_NE(plan->code.find(" with " + name + "\n"), std::string::npos) << name;
    if (s.variants.any_score()) {
      EXPECT_NE(plan->code.find("Compute Derivative dS, S0 at [i, n_block] with "), std::string::npos);
    }
    auto v = verify(*plan, d);
    EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
  }
}

// head_dim_v > head_dim_qk: the wider head dim picks the rules row (the row says so), and the TL code
// checks and interprets on every architecture the rules cover.
TEST(planWideV, TheWiderHeadDimPicksTheRowAndTheCodeInterprets) {
  struct Case { const char* gpu; const char* dims; int bn; };
  for (const Case& c : {Case{"h100", "64,128", 128}, Case{"h100", "128,256", 80}, Case{"a100", "64,128", 64}, Case{"a100", "64,256", 64},
                        Case{"t4", "64,128", 64}}) {
    SCOPED_TRACE(std::string(c.gpu) + " " + c.dims);
    support::DiagSink d;
    spec::AttentionSpec s = *spec::find_preset("llama3-8b");
    std::map<std::string, std::string> flags = {{"gpu", c.gpu}, {"head-dim", c.dims}};
    if (std::string(c.gpu) == "t4") flags["dtype"] = "fp16";
    ASSERT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
    ASSERT_TRUE(spec::validate(s, d)) << d.render();
    auto plan = make_plan(s, *hw::find_gpu(c.gpu), d);
    ASSERT_TRUE(plan.has_value()) << d.render();
    EXPECT_EQ(plan->tiles.bn, c.bn) << plan->tiles.reason;
    EXPECT_NE(plan->tiles.reason.find("the wider head dim"), std::string::npos) << plan->tiles.reason;
    auto v = verify(*plan, d);
    EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
  }
  // a V too wide for any tile: a diagnostic with the reason, no plan
  for (const char* gpu : {"h100", "a100"}) {
    support::DiagSink d;
    spec::AttentionSpec s = *spec::find_preset("llama3-8b");
    ASSERT_TRUE(spec::apply_flags(s, {{"gpu", gpu}, {"head-dim", "64,512"}}, d)) << d.render();
    EXPECT_FALSE(make_plan(s, *hw::find_gpu(gpu), d).has_value()) << gpu;
    EXPECT_NE(d.render().find("PLAN0101"), std::string::npos) << d.render();
    EXPECT_NE(d.render().find(std::string(gpu) == "h100" ? "d_v a multiple of 8 up to 256" : "registers"), std::string::npos) << d.render();
  }
}

TEST(planBackward, WhatIsNotPlannedIsRefusedWithItsCode) {
  struct Case { const char* preset; const char* gpu; std::map<std::string, std::string> flags; const char* code; };
  const std::vector<Case> cases = {
      {"llama3-8b", "h100", {{"score-mod", "abs(score)"}}, "PLAN0302"},  // no derivative everywhere
      {"llama2-7b", "l40s", {{"dtype", "fp8_e4m3"}}, "PLAN0502"},
      {"bert-large", "t4", {{"dtype", "fp16"}}, "PLAN0503"},
  };
  for (const auto& c : cases) {
    support::DiagSink d;
    spec::AttentionSpec s = *spec::find_preset(c.preset);
    auto flags = c.flags;
    flags["gpu"] = c.gpu;
    ASSERT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
    PlanOptions o;
    o.backward = true;
    EXPECT_FALSE(make_plan(s, *hw::find_gpu(c.gpu), d, o).has_value()) << c.preset;
    EXPECT_NE(d.render().find(c.code), std::string::npos) << c.preset << ": " << d.render();
  }
}

}  // namespace
}  // namespace qattn::plan
