// Unit tests of the TL checker (src/tl/checker*.cc): valid programs pass; each error class is
// reported with its code at the right line; several errors in one program are all reported;
// malformed ASTs do not crash.
#include "tl/checker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>

#include "checker_test_util.h"
#include "tl/parser.h"

namespace qattn::tl {
namespace {

using test::Checked;
using test::kFlash;
using test::line_of;
using test::replace;
using test::run;

// ---- valid programs ------------------------------------------------------------------------

TEST(checker, FlashForwardPasses) {
  auto r = run(kFlash);
  EXPECT_TRUE(r.ok) << r.rendered;
  EXPECT_TRUE(r.diags.empty()) << r.rendered;
}

TEST(checker, CausalWithLsePasses) {
  std::string t = replace(kFlash, "with mask none", "with mask causal");
  t = replace(t, "for j = 0: cdiv(seqlen_k, BN)",
              "for j = 0: min(cdiv(seqlen_k, BN), cdiv((m_block + 1) * BM + seqlen_k - seqlen_q, BN))");
  t = replace(t, "with bounds", "with causal");
  t = replace(t, "Allocate O in global (seqlen_q, d) fp16 with offset [b, head]\n",
              "Allocate O in global (seqlen_q, d) fp16 with offset [b, head]\n"
              "Allocate LSE in global (seqlen_q) fp32 with offset [b, head]\n");
  t += "Compute Log l and get logl\nCompute Add logl, m and get LSE\n"
       "Copy LSE (BM) in coordinate [m_block] from register to global\n";
  t = replace(t, "Allocate l in register (BM) fp32 init 0\n",
              "Allocate l in register (BM) fp32 init 0\nAllocate LSE in register (BM) fp32\n");
  auto r = run(t);
  EXPECT_TRUE(r.ok) << r.rendered;
}

// The rules engine's style: exp2 domain, LSE, operands read from shared (no register Q/K/V),
// a window with one unbounded side, fixed head dims that differ for QK and V/O.
const char* kRulesStyle = R"(# TL code (stage 1b)
Kernel flash_fwd_x with mask window(seqlen_k, 5)
Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d_qk = 192, d_v = 128
Const BM = 128, BN = 64, WARPS = 8, STAGES = 2
Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch
# GQA
Let kv_head = head / (heads_q / heads_kv)

Allocate Q in global (seqlen_q, d_qk) bf16 with offset [b, head]
Allocate K in global (seqlen_k, d_qk) bf16 with offset [b, kv_head]
Allocate V in global (seqlen_k, d_v) bf16 with offset [b, kv_head]
Allocate O in global (seqlen_q, d_v) bf16 with offset [b, head]
Allocate LSE in global (seqlen_q) fp32 with offset [b, head]
Allocate Q in shared (BM, d_qk) bf16
Allocate K in shared (BN, d_qk) bf16
Allocate V in shared (BN, d_v) bf16
Allocate O in register (BM, d_v) fp32 init 0
Allocate m in register (BM) fp32 init -inf
Allocate l in register (BM) fp32 init 0
Allocate LSE in register (BM) fp32

Copy Q (BM, d_qk) in coordinate [m_block, 0] from global to shared
for j = 0: min(cdiv(seqlen_k, BN), cdiv((m_block + 1) * BM + seqlen_k - seqlen_q + 5, BN))
  Copy K (BN, d_qk) in coordinate [j, 0] from global to shared
  Compute GEMM Q, K^T and get S
  Compute Multiply S, softmax_scale * log2e
  Compute Mask S at [m_block, j] with window(seqlen_k, 5)
  Compute RowMax S and get m_tile
  Compute Max m, m_tile and get m_new
  Compute Subtract m, m_new and get alpha
  Compute Exp2 alpha
  Compute Subtract S, m_new and get P
  Compute Exp2 P
  Compute RowSum P and get l_tile
  Compute Rescale l, alpha
  Compute Add l, l_tile
  Compute Rescale O, alpha
  Compute Convert P and get Pc bf16
  Reshape Pc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)
  Copy V (BN, d_v) in coordinate [j, 0] from global to shared
  Compute GEMM Pc, V and accumulate O
  Compute Max m, m_new
end
Compute Log2 l and get LSE
Compute Add LSE, m
Compute Multiply LSE, ln2
Compute Normalize O, l
Copy O (BM, d_v) in coordinate [m_block, 0] from register to global
Copy LSE (BM) in coordinate [m_block] from register to global
)";

TEST(checker, RulesEngineStylePasses) {
  auto r = run(kRulesStyle);
  EXPECT_TRUE(r.ok) << r.rendered;
}

// Causal with the loop split into unmasked and diagonal tiles; the second loop's bounds are both
// negative for blocks with no visible key (an empty loop is legal whatever its bounds).
TEST(checker, SplitCausalLoopsPass) {
  std::string t = replace(kFlash, "with mask none", "with mask causal");
  t = replace(t, "Let kv_head = head / (heads_q / heads_kv)\n",
              "Let kv_head = head / (heads_q / heads_kv)\n"
              "Let n_full = max(0, (m_block * BM + seqlen_k - seqlen_q) / BN)\n"
              "Let n_all = min(cdiv(seqlen_k, BN), cdiv((m_block + 1) * BM + seqlen_k - seqlen_q, BN))\n");
  auto b = t.find("for j = ");
  auto e = t.find("end\n", b) + 4;
  std::string loop = t.substr(b, e - b);
  std::string first = replace(loop, "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: min(n_full, n_all)");
  std::string second = replace(loop, "for j = 0: cdiv(seqlen_k, BN)", "for j = min(n_full, n_all): n_all");
  second = replace(second, "with bounds", "with causal");
  t.replace(b, e - b, first + second);
  auto r = run(t);
  EXPECT_TRUE(r.ok) << r.rendered << t;
}

TEST(checker, InfoDescribesTensors) {
  support::DiagSink diags;
  Program p = parse(kFlash, diags);
  CheckInfo info;
  ASSERT_TRUE(check(p, diags, {}, info)) << diags.render();
  EXPECT_EQ(info.kernel_name, "flash_fwd");
  ASSERT_TRUE(info.tensors.count("O"));
  EXPECT_TRUE(info.tensors["O"].in_global && info.tensors["O"].in_register);
  EXPECT_TRUE(info.tensors["O"].written_to_global);
  EXPECT_TRUE(info.tensors["O"].loop_carried);
  EXPECT_TRUE(info.tensors["m"].loop_carried);
  EXPECT_FALSE(info.tensors["Q"].loop_carried);
  EXPECT_FALSE(info.tensors["S"].loop_carried);
  ASSERT_TRUE(info.tensors.count("P16"));
  EXPECT_EQ(info.tensors["P16"].register_dtype, DType::F16);
  EXPECT_EQ(info.grid_vars, (std::vector<std::string>{"m_block", "head", "b"}));
}

TEST(checker, ExplicitSampleDims) {
  CheckOptions o;
  o.sample_dims = {{{"batch", 1}, {"heads_q", 2}, {"heads_kv", 1}, {"seqlen_q", 65}, {"seqlen_k", 1000}, {"d", 64}}};
  EXPECT_TRUE(run(kFlash, o).ok);
  o.sample_dims = {{{"batch", 1}, {"heads_q", 2}, {"heads_kv", 1}, {"seqlen_q", 65}}};
  auto r = run(kFlash, o);
  EXPECT_TRUE(r.has("TL0603")) << r.rendered;  // seqlen_k has no value
}

// ---- names and scopes ----------------------------------------------------------------------

TEST(checker, UndeclaredName) {
  std::string t = replace(kFlash, "Compute Rescale O, alpha", "Compute Rescale O, alpah");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0301", t, "Compute Rescale O, alpah");
  EXPECT_NE(r.rendered.find("did you mean 'alpha'"), std::string::npos) << r.rendered;
}

TEST(checker, UndeclaredDimInShape) {
  std::string t = replace(kFlash, "Allocate Q in shared (BM, d) fp16", "Allocate Q in shared (BM, dd) fp16");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0301", t, "Allocate Q in shared (BM, dd)");
}

TEST(checker, DuplicateDeclarations) {
  std::string t = replace(kFlash, "Allocate K in shared (BN, d) fp16\n",
                          "Allocate K in shared (BN, d) fp16\nAllocate K in shared (BN, d) fp16 # dup\n");
  t = replace(t, "Const BM = 64, BN = 64", "Const BM = 64, BN = 64, d = 3");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0302", t, "# dup");
  EXPECT_CODE_AT(r, "TL0302", t, "Const BM");
}

TEST(checker, WrongKindOfName) {
  std::string t = replace(kFlash, "Copy K (BN, d) in coordinate [j, 0]", "Copy K (BN, d) in coordinate [Q, 0]");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0306", t, "coordinate [Q, 0]");
  std::string t2 = replace(kFlash, "Allocate Q in shared (BM, d) fp16", "Allocate Q in shared (m_block, d) fp16");
  EXPECT_CODE_AT(run(t2), "TL0306", t2, "(m_block, d)");
}

TEST(checker, KernelHeader) {
  std::string t = replace(kFlash, "Kernel flash_fwd with mask none\n", "");
  auto r = run(t);
  EXPECT_TRUE(r.has("TL0307", 1)) << r.rendered;
  std::string t2 = std::string(kFlash) + "Kernel again\n";
  EXPECT_TRUE(run(t2).has("TL0307", line_of(t2, "Kernel again")));
  auto r3 = run("");
  EXPECT_TRUE(r3.has("TL0307")) << r3.rendered;
  std::string t4 = "# a comment first\n" + std::string(kFlash);
  EXPECT_TRUE(run(t4).ok);
}

TEST(checker, HeaderStatementInLoop) {
  std::string t = replace(kFlash, "  Compute Max m, m_new\n", "  Compute Max m, m_new\n  Const X = 3\n");
  EXPECT_CODE_AT(run(t), "TL0308", t, "Const X");
}

TEST(checker, OutOfScopeAfterLoop) {
  std::string t = replace(kFlash, "Compute Normalize O, l\n", "Compute Normalize O, l\nCompute Exp P # after\n");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0301", t, "Compute Exp P # after");
  EXPECT_NE(r.rendered.find("scope ended"), std::string::npos) << r.rendered;
}

// ---- data flow -----------------------------------------------------------------------------

TEST(checker, CopyBeforeGlobalAllocate) {
  std::string t = replace(kFlash, "Allocate K in global (seqlen_k, d) fp16 with offset [b, kv_head]\n", "");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0303", t, "Copy K (BN, d)");
}

TEST(checker, LoopCarriedAllocatedInLoop) {
  std::string t = replace(kFlash, "Allocate m in register (BM) fp32 init -inf\n", "");
  t = replace(t, "  Copy K (BN, d)", "  Allocate m in register (BM) fp32 init -inf\n  Copy K (BN, d)");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0304", t, "  Allocate m in register");
  EXPECT_NE(r.rendered.find("move `Allocate m in register (BM) fp32 init -inf` before `for j = 0: cdiv(seqlen_k, BN)`"),
            std::string::npos)
      << r.rendered;
  EXPECT_EQ(r.count("TL0301"), 0) << r.rendered;  // the later use is covered by the TL0304
  EXPECT_EQ(r.count("TL0305"), 0) << r.rendered;
}

TEST(checker, AccumulatorAllocatedInLoop) {
  std::string t = replace(kFlash, "Allocate O in register (BM, d) fp32 init 0\n", "");
  t = replace(t, "  Copy K (BN, d)", "  Allocate O in register (BM, d) fp32 init 0\n  Copy K (BN, d)");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0304", t, "  Allocate O in register");
  EXPECT_EQ(r.diags.size(), 1u) << r.rendered;  // the uses after the loop are covered by the TL0304
}

TEST(checker, RegisterBufferOutOfScope) {
  std::string t = replace(kFlash, "Allocate O in register (BM, d) fp32 init 0\n", "");
  t = replace(t, "  Compute Rescale O, alpha\n", "");
  t = replace(t, "  Compute GEMM P16, V and accumulate O\n",
              "  Allocate O in register (BM, d) fp32\n  Compute GEMM P16, V and get O\n");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0301", t, "Compute Normalize O, l");
  EXPECT_NE(r.rendered.find("register buffer of 'O' is not visible here"), std::string::npos) << r.rendered;
}

TEST(checker, PerIterationTempInLoopIsFine) {
  std::string t = replace(kFlash, "  Compute GEMM Q, K^T and get S\n",
                          "  Allocate S in register (BM, BN) fp32\n  Compute GEMM Q, K^T and get S\n");
  auto r = run(t);
  EXPECT_TRUE(r.ok) << r.rendered;
}

TEST(checker, UseBeforeDefinition) {
  std::string t = replace(kFlash, "Allocate l in register (BM) fp32 init 0", "Allocate l in register (BM) fp32");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0305", t, "Compute Rescale l, alpha");
  std::string t2 = replace(kFlash, "  Copy K (BN, d) in coordinate [j, 0] from global to shared\n", "");
  EXPECT_CODE_AT(run(t2), "TL0305", t2, "Copy K from shared to register");
}

TEST(checker, LoopMayRunZeroTimes) {
  // Written only inside the loop, read after it: undefined when the loop does not run.
  std::string t = replace(kFlash, "Allocate l in register (BM) fp32 init 0\n",
                          "Allocate l in register (BM) fp32 init 0\nAllocate last in register (BM) fp32\n");
  t = replace(t, "  Compute Max m, m_new\n", "  Compute Max m, m_new\n  Compute Exp m_new and get last\n");
  t = replace(t, "Compute Normalize O, l\n", "Compute Normalize O, l\nCompute Add l, last\n");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0305", t, "Compute Add l, last");
}

// ---- shapes, transposes, levels ------------------------------------------------------------

TEST(checker, GemmShapeMismatch) {
  std::string t = replace(kFlash, "Allocate K in shared (BN, d) fp16", "Allocate K in shared (BN, BM) fp16");
  t = replace(t, "Allocate K in register (BN, d) fp16", "Allocate K in register (BN, BM) fp16");
  t = replace(t, "Copy K (BN, d) in coordinate", "Copy K (BN, BM) in coordinate");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0401", t, "Compute GEMM Q, K^T");
}

TEST(checker, AccumulatorShapeMismatch) {
  std::string t = replace(kFlash, "Allocate O in register (BM, d) fp32 init 0", "Allocate O in register (BM, BN) fp32 init 0");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0401", t, "Compute GEMM P16, V and accumulate O");
}

TEST(checker, TransposeConfusionGemm) {
  std::string t = replace(kFlash, "Compute GEMM Q, K^T and get S", "Compute GEMM Q, K and get S");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0402", t, "Compute GEMM Q, K and get S");
  EXPECT_NE(r.rendered.find("write `K^T`"), std::string::npos) << r.rendered;
  EXPECT_EQ(r.count("TL0401"), 0) << r.rendered;
  std::string t2 = replace(kFlash, "Compute GEMM P16, V and accumulate O", "Compute GEMM P16, V^T and accumulate O");
  auto r2 = run(t2);
  EXPECT_CODE_AT(r2, "TL0402", t2, "Compute GEMM P16, V^T");
}

TEST(checker, TransposeConfusionCopy) {
  std::string t = replace(kFlash, "Allocate K in shared (BN, d) fp16", "Allocate K in shared (d, BN) fp16");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0402", t, "Copy K (BN, d) in coordinate");
  std::string t2 = replace(kFlash, "Copy K (BN, d) in coordinate [j, 0]", "Copy K (d, BN) in coordinate [0, j]");
  t2 = replace(t2, "Allocate K in shared (BN, d) fp16", "Allocate K in shared (d, BN) fp16");
  EXPECT_CODE_AT(run(t2), "TL0402", t2, "Copy K (d, BN)");
}

TEST(checker, CopyTileMismatch) {
  std::string t = replace(kFlash, "Copy V (BN, d) in coordinate [j, 0]", "Copy V (BM, d) in coordinate [j, 0]");
  t = replace(t, "Const BM = 64, BN = 64", "Const BM = 128, BN = 64");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0404", t, "Copy V (BM, d)");
}

TEST(checker, OperandLevels) {
  // GEMM from global only
  std::string t = replace(kFlash, "Allocate V in shared (BN, d) fp16\n", "");
  t = replace(t, "Allocate V in register (BN, d) fp16\n", "");
  t = replace(t, "  Copy V (BN, d) in coordinate [j, 0] from global to shared\n  Copy V from shared to register\n", "");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0403", t, "Compute GEMM P16, V");
  // element-wise on shared
  std::string t2 = replace(kFlash, "  Compute GEMM P16, V and accumulate O\n",
                           "  Compute GEMM P16, V and accumulate O\n  Compute Exp V\n");
  t2 = replace(t2, "Allocate V in register (BN, d) fp16\n", "");
  t2 = replace(t2, "  Copy V from shared to register\n", "");
  auto r2 = run(t2);
  EXPECT_CODE_AT(r2, "TL0403", t2, "Compute Exp V");
  EXPECT_TRUE(r2.count("TL0403") == 1) << r2.rendered;  // GEMM from shared is fine
  // copies between the wrong levels
  std::string t3 = replace(kFlash, "Copy Q from shared to register", "Copy Q (BM, d) in coordinate [m_block, 0] from global to register");
  EXPECT_CODE_AT(run(t3), "TL0403", t3, "from global to register");
  std::string t4 = replace(kFlash, "Copy Q from shared to register", "Copy Q from shared to shared");
  EXPECT_CODE_AT(run(t4), "TL0403", t4, "from shared to shared");
}

TEST(checker, ElementwiseShapes) {
  std::string t = replace(kFlash, "Compute Subtract S, m_new and get P", "Compute Subtract S, O and get P");
  EXPECT_CODE_AT(run(t), "TL0405", t, "Compute Subtract S, O");
  std::string t2 = replace(kFlash, "Compute Rescale O, alpha", "Compute Rescale O, S");
  EXPECT_CODE_AT(run(t2), "TL0405", t2, "Compute Rescale O, S");
  std::string t3 = replace(kFlash, "Compute RowMax S and get m_tile", "Compute RowMax m and get m_tile");
  EXPECT_CODE_AT(run(t3), "TL0405", t3, "Compute RowMax m");
  std::string t4 = replace(kFlash, "Compute Multiply S, softmax_scale", "Compute Multiply S, softmax_scale * log2e");
  EXPECT_TRUE(run(t4).ok);
}

TEST(checker, ComputeForms) {
  std::string t = replace(kFlash, "Compute Exp alpha", "Compute Exp alpha, P");
  EXPECT_CODE_AT(run(t), "TL0408", t, "Compute Exp alpha, P");
  std::string t2 = replace(kFlash, "Compute Add l, l_tile", "Compute Add l_tile and accumulate l");
  auto r2 = run(t2);
  EXPECT_TRUE(r2.has("TL0408", line_of(t2, "Compute Add l_tile"))) << r2.rendered;
  std::string t3 = replace(kFlash, "Compute Mask S at [m_block, j] with bounds", "Compute Mask S at [m_block, j] with none");
  EXPECT_CODE_AT(run(t3), "TL0409", t3, "with none");
  std::string t4 = replace(kFlash, "Compute Convert P and get P16 fp16", "Compute Convert P and get P16");
  EXPECT_CODE_AT(run(t4), "TL0408", t4, "Compute Convert P and get P16");
}

TEST(checker, GemmDtypeMismatch) {
  std::string t = replace(kFlash, "  Compute Convert P and get P16 fp16\n", "");
  t = replace(t, "Reshape P16", "Reshape P");
  t = replace(t, "Compute GEMM P16, V", "Compute GEMM P, V");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0407", t, "Compute GEMM P, V");
  EXPECT_NE(r.rendered.find("Compute Convert P and get P16 fp16"), std::string::npos) << r.rendered;
}

TEST(checker, KernelMaskConsistency) {
  std::string t = replace(kFlash, "with mask none", "with mask causal");
  auto r = run(t);
  EXPECT_TRUE(r.has("TL0409", 1)) << r.rendered;
  std::string t2 = replace(kFlash, "with bounds", "with causal");
  EXPECT_CODE_AT(run(t2), "TL0409", t2, "with causal");
}

// ---- globals -------------------------------------------------------------------------------

TEST(checker, BadGlobals) {
  std::string t = replace(kFlash, "Allocate V in global (seqlen_k, d) fp16", "Allocate V in global (seqlen_q, d) fp16");
  EXPECT_CODE_AT(run(t), "TL0406", t, "Allocate V in global");
  std::string t2 = replace(kFlash, "Copy O (BM, d) in coordinate [m_block, 0] from register to global\n", "");
  auto r2 = run(t2);
  EXPECT_CODE_AT(r2, "TL0406", t2, "Allocate O in global");
  std::string t3 = replace(kFlash, "Allocate Q in shared (BM, d) fp16\n",
                           "Allocate Q in shared (BM, d) fp16\nAllocate S in global (seqlen_q, seqlen_k) fp32 with offset [b, head]\n");
  EXPECT_CODE_AT(run(t3), "TL0406", t3, "Allocate S in global");
  std::string t4 = std::string(kFlash) + "Copy K (BN, d) in coordinate [0, 0] from shared to global\n";
  EXPECT_CODE_AT(run(t4), "TL0406", t4, "from shared to global");
  std::string t5 = replace(kFlash, "Allocate K in global (seqlen_k, d) fp16 with offset [b, kv_head]",
                           "Allocate K in global (seqlen_k, d) fp16 with offset [b]");
  EXPECT_CODE_AT(run(t5), "TL0406", t5, "Allocate K in global");
}

TEST(checker, GqaOffsetOutOfRange) {
  std::string t = replace(kFlash, "Allocate K in global (seqlen_k, d) fp16 with offset [b, kv_head]",
                          "Allocate K in global (seqlen_k, d) fp16 with offset [b, head]");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0601", t, "Allocate K in global");
}

// ---- layouts -------------------------------------------------------------------------------

TEST(checker, MissingReshape) {
  std::string t = replace(kFlash, "  Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n", "");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0501", t, "Compute GEMM P16, V");
  EXPECT_NE(r.rendered.find("insert `Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)` before this GEMM"),
            std::string::npos)
      << r.rendered;
}

TEST(checker, WrongReshape) {
  std::string t = replace(kFlash, "  Copy V from shared to register\n",
                          "  Copy V from shared to register\n  Reshape V from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n");
  EXPECT_CODE_AT(run(t), "TL0502", t, "Reshape V");
  std::string t2 = replace(kFlash, "Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)",
                           "Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_B, MMA_K, MMA_N)");
  EXPECT_CODE_AT(run(t2), "TL0502", t2, "Reshape P16");
  std::string t3 = replace(kFlash, "Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)",
                           "Reshape Q from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)");
  EXPECT_CODE_AT(run(t3), "TL0502", t3, "Reshape Q");
}

// ---- ranges --------------------------------------------------------------------------------

TEST(checker, TileOutOfRange) {
  std::string t = replace(kFlash, "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: cdiv(seqlen_k, BN) + 1");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0601", t, "Copy K (BN, d)");
  EXPECT_CODE_AT(r, "TL0601", t, "Copy V (BN, d)");
  std::string t2 = replace(kFlash, "Grid m_block = 0: cdiv(seqlen_q, BM)", "Grid m_block = 0: cdiv(seqlen_k, BM)");
  EXPECT_CODE_AT(run(t2), "TL0601", t2, "Copy Q (BM, d)");
  std::string t3 = replace(kFlash, "Copy Q (BM, d) in coordinate [m_block, 0]", "Copy Q (BM, d) in coordinate [m_block * BM, 0]");
  EXPECT_CODE_AT(run(t3), "TL0601", t3, "Copy Q (BM, d)");
}

TEST(checker, RaggedEdgeTilesAreFine) {
  CheckOptions o;
  o.sample_dims = {{{"batch", 1}, {"heads_q", 1}, {"heads_kv", 1}, {"seqlen_q", 1}, {"seqlen_k", 65}, {"d", 64}}};
  EXPECT_TRUE(run(kFlash, o).ok);
}

TEST(checker, LoopBounds) {
  std::string t = replace(kFlash, "for j = 0: cdiv(seqlen_k, BN)", "for j = -1: cdiv(seqlen_k, BN)");
  EXPECT_CODE_AT(run(t), "TL0602", t, "for j = -1");
  std::string t2 = replace(kFlash, "for j = 0: cdiv(seqlen_k, BN)", "for j = cdiv(seqlen_k, BN): 0");
  EXPECT_CODE_AT(run(t2), "TL0602", t2, "for j = cdiv");
}

TEST(checker, Unevaluable) {
  std::string t = replace(kFlash, "Let kv_head = head / (heads_q / heads_kv)", "Let kv_head = head / (heads_kv / heads_q)");
  auto r = run(t);
  EXPECT_TRUE(r.has("TL0603", line_of(t, "Let kv_head"))) << r.rendered;
}

TEST(checker, NonPositiveTile) {
  std::string t = replace(kFlash, "Const BM = 64, BN = 64", "Const BM = 64, BN = 0");
  auto r = run(t);
  EXPECT_TRUE(r.has("TL0604")) << r.rendered;
}

// ---- attributes, multiple errors, robustness -------------------------------------------------

TEST(checker, UnknownScheduleAttributes) {
  std::string t = replace(kFlash, "  Copy K (BN, d) in coordinate [j, 0] from global to shared",
                          "  Copy K (BN, d) in coordinate [j, 0] from global to shared {prefetch, vectorize: 2}");
  t = replace(t, "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: cdiv(seqlen_k, BN) {role: producer}");
  auto r = run(t);
  EXPECT_EQ(r.count("TL0701"), 3) << r.rendered;
  EXPECT_TRUE(r.has("TL0701", line_of(t, "{prefetch")));
  EXPECT_TRUE(r.has("TL0701", line_of(t, "{role")));
  // `unroll` is known, and lowered for a combine program's loop only (TL0415 elsewhere)
  std::string u = replace(kFlash, "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: cdiv(seqlen_k, BN) {unroll: 2}");
  auto ru = run(u);
  EXPECT_TRUE(ru.has("TL0415", line_of(u, "{unroll"))) << ru.rendered;
  EXPECT_EQ(ru.count("TL0701"), 0) << ru.rendered;
}

TEST(checker, WarpsMIsABackwardRegisterTileAttribute) {
  // `{warps_m: N}`: on the statements that make a backward program's register tiles (TL0417 elsewhere)
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bwd = ss.str();
  ASSERT_NE(bwd.find("Compute GEMM Q, K^T and get S\n"), std::string::npos);
  std::string ok = replace(bwd, "Compute GEMM Q, K^T and get S\n", "Compute GEMM Q, K^T and get S {warps_m: 2}\n");
  ok = replace(ok, "Allocate dK in register (BN, d) fp32 init 0", "Allocate dK in register (BN, d) fp32 init 0 {warps_m: BM / 16}");
  auto r = run(ok);
  EXPECT_TRUE(r.ok) << r.rendered;
  EXPECT_EQ(r.count("TL0417"), 0) << r.rendered;
  std::string on_copy = replace(bwd, "  Copy dO from shared to register", "  Copy dO from shared to register {warps_m: 2}");
  auto rc = run(on_copy);
  EXPECT_TRUE(rc.has("TL0417", line_of(on_copy, "{warps_m"))) << rc.rendered;
  std::string zero = replace(bwd, "Compute GEMM Q, K^T and get S\n", "Compute GEMM Q, K^T and get S {warps_m: 0}\n");
  EXPECT_TRUE(run(zero).has("TL0417")) << run(zero).rendered;
  std::string fwd = replace(kFlash, "Compute GEMM Q, K^T and get S", "Compute GEMM Q, K^T and get S {warps_m: 2}");
  auto rf = run(fwd);
  EXPECT_TRUE(rf.has("TL0417", line_of(fwd, "{warps_m"))) << rf.rendered;
  EXPECT_EQ(rf.count("TL0701"), 0) << rf.rendered;
}

TEST(checker, OrderedIsAnAccumulatingBackwardStoreAttribute) {
  // `{ordered}` (deterministic sums): on a backward program's `... and accumulate` Copies (TL0418 elsewhere)
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bwd = ss.str();
  const std::string dq = "from register to global and accumulate\n";
  ASSERT_NE(bwd.find(dq), std::string::npos);
  auto r = run(replace(bwd, dq, "from register to global and accumulate {ordered}\n"));
  EXPECT_TRUE(r.ok) << r.rendered;
  EXPECT_EQ(r.count("TL0418"), 0) << r.rendered;
  std::string plain = replace(bwd, "  Copy dO from shared to register", "  Copy dO from shared to register {ordered}");
  auto rp = run(plain);
  EXPECT_TRUE(rp.has("TL0418", line_of(plain, "{ordered"))) << rp.rendered;
  std::string valued = replace(bwd, dq, "from register to global and accumulate {ordered: n_block}\n");
  EXPECT_TRUE(run(valued).has("TL0418")) << run(valued).rendered;
  std::string fwd = replace(kFlash, "Copy O (BM, d) in coordinate [m_block, 0] from register to global",
                            "Copy O (BM, d) in coordinate [m_block, 0] from register to global {ordered}");
  auto rf = run(fwd);
  EXPECT_TRUE(rf.has("TL0418", line_of(fwd, "{ordered"))) << rf.rendered;
  EXPECT_EQ(rf.count("TL0701"), 0) << rf.rendered;
}

TEST(checker, TransposedVectorsAndScoreTiles) {
  // `X^T` beyond GEMMs: a vector read by column (one value per column of the tile) and the score tile
  // of Mask / Modify / Derivative held transposed (tests/tl/backward_transposed.tl)
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward_transposed.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bwd = ss.str();
  auto r = run(bwd);
  EXPECT_TRUE(r.ok) << r.rendered;
  // the vector has one value per row of St (BN keys), not per column (BM queries)
  std::string rows = replace(bwd, "Compute Subtract St, LSE^T and get Pt", "Compute Subtract St, LSE and get Pt");
  EXPECT_CODE_AT(run(rows), "TL0405", rows, "Compute Subtract St, LSE and get Pt");
  // a column vector of a vector
  std::string vec = replace(bwd, "Compute Multiply LSE, log2e", "Compute Multiply LSE, LSE^T");
  EXPECT_CODE_AT(run(vec), "TL0405", vec, "Compute Multiply LSE, LSE^T");
  // ^T on the first operand of an element-wise op, or on a unary op's operand
  std::string first = replace(bwd, "Compute Multiply dSt, Pt", "Compute Multiply dSt^T, Pt");
  EXPECT_CODE_AT(run(first), "TL0408", first, "Compute Multiply dSt^T, Pt");
  std::string unary = replace(bwd, "Compute Exp2 Pt", "Compute Exp2 Pt^T");
  EXPECT_CODE_AT(run(unary), "TL0408", unary, "Compute Exp2 Pt^T");
  // a Derivative transposes both tiles or neither
  std::string half = replace(bwd, "Compute Derivative dSt^T, St0^T", "Compute Derivative dSt^T, St0");
  EXPECT_CODE_AT(run(half), "TL0405", half, "Compute Derivative dSt^T, St0");
}

TEST(checker, GradientsOfAuxiliaryInputs) {
  // `Compute Gradient dS, S1 and accumulate drel_bias at [..] with relpos` (tests/tl/backward_aux_grad.tl)
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward_aux_grad.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bwd = ss.str();
  auto r = run(bwd);
  EXPECT_TRUE(r.ok) << r.rendered;
  const std::string grad = "  Compute Gradient dS, S1 and accumulate drel_bias at [i, n_block] with relpos\n";
  const std::string deriv = "  Compute Derivative dS, S1 at [i, n_block] with relpos\n";
  // after the Score's own Derivative: dS is then the gradient of its input
  std::string late = replace(bwd, grad + deriv, deriv + grad);
  EXPECT_CODE_AT(run(late), "TL0413", late, "  Compute Gradient dS, S1 and accumulate drel_bias");
  // before the Derivative of a Score applied after it (the softcap): not yet the gradient of its output
  const std::string cap = "  Compute Derivative dS, S2 at [i, n_block] with softcap\n";
  std::string early = replace(bwd, cap + grad, grad + cap);
  EXPECT_CODE_AT(run(early), "TL0413", early, "  Compute Gradient dS, S1 and accumulate drel_bias");
  EXPECT_NE(run(early).rendered.find("before the `Compute Derivative` of softcap"), std::string::npos) << run(early).rendered;
  // into something that is not the gradient of an input the Score reads
  std::string other = replace(bwd, grad, "  Compute Gradient dS, S1 and accumulate dalibi_slopes at [i, n_block] with relpos\n");
  EXPECT_CODE_AT(run(other), "TL0413", other, "accumulate dalibi_slopes at [i, n_block] with relpos");
  std::string notgrad = replace(bwd, grad, "  Compute Gradient dS, S1 and accumulate dK at [i, n_block] with relpos\n");
  EXPECT_CODE_AT(run(notgrad), "TL0413", notgrad, "accumulate dK at");
  // without `and accumulate`
  std::string get = replace(bwd, grad, "  Compute Gradient dS, S1 at [i, n_block] with relpos\n");
  EXPECT_CODE_AT(run(get), "TL0408", get, "Compute Gradient dS, S1 at");
  // the gradient's declaration: T's shape, fp32; and it is accumulated somewhere
  std::string shape = replace(bwd, "Allocate drel_bias in global (heads_q, NB) fp32", "Allocate drel_bias in global (heads_q, BN) fp32");
  EXPECT_CODE_AT(run(shape), "TL0406", shape, "Allocate drel_bias in global (heads_q, BN)");
  std::string unused = replace(bwd, grad, "");
  EXPECT_CODE_AT(run(unused), "TL0406", unused, "Allocate drel_bias in global");
  // the gradient tile must carry the whole dS (here: without P)
  std::string nop = replace(bwd, "  Compute Multiply dS, P\n", "");
  EXPECT_TRUE(run(nop).has("TL0413", line_of(nop, "  Compute Gradient dS, S1 and accumulate drel_bias"))) << run(nop).rendered;
  // the tiles transposed alike
  std::string half = replace(bwd, "  Compute Gradient dS, S1 and", "  Compute Gradient dS^T, S1 and");
  EXPECT_CODE_AT(run(half), "TL0405", half, "Compute Gradient dS^T, S1");
  // a forward program has no gradients
  std::string fwd = replace(kFlash, "Compute Rescale O, alpha", "Compute Gradient S, S and accumulate dO at [m_block, j] with causal\nCompute Rescale O, alpha");
  EXPECT_FALSE(run(fwd).ok);
}

TEST(checker, SeveralErrorsReported) {
  std::string t = replace(kFlash, "  Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n", "");
  t = replace(t, "Compute GEMM Q, K^T and get S", "Compute GEMM Q, K and get S");
  t = replace(t, "Compute Rescale O, alpha", "Compute Rescale O, alpah");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0501", t, "Compute GEMM P16, V");
  EXPECT_CODE_AT(r, "TL0402", t, "Compute GEMM Q, K and");
  EXPECT_CODE_AT(r, "TL0301", t, "alpah");
  EXPECT_FALSE(r.ok);
}

TEST(checker, EveryDiagnosticHasHintAndLocation) {
  std::string t = replace(kFlash, "  Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n", "");
  t = replace(t, "Compute GEMM Q, K^T and get S", "Compute GEMM Q, K and get S");
  t = replace(t, "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: cdiv(seqlen_k, BN) + 2");
  auto r = run(t);
  ASSERT_FALSE(r.diags.empty());
  for (const auto& d : r.diags) {
    EXPECT_FALSE(d.hint.empty()) << support::render(d);
    EXPECT_GT(d.loc.line, 0) << support::render(d);
  }
}

Expr bad_expr(int kind) {
  Expr e;
  switch (kind) {
    case 0: e.kind = Expr::Kind::Binary; break;                       // no args
    case 1: e.kind = Expr::Kind::Unary; e.op = "!"; break;           // bad op, no args
    case 2: e = Expr::call("nope", {}); break;
    case 3: e = Expr::ident(""); break;
    default: e = Expr::number(0.5, false); break;
  }
  return e;
}

TEST(checker, GarbageAstDoesNotCrash) {
  for (int variant = 0; variant < 40; ++variant) {
    Program p;
    for (int k = 0; k < 12; ++k) {
      Stmt s;
      s.kind = static_cast<Stmt::Kind>((variant + k * 7) % 12);
      s.loc = {k + 1, 1};
      Expr e = bad_expr((variant + k) % 5);
      s.kernel.mask.kind = MaskSpec::Kind::Window;
      s.kernel.mask.left = e;
      s.dim.items.push_back({"", e, {}});
      s.cnst.items.push_back({"Q", e, {}});
      s.grid.items.push_back({"", e, {}});
      s.let.value = e;
      s.alloc.name = (k % 2) ? "O" : "";
      s.alloc.space = static_cast<Space>(k % 3);
      s.alloc.shape = {e, e, e};
      s.alloc.offset = {e};
      s.alloc.init = e;
      s.copy.name = "O";
      s.copy.from = static_cast<Space>(k % 3);
      s.copy.to = static_cast<Space>((k + variant) % 3);
      s.copy.tile = {e};
      s.copy.coord = {e, e};
      s.compute.op = (variant % 3) ? "GEMM" : "Mask";
      s.compute.operands = {Operand{e, true, {}}, Operand{Expr::ident("O"), false, {}}};
      s.compute.result = static_cast<ComputeStmt::Result>(k % 3);
      s.compute.at = {e};
      s.reshape.name = "O";
      s.reshape.from = {"MMA_C"};
      s.loop.var = "";
      s.loop.lo = e;
      s.loop.hi = e;
      if (k % 4 == 0) s.loop.body = p.stmts;  // nested copies of what came before
      s.attrs.push_back(Attr{"", e, {}});
      p.stmts.push_back(s);
    }
    support::DiagSink diags;
    EXPECT_FALSE(check(p, diags));
  }
  Program empty;
  support::DiagSink d;
  EXPECT_FALSE(check(empty, d));
}

// `Merge s ... end` (docs/tl.md, "Merging the parts in the kernel"): the body's facts in info.merges,
// apart from the main program's; `{rows: R}` and the placement rules (tests/tl_errors/merge_*.tl
// hold the other must-fail cases).
TEST(checker, MergeIsCheckedInAScopeOfItsOwn) {
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/split_merge.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  {
    support::DiagSink diags;
    Program p = parse(replace(text, "\nMerge s\n", "\nMerge s {rows: BM / 4}\n"), diags);
    CheckInfo info;
    ASSERT_TRUE(check(p, diags, {}, info)) << diags.render();
    EXPECT_TRUE(info.split);
    ASSERT_EQ(info.merges.size(), 1u);
    const CheckInfo& m = info.merges[0];
    EXPECT_EQ(m.merge_axis, "s");
    EXPECT_EQ(m.merge_rows, 4);
    EXPECT_EQ(m.grid_vars, (std::vector<std::string>{"m_block", "kv_head", "b"}));  // the split axis is not visible
    EXPECT_NE(std::find(m.lets.begin(), m.lets.end(), "part"), m.lets.end());
    EXPECT_TRUE(m.tensors.count("O_part") && m.tensors.at("O_part").in_global);
    EXPECT_TRUE(m.tensors.at("O").written_to_global);
    EXPECT_FALSE(info.tensors.count("O_part"));  // the main program's own tensors
    EXPECT_EQ(info.tensors.at("O").global_dtype, DType::BF16);
  }
  {
    support::DiagSink diags;
    CheckInfo info;
    ASSERT_TRUE(check(parse(text, diags), diags, {}, info)) << diags.render();
    ASSERT_EQ(info.merges.size(), 1u);
    EXPECT_EQ(info.merges[0].merge_rows, 0);
  }
  for (const char* attrs : {"{rows: 0}", "{rows: 32}", "{rows: 3}", "{rows: 2, rows: 2}", "{unroll: 4}"}) {
    const std::string t = replace(text, "\nMerge s\n", "\nMerge s " + std::string(attrs) + "\n");
    auto r = run(t);
    EXPECT_TRUE(r.has("TL0423", line_of(t, "Merge s {"))) << attrs << r.rendered;
    EXPECT_EQ(r.count("TL0701") + r.count("TL0415"), 0) << attrs << r.rendered;
  }
  // inside the loop over the key tiles
  std::string in_loop = replace(text, "  Compute Max m, m_new\nend\n", "  Compute Max m, m_new\n  Merge s\n  end\nend\n");
  auto r = run(in_loop);
  EXPECT_TRUE(r.has("TL0423", line_of(in_loop, "  Merge s"))) << r.rendered;
}

TEST(checker, DeepLoopNestIsBounded) {
  std::string t = "Kernel k\nDim n\n";
  for (int i = 0; i < 30; ++i) t += "for i" + std::to_string(i) + " = 0: n\n";
  for (int i = 0; i < 30; ++i) t += "end\n";
  support::DiagSink diags;
  Program p = parse(t, diags);
  check(p, diags);  // must terminate quickly, errors expected (no globals)
  SUCCEED();
}

}  // namespace
}  // namespace qattn::tl
