// The combine lowering (src/backend/combine): the planner's `Kernel NAME combine` program lowers
// statement by statement onto device/qattn/rowwise.cuh for every architecture, exports
// qattn_combine, and follows its TL (a deleted Compute disappears from the kernel, other rows or
// warps give another tiling); programs it has no form for are refused with a located XL
// diagnostic, and no one-line deletion or swap of the program crashes it.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "line_edits.h"
#include "backend/translate.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "tl/parser.h"

namespace qattn::backend {
namespace {

bool has(const support::DiagSink& d, const std::string& code) {
  for (const auto& x : d.all())
    if (x.code == code) return true;
  return false;
}

std::string plan_combine(const std::string& preset, const std::string& gpu, std::map<std::string, std::string> flags = {}) {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset(preset);
  flags["gpu"] = gpu;
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  plan::PlanOptions o;
  o.combine = true;
  auto p = plan::make_plan(s, *hw::find_gpu(gpu), d, o);
  EXPECT_TRUE(p.has_value()) << preset << " on " << gpu << "\n" << d.render();
  if (p) {
    auto v = plan::verify(*p, d);
    EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
  }
  return p ? p->code : std::string();
}

std::optional<Translation> xlate(const std::string& code, const std::string& gpu, support::DiagSink& d) {
  return translate_text(code, plan::make_target(*hw::find_gpu(gpu)), d, "test.tl");
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(EmitCombine, EveryStatementLowersToItsBlockOnEveryArchitecture) {
  const std::pair<const char*, std::map<std::string, std::string>> cases[] = {
      {"t4", {{"dtype", "fp16"}}}, {"a100", {}}, {"l40s", {}}, {"h100", {}}, {"h100", {{"dtype", "fp8_e4m3"}}}};
  for (const auto& [gpu, flags] : cases) {
    SCOPED_TRACE(gpu);
    const std::string code = plan_combine("llama3-8b", gpu, flags);
    support::DiagSink d;
    auto t = xlate(code, gpu, d);
    ASSERT_TRUE(t.has_value()) << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find("QATTN_EXPORT int qattn_combine(const qattn_combine_params* params, void* stream)"), std::string::npos);
    EXPECT_EQ(cu.find("qattn_fwd("), std::string::npos);
    EXPECT_NE(t->info_json.find("\"pass\":\"combine\""), std::string::npos) << t->info_json;
    EXPECT_NE(t->info_json.find("\"d_v\":128"), std::string::npos) << t->info_json;
    EXPECT_NE(cu.find("using Tiling = qattn::rows::RowTiling<4, 128, 1>;"), std::string::npos);
    EXPECT_NE(cu.find("qattn::rows::load_tile<Tiling>(r_O_part, g_O_part, p.op_row_stride, (m_block) * (BM), seqlen_q);"),
              std::string::npos);
    EXPECT_NE(cu.find("qattn::rows::store_vec<Tiling>(r_LSE, g_LSE, 1, (m_block) * (BM), seqlen_q);"), std::string::npos);
    EXPECT_EQ(t->smem_bytes, 0);
    EXPECT_EQ(t->threads, 32);
    // fp8 kernels' O is bf16: the combine of their parts reads and writes bf16
    EXPECT_NE(t->info_json.find(flags.count("dtype") && flags.at("dtype") == "fp16" ? "\"dtype\":\"fp16\"" : "\"dtype\":\"bf16\""),
              std::string::npos) << t->info_json;
    support::DiagSink pd;
    auto prog = tl::parse(code, pd, "code.tl");
    std::function<void(const std::vector<tl::Stmt>&)> each = [&](const std::vector<tl::Stmt>& body) {
      for (const auto& st : body) {
        if (st.kind == tl::Stmt::Kind::Comment || st.kind == tl::Stmt::Kind::Blank) continue;
        if (st.kind != tl::Stmt::Kind::Dim && st.kind != tl::Stmt::Kind::Const) {
          EXPECT_NE(cu.find("// TL " + std::to_string(st.loc.line) + ": "), std::string::npos) << "line " << st.loc.line;
        }
        if (st.kind == tl::Stmt::Kind::For) each(st.loop.body);
      }
    };
    each(prog.stmts);
  }
}

TEST(EmitCombine, TheTlIsTheSourceOfTruth) {
  const std::string code = plan_combine("llama3-8b", "h100");
  support::DiagSink d1;
  auto full = xlate(code, "h100", d1);
  ASSERT_TRUE(full.has_value()) << d1.render();
  EXPECT_NE(full->cuda_source.find("qattn::rows::rescale(r_O, r_alpha);"), std::string::npos);
  // a deleted Compute is gone from the kernel (and the interpreter fails it: interp_combine_test)
  support::DiagSink d2;
  auto cut = xlate(replaced(code, "  Compute Rescale O, alpha\n", ""), "h100", d2);
  ASSERT_TRUE(cut.has_value()) << d2.render();
  EXPECT_EQ(cut->cuda_source.find("qattn::rows::rescale(r_O, r_alpha);"), std::string::npos);
  // other rows and warps in the TL give another tiling and block size
  support::DiagSink d3;
  auto wide = xlate(replaced(code, "Const BM = 4, WARPS = 1", "Const BM = 16, WARPS = 8"), "h100", d3);
  ASSERT_TRUE(wide.has_value()) << d3.render();
  EXPECT_NE(wide->cuda_source.find("using Tiling = qattn::rows::RowTiling<16, 128, 8>;"), std::string::npos);
  EXPECT_EQ(wide->threads, 256);
  // Exp2 for Exp, a row sum of the tile: the lowering writes what the TL says
  support::DiagSink d4;
  auto e2 = xlate(replaced(replaced(code, "  Compute Exp w\n", "  Compute Exp2 w\n"), "Compute Normalize O, l\n",
                           "Compute RowSum O and get t\nCompute Normalize O, l\n"),
                  "h100", d4);
  ASSERT_TRUE(e2.has_value()) << d4.render();
  EXPECT_NE(e2->cuda_source.find("qattn::rows::map<qattn::op::Exp2>(r_w, r_w);"), std::string::npos);
  EXPECT_NE(e2->cuda_source.find("qattn::rows::row_reduce_lanes<false, false>(r_O, r_t);"), std::string::npos);
}

TEST(EmitCombine, TheDecodingTilingUnrollsThePartsLoopAsItsTlSays) {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  ASSERT_TRUE(spec::apply_flags(s, {{"gpu", "h100"}, {"seqlen", "1/8192"}}, d)) << d.render();
  plan::PlanOptions o;
  o.combine = true;
  auto p = plan::make_plan(s, *hw::find_gpu("h100"), d, o);
  ASSERT_TRUE(p.has_value()) << d.render();
  EXPECT_NE(p->code.find("for s = 0: splits {unroll: 16}"), std::string::npos) << p->code;
  auto t = xlate(p->code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  // blocks of 16 parts written out (no branch between their loads), the rest in blocks of 8, 4, 2, 1
  const std::string& c = t->cuda_source;
  ASSERT_NE(c.find("for (; unroll_at_ + 16 <= unroll_hi_; unroll_at_ += 16) {"), std::string::npos) << c;
  EXPECT_NE(c.find("for (; unroll_at_ + 1 <= unroll_hi_; unroll_at_ += 1) {"), std::string::npos) << c;
  EXPECT_NE(c.find("for (int unroll_k_ = 0; unroll_k_ < 16; ++unroll_k_) {\n        const int s = unroll_at_ + unroll_k_;"), std::string::npos) << c;
  EXPECT_EQ(c.find("for (int s = 0; s < splits; ++s)"), std::string::npos);
  EXPECT_NE(c.find("using Tiling = qattn::rows::RowTiling<1, 128, 1>;"), std::string::npos);
  // another factor in the TL, other blocks; a plain loop without the attribute
  support::DiagSink d2, d3, d4;
  auto t4 = xlate(replaced(p->code, "{unroll: 16}", "{unroll: 4}"), "h100", d2);
  ASSERT_TRUE(t4.has_value()) << d2.render();
  // the blocks in order, each present: U, then the powers of two below it
  auto blocks_in_order = [](const std::string& src, std::vector<int> sizes) {
    size_t last = 0;
    for (int n : sizes) {
      const size_t at = src.find("unroll_at_ + " + std::to_string(n) + " <= unroll_hi_");
      if (at == std::string::npos || at < last) return false;
      last = at;
    }
    return true;
  };
  EXPECT_TRUE(blocks_in_order(t4->cuda_source, {4, 2, 1})) << t4->cuda_source;
  EXPECT_EQ(t4->cuda_source.find("unroll_at_ + 8 <= unroll_hi_"), std::string::npos);
  auto t6 = xlate(replaced(p->code, "{unroll: 16}", "{unroll: 6}"), "h100", d4);  // 6, then 4, 2, 1
  ASSERT_TRUE(t6.has_value()) << d4.render();
  EXPECT_TRUE(blocks_in_order(t6->cuda_source, {6, 4, 2, 1})) << t6->cuda_source;
  EXPECT_TRUE(blocks_in_order(c, {16, 8, 4, 2, 1}));
  // a TL loop variable spelling a generated counter's name is renamed, not shadowed
  support::DiagSink d5;
  std::string renamed = replaced(p->code, "for s = 0: splits", "for unroll_k_ = 0: splits");
  for (int i = 0; i < 2; ++i) renamed = replaced(renamed, "[b, s, head]", "[b, unroll_k_, head]");  // O_part's and LSE_part's offsets
  auto tn = xlate(renamed, "h100", d5);
  ASSERT_TRUE(tn.has_value()) << d5.render();
  EXPECT_NE(tn->cuda_source.find("const int unroll_k__tl = unroll_at_ + unroll_k_;"), std::string::npos) << tn->cuda_source;
  auto t0 = xlate(replaced(p->code, " {unroll: 16}", ""), "h100", d3);
  ASSERT_TRUE(t0.has_value()) << d3.render();
  EXPECT_NE(t0->cuda_source.find("for (int s = 0; s < splits; ++s) {"), std::string::npos);
  EXPECT_EQ(t0->cuda_source.find("unroll_at_"), std::string::npos);
}

TEST(EmitCombine, FormsWithoutALoweringAreLocatedDiagnostics) {
  const std::string code = plan_combine("llama3-8b", "h100");
  struct Case {
    const char* what;
    std::string text;
    const char* code;
  };
  const Case cases[] = {
      {"a shared buffer", replaced(code, "  Allocate O_part in register (BM, d_v) fp32\n",
                                   "  Allocate O_part in register (BM, d_v) fp32\n  Allocate X in shared (BM, d_v) bf16\n"),
       "XL0301"},
      {"a Dim the ABI does not pass", replaced(code, "Dim batch, heads_q, seqlen_q, splits, d_v = 128",
                                               "Dim batch, heads_q, seqlen_q, splits, extra, d_v = 128"),
       "XL0301"},
      {"d_v not a multiple of 32", replaced(code, "d_v = 128", "d_v = 80"), "XL0202"},
      {"rows not a multiple of the warps", replaced(code, "Const BM = 4, WARPS = 1", "Const BM = 6, WARPS = 4"), "XL0202"},
      {"a schedule attribute (the checker refuses it first)", replaced(code, "for s = 0: splits", "for s = 0: splits {overlap}"), "TL0715"},
      {"d_v at run time", replaced(code, "d_v = 128", "d_v"), "XL0301"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    support::DiagSink d;
    EXPECT_FALSE(xlate(c.text, "h100", d).has_value());
    EXPECT_TRUE(has(d, c.code)) << d.render();
  }
}

TEST(EmitCombine, EveryOneLineDeletionOrSwapIsADiagnosticOrAKernelNeverACrash) {
  int translated = 0, refused = 0;
  testutil::each_line_edit(plan_combine("llama3-8b", "a100"), [&](const std::string& variant, size_t i) {
    support::DiagSink d;
    auto t = xlate(variant, "a100", d);
    if (t) {
      ++translated;
      EXPECT_NE(t->cuda_source.find("qattn_combine"), std::string::npos);
    } else {
      ++refused;
      EXPECT_TRUE(d.has_errors()) << "line " << i;
    }
  });
  EXPECT_GT(refused, 10);
  EXPECT_GT(translated, 10);
}

}  // namespace
}  // namespace qattn::backend
