// Stage 2 on the CPU for backward programs (src/backend/bwd): the translator's output for the
// planner's backward TL, checked as text (every statement lowers to its block and the ABI is
// qattn_bwd; warp layouts, phases, rings, `{skip}`, `{ordered}`, the gradients of auxiliary inputs;
// what cannot be lowered is a diagnostic, never a crash). Hopper's wgmma forms and `{at_use}`:
// emit_backward_wgmma_test.cc; the forward's tests: emit_test.cc; compilation with nvcc:
// emit_compile_test.cc.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
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

using namespace emit_test;  // NOLINT: the helpers of emit_test_util.h

// ---- the backward pass (src/backend/bwd) -------------------------------------------------------

TEST(EmitBackward, EveryStatementLowersToItsBlockAndTheAbiIsQattnBwd) {
  for (const char* gpu : {"a100", "h100"}) {
    SCOPED_TRACE(gpu);
    const std::string code = plan_backward("llama3-8b", gpu, {}, natural_form());
    support::DiagSink d;
    auto t = xlate(code, gpu, d);
    ASSERT_TRUE(t.has_value()) << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find("QATTN_EXPORT int qattn_bwd(const qattn_bwd_params* params"), std::string::npos);
    EXPECT_EQ(cu.find("qattn_fwd("), std::string::npos);
    EXPECT_NE(t->info_json.find("\"pass\":\"backward\""), std::string::npos) << t->info_json;
    // d128: BM = 64, BN = 128, 8 warps; the TL gives the (64, x) tiles 2 x 4 warps and the (128, d)
    // ones 4 x 2 (`{warps_m: N}` on the statements that make them)
    EXPECT_NE(code.find("Const BM = 64, BN = 128, WARPS = 8"), std::string::npos) << code;
    EXPECT_NE(code.find("Compute GEMM Q, K^T and get S {warps_m: 2}"), std::string::npos) << code;
    EXPECT_NE(code.find("Allocate dK in register (BN, d) fp32 init 0 {warps_m: 4}"), std::string::npos) << code;
    EXPECT_NE(cu.find("qattn::add_acc_global<64, 128>(Mma<64, 2>{}, rdQ, mdQ, i, tid);  // fp32 atomics"), std::string::npos);
    // P^T and dS^T: transposed A operands, read from shared memory by ldmatrix.trans
    EXPECT_NE(cu.find("qattn::gemm_ss<SmemCopyAtomT, SmemCopyAtomT>(Mma<128, 4>{}, rdV, make_tensor(sPc.data(), qattn::transposed("),
              std::string::npos);
    // dS is split over 4 warps along its columns: dQ = dS K reads it back from shared memory
    EXPECT_NE(cu.find("qattn::gemm_ss<SmemCopyAtom, SmemCopyAtomT>(Mma<64, 2>{}, rdQ, sdSc, "), std::string::npos);
    // D = rowsum(dO * O) by the Phase (its (64, 128) tile over 8 warps fits the row-wise kernel): the
    // loop reads its rows where dP - D needs them, in dP's layout
    EXPECT_NE(code.find("Phase dot_do_o"), std::string::npos) << code;
    EXPECT_NE(cu.find("qattn::load_rows<64>(Mma<64, 2>{}, sD, rD, tid);"), std::string::npos);
    EXPECT_EQ(cu.find("rows_across_warps<"), std::string::npos);
    // a program that computes D in the loop (tests/tl/backward_warps.tl): its row sum meets across
    // the 4 warps of a row in shared memory
    {
      std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward_warps.tl");
      std::stringstream ss;
      ss << in.rdbuf();
      support::DiagSink dw;
      auto tw = xlate(ss.str(), "h100", dw);  // (its rings of 2 slots do not fit an A100)
      ASSERT_TRUE(tw.has_value()) << dw.render();
      EXPECT_NE(tw->cuda_source.find("qattn::rows_across_warps<64, 2, 4, false>(Mma<64, 2>{}, rDi, reinterpret_cast<float*>(smem + "
                                     "kSmemRowScratch), tid);"),
                std::string::npos);
    }
    EXPECT_NE(t->kir.find("warps 8: 64 rows 2x4 128 rows 4x2 (along M x N)"), std::string::npos) << t->kir;
    // every statement of the TL is named by a `// TL n:` block
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
    EXPECT_EQ(t->arch, "sm80");
  }
}

TEST(EmitBackward, TheTlIsTheSourceOfTruth) {
  const std::string code = plan_backward("llama3.2-1b", "h100", {}, natural_form());
  support::DiagSink d1, d2;
  auto full = xlate(code, "h100", d1);
  ASSERT_TRUE(full.has_value()) << d1.render();
  EXPECT_NE(full->cuda_source.find("qattn::ew_scalar<qattn::op::Mul>(rdK, softmax_scale, rdK);"), std::string::npos);
  std::string edited = code;
  const std::string line = "Compute Multiply dK, softmax_scale\n";
  ASSERT_NE(edited.find(line), std::string::npos);
  edited.erase(edited.find(line), line.size());
  auto cut = xlate(edited, "h100", d2);
  ASSERT_TRUE(cut.has_value()) << d2.render();
  EXPECT_EQ(cut->cuda_source.find("ew_scalar<qattn::op::Mul>(rdK"), std::string::npos);
  // other tiles in the TL give other constants and other warp layouts: BN = 64 puts dK and dV (64 rows)
  // on 4 x 2 of the 8 warps; without the TL's `{warps_m: 4}` the 128-row tiles take 8 x 1 (on mma.sync:
  // an A100; on Hopper this TL has a wgmma form for every GEMM, dK and dV split along d)
  std::string wide = code;
  for (size_t at; (at = wide.find(" {warps_m: 4}")) != std::string::npos;) wide.erase(at, 13);
  const std::string tiles = "Const BM = 128, BN = 128, WARPS = 8";
  ASSERT_NE(wide.find(tiles), std::string::npos) << code;
  wide.replace(wide.find(tiles), tiles.size(), "Const BM = 128, BN = 64, WARPS = 8");
  support::DiagSink d3;
  auto w = xlate(wide, "a100", d3);
  ASSERT_TRUE(w.has_value()) << d3.render();
  EXPECT_NE(w->cuda_source.find("Tensor rS = partition_fragment_C(Mma<128>{}, Shape<Int<128>, Int<64>>{})"), std::string::npos);
  EXPECT_NE(w->cuda_source.find("Tensor rdK = partition_fragment_C(Mma<64>{}, Shape<Int<64>, Int<64>>{})"), std::string::npos);
  EXPECT_NE(w->kir.find("64 rows 4x2 128 rows 8x1"), std::string::npos) << w->kir;
}

TEST(EmitBackward, WarpLayoutsFollowTheTileRowsAndASplitTileIsNoRegisterAOperand) {
  // 4 warps on 64-row tiles: every tile 16 rows per warp; dS goes from registers straight to dQ's GEMM
  plan::PlanOptions narrow = natural_form();
  narrow.bm = 64, narrow.bn = 64, narrow.warps = 4;
  const std::string code4 = plan_backward("llama3-8b", "a100", {}, narrow);
  support::DiagSink d4;
  auto t4 = xlate(code4, "a100", d4);
  ASSERT_TRUE(t4.has_value()) << d4.render();
  EXPECT_NE(t4->cuda_source.find("qattn::gemm_rs<SmemCopyAtomT>(Mma<64>{}, rdQ, rdSc_a"), std::string::npos);
  EXPECT_EQ(t4->cuda_source.find("rows_across_warps"), std::string::npos);
  EXPECT_EQ(t4->cuda_source.find("kSmemRowScratch"), std::string::npos);
  EXPECT_NE(t4->kir.find("warps 4: 64 rows 4x1 (along M x N)"), std::string::npos) << t4->kir;
  // on an H100 every GEMM of that program has a wgmma form (one warpgroup, 64 rows): P^T and dS^T
  // read MN-major from shared memory, dS from registers
  support::DiagSink d4h;
  auto t4h = xlate(plan_backward("llama3-8b", "h100", {}, narrow), "h100", d4h);
  ASSERT_TRUE(t4h.has_value()) << d4h.render();
  EXPECT_NE(t4h->kir.find("gemm wgmma.mma_async m64nNk16 (sm_90a): 1 warpgroups"), std::string::npos) << t4h->kir;
  EXPECT_NE(t4h->cuda_source.find("qattn::sm90::Major::MN, qattn::sm90::Major::MN>, true, true, 64, 64, 64, true>(raw_pointer_cast(sPc.data())"),
            std::string::npos);
  // 8 warps on BM = 64: dS is split along its columns; a Reshape of it to an A operand is refused,
  // with the way out (the round trip through shared memory the planner writes)
  const std::string code8 = plan_backward("llama3-8b", "h100", {}, natural_form());
  expect_refused(code8, "  Copy dSc from shared to register\n", "  Reshape dSc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n",
                 "h100", {"XL0202", "split over 4 warps along the columns"});
  // the TL's `{warps_m: N}` is the layout: without them the default (4 x 2 and 8 x 1 here); tiles
  // combined row by row must agree; N must divide WARPS
  std::string plain = code8;
  for (size_t at; (at = plain.find(" {warps_m: ")) != std::string::npos;) plain.erase(at, plain.find('}', at) + 1 - at);
  support::DiagSink dp;
  auto tp = xlate(plain, "h100", dp);
  ASSERT_TRUE(tp.has_value()) << dp.render();
  EXPECT_NE(tp->kir.find("warps 8: 64 rows 4x2 128 rows 8x1 (along M x N)"), std::string::npos) << tp->kir;
  EXPECT_NE(tp->cuda_source.find("qattn::load_rows<64>(Mma<64>{}, sD, rD, tid);"), std::string::npos);
  const std::string dp_gemm = "Compute GEMM dO, V^T and get dP {warps_m: 2}";
  expect_refused(code8, dp_gemm, "Compute GEMM dO, V^T and get dP {warps_m: 4}", "h100",
                 {"XL0202", "combined row by row but laid out over the warps differently"});
  expect_refused(code8, dp_gemm, "Compute GEMM dO, V^T and get dP {warps_m: 3}", "h100", {"`warps_m: 3` does not divide WARPS = 8"});
  // 16 warps on BM = 32: 2 x 8, so a (32, x) tile splits by 128 columns and no warp holds whole rows
  // of dS for its Reshape to an A operand
  expect_refused(plan_backward("llama3.2-1b", "h100", {}, narrow), "Const BM = 64, BN = 64, WARPS = 4",
                 "Const BM = 32, BN = 256, WARPS = 16", "h100",
                 {"Reshape of dSc (32 rows) to an A operand: its tile is split over 8 warps along the columns"});
}

TEST(EmitBackward, D256TakesFlashAttention2sLayoutsForDkDvAndDq) {
  // 64 x 64 tiles on 8 warps: the scores keep the default 4 x 2, dK / dV / dQ are 2 x 4 (32 x 64 per
  // warp)
  for (const char* gpu : {"a100", "h100"}) {
    SCOPED_TRACE(gpu);
    // (Hopper's rule is the natural form on wgmma: the mma.sync form on request)
    const std::string code = plan_backward("llama3-8b", gpu, {{"head_dim", "256"}}, std::string(gpu) == "h100" ? natural_mma() : plan::PlanOptions{});
    for (const char* line : {"Allocate dK in register (BN, d) fp32 init 0 {warps_m: 2}\n",
                             "Allocate dV in register (BN, d) fp32 init 0 {warps_m: 2}\n",
                             "  Compute GEMM dSc, K and get dQ {warps_m: 2}\n", "  Compute GEMM Q, K^T and get S\n",
                             "  Copy dSc from shared to register\n"})
      EXPECT_NE(code.find(line), std::string::npos) << line << code;
    support::DiagSink d;
    auto t = xlate(code, gpu, d);
    ASSERT_TRUE(t.has_value()) << d.render();
    EXPECT_NE(t->kir.find("warps 8: 64 rows 2x4 64 rows 4x2 (along M x N)"), std::string::npos) << t->kir;
  }
  // MLA 192/128 on an A100: 64 x 128 like Hopper's, now that the shared-memory estimate leaves O out
  // (D by a Phase); 64 x 64 before
  const std::string mla = plan_backward("deepseek-v3-mla-prefill", "a100");
  EXPECT_NE(mla.find("Const BM = 64, BN = 128, WARPS = 8"), std::string::npos) << mla;
  support::DiagSink dm;
  auto tm = xlate(mla, "a100", dm);
  ASSERT_TRUE(tm.has_value()) << dm.render();
  EXPECT_LE(tm->smem_bytes, 166912);
}

TEST(EmitBackward, EveryHeadDimTheBackwardPlansTranslates) {
  // the planner's warp layouts fit every tile it writes (d96 / d160: dQ's columns over 4 warps are
  // not multiples of 16, so dQ keeps the default 2 warps along them; d224 / d288: dK and dV keep
  // theirs); a head dim the tiles do not fit is refused by the planner (PLAN0102), never by the
  // lowering; and the copies split every tile
  for (const char* gpu : {"a100", "h100", "l40s"}) {
    for (int d = 32; d <= 512; d += 32) {
      SCOPED_TRACE(std::string(gpu) + " d" + std::to_string(d));
      support::DiagSink d0;
      auto p = try_plan_backward("llama3-8b", gpu, {{"head_dim", std::to_string(d)}}, {}, d0);
      if (!p) {
        EXPECT_NE(d0.render().find("PLAN0102"), std::string::npos) << d0.render();
        continue;
      }
      support::DiagSink dx;
      auto t = xlate(p->code, gpu, dx);
      ASSERT_TRUE(t.has_value()) << dx.render() << p->code;
      // the global -> shared copy's threads per row split every 16-bit tile's 16-byte chunks into
      // whole passes (d160, d224, d288 built wrong kernels with the narrowest tile's: 8 for 128 columns)
      const std::string& cu = t->cuda_source;
      const std::string copy = "make_g2s_copy<Element, kThreads, ";
      const size_t at = cu.find(copy);
      ASSERT_NE(at, std::string::npos);
      const int tpr = std::stoi(cu.substr(at + copy.size()));
      int tiles = 0;
      for (size_t i = 0; (i = cu.find("qattn::smem_layout<Element, ", i)) != std::string::npos; ++i, ++tiles) {
        const size_t comma = cu.find(", ", i + 28);
        const int cols = std::stoi(cu.substr(comma + 2));
        EXPECT_EQ(cols * 2 / 16 % tpr, 0) << cols << " columns, " << tpr << " threads per row";
      }
      EXPECT_GT(tiles, 0);
    }
  }
}

TEST(EmitBackward, APhaseIsARowWiseKernelAndWhatItCannotLowerIsADiagnostic) {
  // tests/tl/backward_phase.tl: the phase lowers statement by statement onto the row-wise primitives
  // (the combine's, src/backend/rowwise.h); its tile (BM, d) over the program's WARPS
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward_phase.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string code = ss.str();
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  EXPECT_NE(t->cuda_source.find("using Tiling = qattn::rows::RowTiling<64, 128, 8>;"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("qattn::rows::load_tile<Tiling>(r_dO, g_dO, p.do_row_stride, (m) * (BM), seqlen_q);"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("#include \"qattn/rowwise.cuh\""), std::string::npos);
  // a 2-D workspace (read nowhere), a GEMM, a shared buffer in a phase: refused with the statement's line
  expect_refused(code, "  Compute RowSum dOO and get D\n",
                 "  Compute RowSum dOO and get D\n  Allocate E in global (seqlen_q, d) fp32 with offset [b, head]\n"
                 "  Compute Multiply dO, O and get E\n  Copy E (BM, d) in coordinate [m, 0] from register to global\n",
                 "h100", {"XL0301", "the 2-D workspace E is not lowered"});
  expect_refused(code, "  Compute Multiply dO, O and get dOO\n", "  Compute GEMM dO, O^T and get dOO\n", "h100", {"error"});
  expect_refused(code, "  Allocate O in register (BM, d) fp32\n", "  Allocate O in register (BM, d) fp32\n  Allocate dO in shared (BM, d) bf16\n",
                 "h100", {"XL0301", "shared buffer dO in a phase program is not lowered"});
  // rows over warps the row tiling cannot deal
  expect_refused(code, "Const BM = 64, BN = 128, WARPS = 8", "Const BM = 64, BN = 128, WARPS = 6", "h100", {"XL0202"});
}

TEST(EmitBackward, GradientsOfAuxiliaryInputs) {
  // `Compute Gradient`: ALiBi's slopes (read at [head], the same for every element of a block: a
  // register sum, one atomic add per warp at the block's end) and a relative-bias table (its bucket
  // depends on the element: a table of NB floats in shared memory, zeroed first, added at the end);
  // the C ABI's daux[] checked, the kernel info names the inputs. The planner's programs, both forms.
  for (const char* gpu : {"a100", "h100"}) {
    SCOPED_TRACE(gpu);
    const std::string code = plan_backward("llama3-8b", gpu, {{"alibi", ""}, {"relative-bias", "32"}, {"aux-grad", "true"}});
    ASSERT_NE(code.find("Allocate drel_bias in global (heads_q, NB) fp32"), std::string::npos) << code;
    ASSERT_NE(code.find("and accumulate dalibi_slopes at [i, n_block] with alibi"), std::string::npos) << code;
    support::DiagSink d;
    auto t = xlate(code, gpu, d);
    ASSERT_TRUE(t.has_value()) << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find("float acc_dalibi_slopes = 0.f;"), std::string::npos);
    EXPECT_NE(cu.find("acc_dalibi_slopes += qattn::grad_sum<"), std::string::npos) << cu;
    EXPECT_NE(cu.find("qattn::grad_table<"), std::string::npos);
    EXPECT_NE(cu.find("gbucket_drel_bias, gone_drel_bias, table_drel_bias, tid);"), std::string::npos);
    // the tiles whose elements all read one bucket (interval bounds of the index), and SAFE (the
    // derivatives, -|q + off - k| and 1, are finite: no test of dS = 0)
    EXPECT_NE(cu.find("auto gone_drel_bias = [&](int q_lo, int q_hi, int kv_lo, int kv_hi) -> bool { return ((qattn::iclamp("),
              std::string::npos) << cu;
    EXPECT_NE(cu.find(std::string("qattn::grad_sum<") + (std::string(gpu) == "h100" ? "128, 64, true, true>" : "64, 128, false, true>")),
              std::string::npos);
    EXPECT_NE(cu.find("for (int e = tid; e < 32; e += kThreads) table_drel_bias[e] = 0.f;"), std::string::npos);
    EXPECT_NE(cu.find("qattn::add_grad_table<32, kThreads>(table_drel_bias, g_drel_bias, gbase_drel_bias(), tid);"), std::string::npos);
    EXPECT_NE(cu.find("qattn::add_grad_uniform(acc_dalibi_slopes, g_dalibi_slopes, gbase_dalibi_slopes());"), std::string::npos);
    EXPECT_NE(cu.find("float* __restrict__ g_dalibi_slopes = p.daux[0];"), std::string::npos);
    EXPECT_NE(cu.find("if (p.daux[1] == nullptr) return qattn::host::fail(QATTN_ERR_AUX"), std::string::npos);
    EXPECT_NE(cu.find("\"aux_grad\":[\"alibi_slopes\",\"rel_bias\"]"), std::string::npos);
    // the sums end after the loop: the flush is the kernel's last statement group
    EXPECT_GT(cu.find("qattn::add_grad_uniform("), cu.find("qattn::grad_sum<"));
    // without aux_grad: none of it, and the info's list is empty
    support::DiagSink d2;
    auto plain = xlate(plan_backward("llama3-8b", gpu, {{"alibi", ""}, {"relative-bias", "32"}}), gpu, d2);
    ASSERT_TRUE(plain.has_value()) << d2.render();
    EXPECT_EQ(plain->cuda_source.find("daux"), std::string::npos);
    EXPECT_NE(plain->cuda_source.find("\"aux_grad\":[]"), std::string::npos);
  }
  // what the lowering cannot do: a second Gradient into one dT, an index whose first component
  // depends on the element; both with the statement's line and nothing written
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/backward_aux_grad.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string code = ss.str();
  auto set = [&](const std::string& from, const std::string& to) {
    ASSERT_NE(code.find(from), std::string::npos) << from;
    code.replace(code.find(from), from.size(), to);
  };
  set("Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d\n", "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d = 64\n");
  set("Const BM = 16, BN = 32, NB = 8\n", "Const BM = 64, BN = 64, NB = 8, WARPS = 4\n");
  support::DiagSink d;
  ASSERT_TRUE(xlate(code, "a100", d).has_value()) << d.render();
  const std::string grad = "  Compute Gradient dS, S0 and accumulate dalibi_slopes at [i, n_block] with alibi\n";
  expect_refused(code, grad, grad + grad, "a100", {"XL0301", "a second Compute Gradient into dalibi_slopes"});
  expect_refused(code, "rel_bias[head, clamp(", "rel_bias[min(q_idx, heads_q - 1), clamp(", "a100",
                 {"XL0301", "depends on the element, and only its last component may"});
}

TEST(EmitBackward, RingsOfTwoSlotsLoadTheNextQueryTileAtTheTopOfTheIteration) {
  // H100 and A100 (D by a Phase: O is not staged, so two slots fit 163 KB): Q, dO, LSE and D in rings
  // of 2 slots; the L40S's shared memory does not take them
  const std::string code = plan_backward("llama3-8b", "h100");
  for (const char* line : {"Allocate Q in shared (BM, d) bf16 {stages: 2}", "Allocate LSE in shared (BM) fp32 {stages: 2}"}) {
    EXPECT_NE(code.find(line), std::string::npos) << code;
    EXPECT_NE(plan_backward("llama3-8b", "a100").find(line), std::string::npos);
    EXPECT_NE(plan_backward("llama3.2-1b", "a100").find(line), std::string::npos);  // d64: 128 x 128 tiles
  }
  EXPECT_EQ(plan_backward("llama3-8b", "l40s").find("{stages:"), std::string::npos);
  {
    support::DiagSink da;
    auto ta = xlate(plan_backward("llama3-8b", "a100"), "a100", da);
    ASSERT_TRUE(ta.has_value()) << da.render();
    EXPECT_LE(ta->smem_bytes, 166912);  // the A100's opt-in limit per block
  }
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  // each iteration reads its slot, and fills the other one for i + 1 right after its own tiles landed
  EXPECT_NE(cu.find("Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem + kSmemQ + (i) % 2 * 16384)), SmemLayoutQ{});  "
                    "// this iteration's slot of the ring"),
            std::string::npos);
  // (on Hopper by TMA: waited for on the slot's mbarrier, the other slot filled after the iteration's
  // first barrier: emit_backward_wgmma_test; on the A100 by cp.async, right after the loop's top barrier)
  const size_t wait = cu.find("qattn::sm90::ptx::mbar_wait(ring_full + (i) % 2, ((i - lo_i) >> 1) & 1);", cu.find("for (int i = lo_i"));
  const size_t fill = cu.find("// Q, dO, LSE, D of iteration i + 1 into the other slot of their rings");
  ASSERT_NE(wait, std::string::npos);
  ASSERT_NE(fill, std::string::npos);
  EXPECT_LT(wait, fill);
  {
    support::DiagSink da;
    auto ta = xlate(plan_backward("llama3-8b", "a100"), "a100", da);
    ASSERT_TRUE(ta.has_value()) << da.render();
    const std::string& ca = ta->cuda_source;
    const size_t wait_a = ca.find("qattn::wait<0>();  // the cp.async copies into shared memory have landed", ca.find("for (int i = lo_i"));
    const size_t fill_a = ca.find("// Q, dO, LSE, D of iteration i + 1 into the other slot of their rings");
    ASSERT_NE(wait_a, std::string::npos);
    ASSERT_NE(fill_a, std::string::npos);
    EXPECT_LT(wait_a, fill_a);
    EXPECT_LT(ca.find("__syncthreads();  // ... for every thread", wait_a), fill_a);
  }
  EXPECT_EQ(cu.find("issued after i's last read"), std::string::npos);  // no mid-iteration load (and its barrier) left
  EXPECT_NE(cu.find("float* sLSE = reinterpret_cast<float*>(smem + kSmemLSE + (i) % 2 * 256);"), std::string::npos);
  EXPECT_NE(t->kir.find("shared Q bf16 (64, 128) @"), std::string::npos) << t->kir;
  EXPECT_NE(t->kir.find("16384 B x 2 slots"), std::string::npos) << t->kir;
  // the TL decides: without the attribute, one slot and the loads after each buffer's last read
  std::string one = code;
  for (size_t at; (at = one.find(" {stages: 2}")) != std::string::npos;) one.erase(at, 12);
  support::DiagSink d1;
  auto t1 = xlate(one, "h100", d1);
  ASSERT_TRUE(t1.has_value()) << d1.render();
  EXPECT_EQ(t1->cuda_source.find("slot of the ring"), std::string::npos);
  EXPECT_NE(t1->cuda_source.find("issued after i's last read"), std::string::npos);
  EXPECT_LT(t1->smem_bytes, t->smem_bytes);
  // 3 slots are not lowered; other attributes neither
  expect_refused(code, "bf16 {stages: 2}", "bf16 {stages: 3}", "h100", {"XL0202", "rings of 1 or 2 slots"});
  expect_refused(code, "from global to shared", "from global to shared {async}", "h100", {});
}

TEST(EmitBackward, TheNaturalFormAccumulatesDvAfterDsIsStoredBehindOneBarrier) {
  // FlashAttention-2's order: P and dS both go to shared memory before either transposed product
  // reads them, so the lowering makes them visible with one barrier; dV's product right after P's
  // store (the order before) needed a barrier of its own
  for (const char* gpu : {"a100", "h100"}) {
    SCOPED_TRACE(gpu);
    const std::string code = plan_backward("llama3-8b", gpu, {}, natural_form());
    const size_t p_store = code.find("  Copy Pc from register to shared\n"), dp = code.find("  Compute GEMM dO, V^T and get dP");
    const size_t ds_store = code.find("  Copy dSc from register to shared\n"), dv = code.find("  Compute GEMM Pc^T, dO and accumulate dV\n");
    const size_t dk = code.find("  Compute GEMM dSc^T, Q and accumulate dK\n");
    ASSERT_NE(dv, std::string::npos) << code;
    EXPECT_LT(p_store, dp);
    EXPECT_LT(ds_store, dv);
    EXPECT_LT(dv, dk);
    support::DiagSink d;
    auto t = xlate(code, gpu, d);
    ASSERT_TRUE(t.has_value()) << d.render();
    const std::string& cu = t->cuda_source;
    const size_t loop = cu.find("for (int i = lo_i; i < hi_i; ++i) {"), end = cu.find("  // TL", cu.find("qattn::add_acc_global<64", loop));
    ASSERT_NE(loop, std::string::npos);
    const std::string body = cu.substr(loop, end - loop);
    EXPECT_EQ(count_of(body, "what the block stored to shared memory is visible"), 1u) << body;
    EXPECT_EQ(count_of(body, "__syncthreads();"), 2u) << body;  // and the one after the ring's wait
    // the old order is still lowered (the TL decides), with a barrier before each transposed product
    std::string old = code;
    old.erase(old.find("  Compute GEMM Pc^T, dO and accumulate dV\n"), 42);
    old.insert(old.find("  Compute GEMM dO, V^T and get dP"), "  Compute GEMM Pc^T, dO and accumulate dV\n");
    support::DiagSink d2;
    auto t2 = xlate(old, gpu, d2);
    ASSERT_TRUE(t2.has_value()) << d2.render();
    EXPECT_EQ(count_of(t2->cuda_source, "what the block stored to shared memory is visible"), 2u);
  }
}

// A `{skip}` Mask whose clauses are arithmetic (prefix-LM: no auxiliary input) keeps the next tile's
// walk at the top of the iteration and its full flag where the Mask is: only clauses that load are
// read ahead (the preload measured 0.985-0.988x on prefix-LM, bench/results/2026-12-01-h200-bwd-doc-loads).
TEST(EmitBackward, SkipClausesWithoutLoadsAreNotReadAhead) {
  const std::string code = plan_backward("llama2-7b", "h100", {{"prefix_lm", "64"}, {"mask", "none"}});
  ASSERT_NE(code.find("{skip: prefix_lm}"), std::string::npos) << code;
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_NE(cu.find("    nx_i = next_i(i);  // the next visited tile (prefetched during this one)\n"), std::string::npos) << cu;
  EXPECT_NE(cu.find("const bool handoff_wait_i = it_i != 0, handoff_pass_i = nx_i < hi_i;"), std::string::npos);
  EXPECT_NE(cu.find("if (handoff_pass_i)  // done reading the scratch tiles"), std::string::npos);
  EXPECT_NE(cu.find("const bool full = full_prefix_lm(q0, q0 + 64 - 1, k0, k0 + 128 - 1);"), std::string::npos);
  EXPECT_EQ(cu.find("vis_next_i"), std::string::npos);
  EXPECT_EQ(cu.find("const bool full_prefix_lm_"), std::string::npos);
}

TEST(EmitBackward, SkipVisitsOnlyTheQueryTilesTheMaskShowsAndRingSlotsGoByVisit) {
  // documents: `{skip: document}` on the query loop; the next visited tile is prefetched into the
  // other slot of the rings, and a ring's slot is the visit count
  for (const char* gpu : {"h100", "a100"}) {
    SCOPED_TRACE(gpu);
    const std::string code = plan_backward("llama3-8b", gpu, {{"document", "true"}});
    EXPECT_NE(code.find("cdiv(seqlen_q, BM) {skip: document}\n"), std::string::npos) << code;
    support::DiagSink d;
    auto t = xlate(code, gpu, d);
    ASSERT_TRUE(t.has_value()) << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find("auto visible_i = [&](int i) -> bool { const int row0 = (i) * 64, col0 = (n_block) * 128; return "
                      "!empty_document(row0, row0 + 64 - 1, col0, col0 + 128 - 1); };"),
              std::string::npos);
    EXPECT_NE(cu.find("for (int i = first_i, it_i = 0, nx_i; i < hi_i; i = nx_i, ++it_i) {"), std::string::npos);
    // the next tile's clause is read at the top of the iteration and the next visited tile resolved
    // where it is first needed (the refill); the Mask's full clause is read at the top too
    const size_t vis = cu.find("const bool vis_next_i = visible_i(i + 1);");
    const size_t nx = cu.find("nx_i = i + 1 >= hi_i ? hi_i : vis_next_i ? i + 1 : next_i(i + 1);");
    const size_t full = cu.find("const bool full_document_");
    const size_t full_use = cu.find("const bool full = full_document_");
    ASSERT_NE(vis, std::string::npos) << cu;
    ASSERT_NE(nx, std::string::npos);
    ASSERT_NE(full, std::string::npos);
    ASSERT_NE(full_use, std::string::npos);
    EXPECT_EQ(cu.find("nx_i = next_i(i);"), std::string::npos);
    EXPECT_EQ(count_of(cu, "nx_i = i + 1 >= hi_i"), 1u);  // once an iteration
    EXPECT_LT(vis, cu.find(": Compute GEMM "));
    EXPECT_LT(full, cu.find(": Compute GEMM "));
    EXPECT_GT(full_use, cu.find(": Compute GEMM "));
    EXPECT_EQ(cu.find("full_document(q0, q0 + 64 - 1, k0, k0 + 128 - 1);\n      qattn::apply_keep"), std::string::npos);
    EXPECT_NE(cu.find("const int i_next = nx_i;"), std::string::npos);
    EXPECT_LT(nx, cu.find("const int i_next = nx_i;"));
    EXPECT_EQ(cu.find("i + 1 < hi_i"), std::string::npos);
    EXPECT_NE(t->kir.find("skip query tiles where empty_document"), std::string::npos) << t->kir;
    EXPECT_NE(cu.find("smem + kSmemQ + (it_i) % 2 * 16384"), std::string::npos);
    if (std::string(gpu) == "a100") {
      EXPECT_NE(cu.find("smem + kSmemQ + (it_i + 1) % 2 * 16384"), std::string::npos);
      EXPECT_NE(cu.find("smem + kSmemQ + (0) % 2 * 16384"), std::string::npos);  // the first visit's slot
    } else {  // (the TMA ring: the slot and its mbarrier's phase by visit too)
      EXPECT_NE(cu.find("const int ring_slot = (it_i + 1) % 2;"), std::string::npos);
      EXPECT_NE(cu.find("const int ring_slot = (0) % 2;"), std::string::npos);  // the first visit's slot
      EXPECT_NE(cu.find("qattn::sm90::ptx::mbar_wait(ring_full + (it_i) % 2, ((it_i) >> 1) & 1);"), std::string::npos);
      EXPECT_NE(cu.find("[[maybe_unused]] const bool handoff_wait_i = it_i != 0;"), std::string::npos);
      EXPECT_EQ(cu.find("handoff_pass_i"), std::string::npos);
      const size_t pass = cu.find("if (nx_i < hi_i)  // done reading the scratch tiles");
      ASSERT_NE(pass, std::string::npos);
      EXPECT_LT(nx, pass);  // resolved before this use too
      EXPECT_NE(cu.find("if (handoff_wait_i) qattn::sm90::ptx::bar_sync(1 + wg, kThreads);"), std::string::npos);
    }
    EXPECT_EQ(cu.find("smem + kSmemQ + (i) % 2"), std::string::npos);
    // the next visited tile: four tiles' `empty when` clauses a round (a document's far side)
    EXPECT_NE(cu.find("auto next_i = [&](int i) -> int { return qattn::next_visible<4, 1>(i, hi_i, visible_i); };"),
              std::string::npos);
    // the TL decides: without the attribute every tile in the bounds is visited
    std::string all = code;
    all.erase(all.find(" {skip: document}"), 17);
    support::DiagSink d2;
    auto t2 = xlate(all, gpu, d2);
    ASSERT_TRUE(t2.has_value()) << d2.render();
    EXPECT_EQ(t2->cuda_source.find("visible_i"), std::string::npos);
    EXPECT_NE(t2->cuda_source.find("for (int i = lo_i; i < hi_i; ++i) {"), std::string::npos);
  }
}

TEST(EmitBackward, OrderedAdditionsTakeTurnsInTheBlocksOrder) {
  // the spec's "deterministic": `{ordered}` on dQ (and GQA's dK, dV); without it, fp32 atomics
  const std::string code = plan_backward("llama3-8b", "h100", {{"deterministic", "true"}}, natural_form());
  for (const char* line : {"Copy dQ (BM, d) in coordinate [i, 0] from register to global and accumulate {ordered}\n",
                           "Copy dK (BN, d) in coordinate [n_block, 0] from register to global and accumulate {ordered}\n",
                           "Copy dV (BN, d) in coordinate [n_block, 0] from register to global and accumulate {ordered}\n"})
    EXPECT_NE(code.find(line), std::string::npos) << line << code;
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  // the key blocks launched in reverse; a block adds tile i after the blocks of higher n_block visiting it
  EXPECT_NE(cu.find("const int n_block = gridDim.x - 1 - blockIdx.x;"), std::string::npos);
  EXPECT_NE(cu.find("for (int other = n_block + 1; other < gridDim.x; ++other) before_dQ += visits_i(other, i);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::turn_wait(ws_dQ, before_dQ, tid);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::add_acc_global_ordered<64, 128>(Mma<64, 2>{}, rdQ, mdQ, i, tid);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::turn_pass(ws_dQ, tid);"), std::string::npos);
  EXPECT_EQ(cu.find("add_acc_global<"), std::string::npos);  // no atomics left
  // GQA: the query heads of a kv head add dK, dV in head order
  EXPECT_NE(cu.find("for (int other = 0; other < head; ++other) before_dK += "), std::string::npos);
  EXPECT_NE(cu.find("QATTN_EXPORT int64_t qattn_bwd_workspace_bytes(const qattn_bwd_params* params) {"), std::string::npos);
  // the counters follow the Phase's D rows in the workspace; only they are zeroed
  EXPECT_NE(cu.find("cudaMemsetAsync(p.workspace + (1 * int64_t(p.batch) * p.heads_q * p.seqlen_q), 0, size_t(4 * (0 + "), std::string::npos);
  EXPECT_NE(t->info_json.find("\"deterministic\":true"), std::string::npos) << t->info_json;
  EXPECT_NE(t->kir.find("ordered additions (deterministic)"), std::string::npos) << t->kir;
  // the TL decides: the atomic kernel has no turns, no reversed grid, a workspace of its Phase's D rows only
  support::DiagSink d2;
  auto a = xlate(plan_backward("llama3-8b", "h100"), "h100", d2);
  ASSERT_TRUE(a.has_value()) << d2.render();
  EXPECT_EQ(a->cuda_source.find("turn_wait"), std::string::npos);
  EXPECT_NE(a->cuda_source.find("const int n_block = blockIdx.x;"), std::string::npos);
  EXPECT_NE(a->cuda_source.find("return 4 * (1 * int64_t(p.batch) * p.heads_q * p.seqlen_q + 0);"), std::string::npos);
  EXPECT_EQ(a->cuda_source.find("cudaMemsetAsync"), std::string::npos);  // D needs no zeroing
  // the transposed form's deterministic kernel: the counters follow the phase's D rows; only they are zeroed
  support::DiagSink d4;
  auto td = xlate(plan_backward("llama3-8b", "h100", {{"deterministic", "true"}}), "h100", d4);
  ASSERT_TRUE(td.has_value()) << d4.render();
  EXPECT_NE(td->cuda_source.find("cudaMemsetAsync(p.workspace + (1 * int64_t(p.batch) * p.heads_q * p.seqlen_q), 0, size_t(4 * (0 + "),
            std::string::npos);
  EXPECT_NE(td->cuda_source.find("int* ws_dQ = p.workspace + (1 * int64_t(p.batch) * p.heads_q * p.seqlen_q) + "), std::string::npos);
  // on wgmma too the ordered additions take their turns: no float4 atomics (add_acc_global_v4)
  EXPECT_NE(td->cuda_source.find("qattn::add_acc_global_ordered<64, 128>(MmaCols<64, 128, 2>{}, rdQ, mdQ, i, tid);"), std::string::npos);
  EXPECT_EQ(td->cuda_source.find("add_acc_global_v4"), std::string::npos);
  EXPECT_EQ(td->cuda_source.find("add_acc_global<"), std::string::npos);
  EXPECT_NE(a->info_json.find("\"deterministic\":false"), std::string::npos);
  // MHA stores dK, dV once: only dQ is ordered; with documents the turns count the visits {skip} allows
  const std::string mha = plan_backward("llama3.2-1b", "h100", {{"deterministic", "true"}, {"heads", "16,16"}, {"document", "true"}});
  EXPECT_EQ(mha.find("and accumulate {ordered}\nCompute"), std::string::npos);
  support::DiagSink d3;
  auto m = xlate(mha, "h100", d3);
  ASSERT_TRUE(m.has_value()) << d3.render();
  EXPECT_NE(m->cuda_source.find("&& !empty_document((i) * 128"), std::string::npos);
  EXPECT_EQ(m->cuda_source.find("before_dK"), std::string::npos);
}

TEST(EmitBackward, EveryOneLineDeletionOrSwapIsADiagnosticOrAKernelNeverACrash) {
  // hostile backward programs: each statement of the planner's program (with a Score, a Mask and an
  // auxiliary input) deleted, and each pair of neighbouring lines swapped; translation either
  // succeeds or reports errors, and a refusal always says why
  // (and the deterministic program with documents: `{ordered}` turns and `{skip}` in one loop)
  int translated = 0, refused = 0;
  for (const std::string& code : {plan_backward("llama3-8b", "h100", {{"alibi", "true"}, {"softcap", "30"}}),
                                  plan_backward("llama3-8b", "h100", {{"document", "true"}, {"deterministic", "true"}})}) {
    testutil::each_line_edit(code, [&](const std::string& variant, size_t i) {
      support::DiagSink d;
      auto t = xlate(variant, "h100", d);
      if (t) {
        ++translated;
        EXPECT_NE(t->cuda_source.find("qattn_bwd"), std::string::npos);
      } else {
        ++refused;
        EXPECT_TRUE(d.has_errors()) << "line " << i;
      }
    });
  }
  EXPECT_GT(refused, 20);     // most deletions break the program: diagnosed
  EXPECT_GT(translated, 20);  // comments, blank lines, harmless swaps: still a kernel
}

TEST(EmitBackward, PlainStoresRefuseGqaAndOldGpusAreRefused) {
  support::DiagSink d;
  auto t = xlate(plan_backward("llama3.2-1b", "a100", {{"mask", "none"}, {"heads", "16,16"}}), "a100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  EXPECT_NE(t->cuda_source.find("if (p.heads_q != p.heads_kv) return qattn::host::fail(QATTN_ERR_SHAPE"), std::string::npos);
  EXPECT_NE(t->info_json.find("\"dk_dtype\":\"bf16\""), std::string::npos);
  // the variants' statements lower: the Score, its derivative (derived from the declaration), the
  // Modify and the Derivative, the softcap at launch; ALiBi's slopes through aux[0]
  // (gemma2-9b: d256, the natural form on wgmma on Hopper: the scores split along the keys)
  support::DiagSink dv;
  auto g = xlate(plan_backward("gemma2-9b", "h100"), "h100", dv);
  ASSERT_TRUE(g.has_value()) << dv.render();
  EXPECT_NE(g->cuda_source.find("auto dscore_softcap = [&](float score, int q_idx, int kv_idx) -> float"), std::string::npos);
  EXPECT_NE(g->cuda_source.find("qattn::apply_derivative<64, 64>(MmaCols<64, 64, 2>{}, rdS, rS0, (i) * 64, (n_block) * 64, dscore_softcap, tid);"),
            std::string::npos);
  EXPECT_NE(g->info_json.find("\"args\":[\"softcap\"]"), std::string::npos) << g->info_json;
  support::DiagSink da;
  auto al = xlate(plan_backward("llama3-8b", "a100", {{"alibi", "true"}, {"mask", "none"}}), "a100", da);
  ASSERT_TRUE(al.has_value()) << da.render();
  EXPECT_NE(al->cuda_source.find("static_cast<const float*>(p.aux[0])"), std::string::npos);
  EXPECT_NE(al->info_json.find("{\"name\":\"alibi_slopes\",\"dtype\":\"fp32\",\"shape\":[\"heads_q\"]}"), std::string::npos)
      << al->info_json;
  // the same program for a Turing GPU: fp16 has a path there, the backward lowering does not
  std::string code = plan_backward("llama3.2-1b", "a100", {{"mask", "none"}, {"dtype", "fp16"}});
  support::DiagSink d2;
  EXPECT_FALSE(xlate(code, "t4", d2).has_value());
  EXPECT_TRUE(has(d2, "XL0101")) << d2.render();
}

}  // namespace
}  // namespace qattn::backend
