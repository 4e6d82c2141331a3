// Stage 2 (src/backend) on the CPU: the translator's output for the planner's TL, checked as text.
//  - tests/emit/*.tl: golden inputs; `# gpu: NAME` picks the target, every `# expect: TEXT` must
//    occur in the .cu (or in the nvcc flags), `# expect-not: TEXT` must not, `# expect-error: XLnnnn`
//    must be reported (and then no source is produced).
//  - presets x GPUs: every plan translates; the MMA and copy atoms match the architecture; every TL
//    statement is named by a `// TL <line>:` comment; the tile constants come from the TL.
//  - the TL is the source of truth: other BM/BN in the TL text give other constants, and deleting
//    `Compute Rescale O, alpha` deletes the rescale (the kernel then computes what the TL says).
// Compilation with nvcc is in emit_compile_test.cc.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <sstream>

#include "emit_test_util.h"
#include "line_edits.h"
#include "backend/translate.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "tl/parser.h"

namespace qattn::backend {
namespace {

namespace fs = std::filesystem;
using namespace emit_test;  // NOLINT: the helpers of emit_test_util.h

// ---- golden files ----------------------------------------------------------------------------------
class GoldenEmit : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenEmit, Matches) {
  std::ifstream f(GetParam());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::string gpu = "a100";
  std::vector<std::string> expect, expect_not, errors;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto take = [&](const std::string& key, std::vector<std::string>* out) {
      if (line.rfind(key, 0) != 0) return false;
      std::string v = line.substr(key.size());
      while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
      if (out) out->push_back(v);
      else gpu = v;
      return true;
    };
    take("# gpu: ", nullptr) || take("# expect: ", &expect) || take("# expect-not: ", &expect_not) ||
        take("# expect-error: ", &errors);
  }
  ASSERT_FALSE(expect.empty() && errors.empty()) << GetParam() << ": no expectations";
  support::DiagSink d;
  auto t = xlate(text, gpu, d);
  if (!errors.empty()) {
    EXPECT_FALSE(t.has_value()) << GetParam();
    for (const auto& e : errors) EXPECT_TRUE(has(d, e)) << GetParam() << ": expected " << e << ", got:\n" << d.render();
    return;
  }
  ASSERT_TRUE(t.has_value()) << GetParam() << "\n" << d.render();
  const std::string all = t->cuda_source + "\n" + join_flags(*t);
  for (const auto& e : expect) EXPECT_NE(all.find(e), std::string::npos) << GetParam() << ": missing `" << e << "`";
  for (const auto& e : expect_not) EXPECT_EQ(all.find(e), std::string::npos) << GetParam() << ": unexpected `" << e << "`";
}

std::vector<std::string> golden_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(QATTN_SOURCE_DIR) / "tests" / "emit"))
    if (e.path().extension() == ".tl") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenEmit, ::testing::ValuesIn(golden_files()), [](const auto& info) {
  std::string n = fs::path(info.param).stem().string();
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

// ---- presets x GPUs --------------------------------------------------------------------------------
struct Case {
  std::string preset, gpu;
  std::map<std::string, std::string> flags;
  std::string mma, copy_g2s, reshape;
};

TEST(Emit, PresetsTranslateForEachArchitecture) {
  const std::vector<Case> cases = {
      {"llama2-7b", "a100", {}, "SM80_16x8x16_F32BF16BF16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"llama3-8b", "a100", {{"mask", "none"}}, "SM80_16x8x16_F32BF16BF16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"starcoder-15b", "a100", {{"dtype", "fp16"}}, "SM80_16x8x16_F32F16F16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"bert-large", "a100", {}, "SM80_16x8x16_F32BF16BF16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"deepseek-v3-mla-prefill", "a100", {{"lse", "true"}}, "SM80_16x8x16_F32BF16BF16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"mistral-7b", "a100", {}, "SM80_16x8x16_F32BF16BF16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"llama3.2-1b", "a100", {{"mask", "causal_top_left"}}, "SM80_16x8x16_F32BF16BF16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"bert-large", "t4", {{"dtype", "fp16"}}, "SM75_16x8x8_F32F16F16F32_TN", "false>()", "acc_to_a_m16n8k8"},
      {"llama2-7b", "t4", {{"dtype", "fp16"}}, "SM75_16x8x8_F32F16F16F32_TN", "false>()", "acc_to_a_m16n8k8"},
      {"llama3-8b", "l40s", {{"dtype", "fp16"}}, "SM80_16x8x16_F32F16F16F32_TN", "true>()", "acc_to_a_m16n8k16"},
      {"llama2-7b", "l40s", {{"dtype", "fp8_e4m3"}}, "SM89_16x8x32_F32E4M3E4M3F32_TN", "true>()", "acc_to_a_m16n8k32"},
      {"llama3-8b", "l40s", {{"dtype", "fp8_e4m3"}, {"mask", "none"}}, "SM89_16x8x32_F32E4M3E4M3F32_TN", "true>()", "acc_to_a_m16n8k32"},
  };
  for (const auto& c : cases) {
    const std::string what = c.preset + " on " + c.gpu;
    const std::string code = plan_code(c.preset, c.gpu, c.flags);
    support::DiagSink d;
    auto t = xlate(code, c.gpu, d);
    ASSERT_TRUE(t.has_value()) << what << "\n" << d.render() << "\n" << code;
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find(c.mma), std::string::npos) << what;
    EXPECT_NE(cu.find("qattn::make_g2s_copy<Element, kThreads, "), std::string::npos) << what;
    EXPECT_NE(cu.find(c.copy_g2s), std::string::npos) << what;
    EXPECT_NE(cu.find(c.reshape), std::string::npos) << what;
    EXPECT_NE(cu.find("SM75_U32x4_LDSM_N"), std::string::npos) << what;
    EXPECT_NE(cu.find("int qattn_fwd(const qattn_fwd_params* params, void* stream)"), std::string::npos) << what;
    EXPECT_NE(cu.find("qattn_kernel_info"), std::string::npos) << what;
    EXPECT_NE(cu.find("qattn_last_error"), std::string::npos) << what;
    EXPECT_NE(cu.find("__launch_bounds__(kThreads, kMinBlocksPerSm) " + t->kernel_name + "("), std::string::npos) << what;
    // every TL statement is named
    support::DiagSink pd;
    tl::Program p = tl::parse(code, pd);
    std::function<void(const std::vector<tl::Stmt>&)> visit = [&](const std::vector<tl::Stmt>& body) {
      for (const auto& s : body) {
        if (s.kind == tl::Stmt::Kind::Comment || s.kind == tl::Stmt::Kind::Blank) continue;
        EXPECT_NE(cu.find("// TL " + std::to_string(s.loc.line) + ":"), std::string::npos)
            << what << ": no block for TL line " << s.loc.line;
        if (s.kind == tl::Stmt::Kind::For) visit(s.loop.body);
      }
    };
    visit(p.stmts);
    // the tile constants are the TL's
    std::smatch m;
    ASSERT_TRUE(std::regex_search(code, m, std::regex(R"(Const BM = (\d+), BN = (\d+), WARPS = (\d+), STAGES = (\d+))"))) << code;
    EXPECT_NE(cu.find("constexpr int BM = " + m[1].str() + ";"), std::string::npos) << what;
    EXPECT_NE(cu.find("constexpr int BN = " + m[2].str() + ";"), std::string::npos) << what;
    EXPECT_NE(cu.find("constexpr int WARPS = " + m[3].str() + ";"), std::string::npos) << what;
    EXPECT_EQ(t->threads, 32 * std::stoi(m[3].str())) << what;
    EXPECT_GT(t->smem_bytes, 0) << what;
  }
}

// ---- the TL is the source of truth ---------------------------------------------------------------
TEST(Emit, TileConstantsFollowTheTl) {
  const std::string code = plan_code("llama2-7b", "a100");
  const std::string edited = std::regex_replace(code, std::regex("Const BM = 128, BN = 64, WARPS = 4, STAGES = 1"),
                                                "Const BM = 64, BN = 32, WARPS = 4, STAGES = 2");
  ASSERT_NE(code, edited);
  support::DiagSink d1, d2;
  auto a = xlate(code, "a100", d1), b = xlate(edited, "a100", d2);
  ASSERT_TRUE(a && b) << d1.render() << d2.render();
  EXPECT_NE(b->cuda_source.find("constexpr int BM = 64;"), std::string::npos);
  EXPECT_NE(b->cuda_source.find("constexpr int BN = 32;"), std::string::npos);
  EXPECT_NE(b->cuda_source.find("constexpr int STAGES = 2;"), std::string::npos);
  EXPECT_NE(b->cuda_source.find("Shape<Int<BM>, Int<BN>>"), std::string::npos);
  // two stages: the next K and V tiles are issued at the first wait of an iteration
  EXPECT_NE(b->cuda_source.find("qattn::wait<1>();"), std::string::npos);
  EXPECT_NE(b->cuda_source.find("const int stage = (j - lo_j) % STAGES;"), std::string::npos);
  EXPECT_NE(a->smem_bytes, b->smem_bytes);
  EXPECT_NE(a->cuda_source, b->cuda_source);
}

TEST(Emit, DeletingTheRescaleOfODeletesItFromTheKernel) {
  const std::string code = plan_code("llama2-7b", "a100");
  ASSERT_NE(code.find("Compute Rescale O, alpha\n"), std::string::npos);
  std::string edited = code;
  edited.erase(edited.find("  Compute Rescale O, alpha\n"), std::string("  Compute Rescale O, alpha\n").size());
  support::DiagSink d1, d2;
  auto a = xlate(code, "a100", d1), b = xlate(edited, "a100", d2);
  ASSERT_TRUE(a && b) << d1.render() << d2.render();
  EXPECT_NE(a->cuda_source.find("qattn::rescale(tOrO, ralpha);"), std::string::npos);
  EXPECT_EQ(b->cuda_source.find("qattn::rescale(tOrO"), std::string::npos);
  EXPECT_EQ(b->cuda_source.find("Rescale O"), std::string::npos);
  EXPECT_NE(b->cuda_source.find("qattn::rescale(rl, ralpha);"), std::string::npos);  // l still rescaled
}

TEST(Emit, ChangedMaskChangesTheMaskCall) {
  const std::string code = plan_code("llama2-7b", "a100", {{"mask", "causal_top_left"}});
  support::DiagSink d;
  auto t = xlate(code, "a100", d);
  ASSERT_TRUE(t) << d.render();
  EXPECT_NE(t->cuda_source.find("qattn::MaskKind::CausalTopLeft"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("hi_j = qattn::imin(qattn::cdiv(seqlen_k, BN), qattn::cdiv((m_block + 1) * BM, BN))"),
            std::string::npos);
}

// The window as a launch argument (TL builtins window_left / window_right) is bound at kernel entry:
// the loop bounds that read it do not delay the K prefetch behind Q's wait, as they did not with
// constants (measured: 5.5% slower on an H200 before, bench/results/2026-11-26-h200-launch-args).
TEST(Emit, LaunchArgumentsDoNotDelayThePrefetch) {
  support::DiagSink d;
  auto t = xlate(plan_code("mistral-7b", "a100", {{"window", "256,0"}}), "a100", d);
  ASSERT_TRUE(t) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* want : {"const int window_left = qattn::window_side(p.window_left, p.seqlen_q, p.seqlen_k);",
                           "const int window_left = p.window_left;", "kp.window_left = window_left;", ">>>(kp);",
                           "qattn::host::check_launch_args(p, true, false)", "MaskArgs{p.seqlen_q, p.seqlen_k, window_left, window_right}"})
    EXPECT_NE(cu.find(want), std::string::npos) << want;
  const size_t prefetch = cu.find("if (lo_j < hi_j) copy_K(lo_j, 0);"), q_wait = cu.find("qattn::wait<1>();  // Q has landed");
  ASSERT_NE(prefetch, std::string::npos);
  ASSERT_NE(q_wait, std::string::npos) << "Q waited for with no K copy in flight";
  EXPECT_LT(prefetch, q_wait);
}

TEST(Emit, InfoJsonDescribesTheKernel) {
  support::DiagSink d;
  auto t = xlate(plan_code("mistral-7b", "a100", {{"window", "256,0"}, {"lse", "true"}}), "a100", d);
  ASSERT_TRUE(t) << d.render();
  const auto j = nlohmann::json::parse(t->info_json);  // derived from the kernel IR (kir_print.h)
  EXPECT_EQ(j.at("arch"), "sm80") << t->info_json;
  EXPECT_EQ(j.at("family"), "mma") << t->info_json;
  EXPECT_EQ(j.at("window"), "runtime") << t->info_json;  // the planner's window is a launch argument
  EXPECT_EQ(j.at("args"), nlohmann::json::array({"window_left", "window_right"})) << t->info_json;
  EXPECT_EQ(j.at("lse"), true) << t->info_json;
  EXPECT_EQ(j.at("pipelined"), true) << t->info_json;
  EXPECT_EQ(j.at("smem_bytes"), t->smem_bytes) << t->info_json;
  EXPECT_NE(t->cuda_source.find(t->info_json), std::string::npos);
}

// Variants: the declarations become lambdas, Modify / named Mask calls follow the TL, the skip
// walks visible tiles, aux inputs are ABI slots listed in the info JSON, and the TL decides.
TEST(Emit, VariantsLowerStatementByStatement) {
  const std::string code = plan_code("llama3-8b", "a100", {{"document", "true"}, {"softcap", "30"}, {"alibi", "true"}});
  support::DiagSink d;
  auto t = xlate(code, "a100", d);
  ASSERT_TRUE(t) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* want : {"auto score_softcap = [&](float score, int q_idx, int kv_idx) -> float",
                           "auto mask_document = [&](int q_idx, int kv_idx) -> bool", "auto empty_document = ",
                           "auto full_document = ", "qattn::apply_score<BM, BN>(tiled_mma, tSrS, (m_block) * BM, (j) * BN, score_softcap, tid);",
                           "qattn::apply_keep<BM, BN>(tiled_mma, tSrS, row0, col0, p.seqlen_k, full, mask_document, tid);",
                           "for (int j = first_j, it_j = 0; j < hi_j; j = next_j(j), ++it_j)", "static_cast<const int*>(p.aux[",
                           "false, 7u); st != QATTN_OK)"})  // aux[0..2] must be non-NULL (host.cuh check_fwd_params)
    EXPECT_NE(cu.find(want), std::string::npos) << want;
  const nlohmann::json seg_q = {{"name", "seg_q"}, {"dtype", "int32"}, {"shape", {"batch", "seqlen_q"}}};
  const auto aux = nlohmann::json::parse(t->info_json).at("aux");
  EXPECT_NE(std::find(aux.begin(), aux.end(), seg_q), aux.end()) << t->info_json;
  // the TL decides: no Modify statement, no apply_score; no skip attribute, a plain loop
  std::string edited = code;
  edited.erase(edited.find("  Compute Modify S at [m_block, j] with softcap\n"), std::string("  Compute Modify S at [m_block, j] with softcap\n").size());
  edited.erase(edited.find(" {skip: document}"), std::string(" {skip: document}").size());
  support::DiagSink d2;
  auto t2 = xlate(edited, "a100", d2);
  ASSERT_TRUE(t2) << d2.render();
  EXPECT_EQ(t2->cuda_source.find("apply_score<BM, BN>(tiled_mma, tSrS, (m_block) * BM, (j) * BN, score_softcap"), std::string::npos);
  EXPECT_NE(t2->cuda_source.find("for (int j = lo_j; j < hi_j; ++j)"), std::string::npos);
}

// ---- diagnostics -----------------------------------------------------------------------------------
TEST(Emit, ProgramsThatFailTheCheckerAreNotTranslated) {
  std::string code = plan_code("llama2-7b", "a100");
  code.erase(code.find("  Reshape Pc"), code.find('\n', code.find("  Reshape Pc")) - code.find("  Reshape Pc") + 1);
  support::DiagSink d;
  EXPECT_FALSE(xlate(code, "a100", d));
  EXPECT_TRUE(has(d, "TL0501")) << d.render();
  EXPECT_TRUE(has(d, "XL0001")) << d.render();
}

TEST(Emit, UnsupportedFormsGetXlDiagnostics) {
  support::DiagSink d1;
  EXPECT_FALSE(xlate(plan_code("llama2-7b", "a100"), "t4", d1));  // bf16 on Turing
  EXPECT_TRUE(has(d1, "XL0102")) << d1.render();
  support::DiagSink d2;
  EXPECT_FALSE(xlate(plan_code("llama2-7b", "l40s", {{"dtype", "fp8_e4m3"}}), "a100", d2));  // fp8 on Ampere
  EXPECT_TRUE(has(d2, "XL0102")) << d2.render();
  // a schedule attribute the lowering does not know
  std::string code = plan_code("llama2-7b", "a100");
  code.replace(code.find("Compute GEMM Q, K^T and get S"), std::string("Compute GEMM Q, K^T and get S").size(),
               "Compute GEMM Q, K^T and get S {async}");
  support::DiagSink d3;
  EXPECT_FALSE(xlate(code, "a100", d3));
  EXPECT_FALSE(d3.all().empty());
  // nested loop
  std::string nested = plan_code("llama2-7b", "a100");
  const std::string gemm2 = "  Compute GEMM Pc, V and accumulate O\n";
  nested.replace(nested.find(gemm2), gemm2.size(), "  for t = 0: 1\n    Compute Max m, m_new\n  end\n" + gemm2);
  support::DiagSink d4;
  EXPECT_FALSE(xlate(nested, "a100", d4));
  EXPECT_TRUE(has(d4, "XL0302")) << d4.render();
  // every diagnostic has a line or is program-wide, and a hint where the user can act
  for (const auto& x : d4.all()) {
    if (x.code == "XL0302") {
      EXPECT_GT(x.loc.line, 0);
    }
  }
}

TEST(Emit, GarbageNeverCrashes) {
  for (const char* text : {"", "Kernel k", "Kernel k with mask causal\nfor j = 0: 1\nend\n", "\x01\x02", "Copy Q from a to b"}) {
    support::DiagSink d;
    EXPECT_FALSE(xlate(text, "a100", d));
    EXPECT_TRUE(d.has_errors());
  }
}


}  // namespace
}  // namespace qattn::backend
