// Stage 2 on the CPU for backward programs on Hopper's warpgroup MMA (src/backend/bwd/wgmma.cc): the
// transposed form (d64 / d128), the natural form at d192 / d256 / MLA (accumulators split along N,
// 64-byte-swizzled tiles), `{at_use}` vectors — the translator's output checked as text. The other
// backward tests: emit_backward_test.cc.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "emit_test_util.h"

namespace qattn::backend {
namespace {

using namespace emit_test;  // NOLINT: the helpers of emit_test_util.h

TEST(EmitBackward, TheTransposedFormRunsEveryGemmOnWgmmaOnHopper) {
  // the sm90 default at d128: S^T = K Q^T, every GEMM a wgmma (64 rows per warpgroup), dQ split along d
  const std::string code = plan_backward("llama3-8b", "h100");
  for (const char* line : {"Compute GEMM K, Q^T and get St", "Compute Mask St^T at [i, n_block] with causal",
                           "Compute Subtract St, LSE^T and get Pt", "Compute GEMM Ptc, dO and accumulate dV",
                           "Phase dot_do_o", "Compute RowSum dOO and get D", "Copy D (BM) in coordinate [m] from register to global",
                           "Compute Subtract dPt, D^T and get dSt", "Compute GEMM dStc^T, K and get dQ"})
    EXPECT_NE(code.find(line), std::string::npos) << line << "\n" << code;
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_EQ(t->arch, "sm90");
  EXPECT_NE(std::find(t->nvcc_flags.begin(), t->nvcc_flags.end(), "-gencode=arch=compute_90a,code=sm_90a"), t->nvcc_flags.end());
  EXPECT_NE(cu.find("qattn::sm90::wg_gemm_ss<qattn::sm90::Wgmma<64, __nv_bfloat16, qattn::sm90::Major::K, qattn::sm90::Major::K>, false, "
                    "false, 128, 64, 128, false>(raw_pointer_cast(sK.data()), 64 * wg, raw_pointer_cast(sQ.data()), 0, "
                    "qattn::sm90::regs<float>(rSt));"),
            std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::wg_gemm_rs<qattn::sm90::Wgmma<128, __nv_bfloat16, qattn::sm90::Major::K, qattn::sm90::Major::MN>, "
                    "64>(qattn::sm90::regs<uint32_t>(rPtc), raw_pointer_cast(sdO.data()), qattn::sm90::regs<float>(rdV));"),
            std::string::npos);
  // dQ = dS K: both operands MN-major from shared memory, the warpgroups side by side along d
  EXPECT_NE(cu.find("Tensor rdQ = partition_fragment_C(MmaCols<64, 128, 2>{}, Shape<Int<64>, Int<128>>{});"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::Wgmma<64, __nv_bfloat16, qattn::sm90::Major::MN, qattn::sm90::Major::MN>, true, true, 128, 128, 128, "
                    "false>(raw_pointer_cast(sdStc.data()), 0, raw_pointer_cast(sK.data()), 64 * wg, qattn::sm90::regs<float>(rdQ));"),
            std::string::npos);
  // dQ added by TMA (TmaAdditionsStageDQ below); dK, dV after the loop by float4 reductions (value pairs
  // traded within lane pairs), never the pair-wise atomics
  EXPECT_NE(cu.find("qattn::sm90::add_acc_global_tma<64, 128, true, true>(MmaCols<64, 128, 2>{}, rdQ, "), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::add_acc_global_v4<128, 128>(Mma<128>{}, rdK, mdK, n_block, tid);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::add_acc_global_v4<128, 128>(Mma<128>{}, rdV, mdV, n_block, tid);"), std::string::npos);
  EXPECT_EQ(cu.find("qattn::add_acc_global<"), std::string::npos);
  // the register layouts add_acc_global_v4's lane exchange is checked on (tests/emit/host_layout_check.cc,
  // which spells them the same way: keep the two in step)
  EXPECT_NE(cu.find("using Mma = TiledMMA<MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>, Layout<Shape<Int<WM>, Int<kWarps / WM>, _1>>,\n"
                    "                     Tile<Int<16 * WM>, Int<16 * (kWarps / WM)>, _16>>;"),
            std::string::npos);
  EXPECT_NE(cu.find("using MmaCols = TiledMMA<MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>, Layout<Shape<Int<kWarps / WGN>, Int<WGN>, _1>>,\n"
                    "                         Tile<Int<R>, Layout<Shape<_8, Int<WGN>, Int<C / (8 * WGN)>>, Stride<_1, Int<C / WGN>, _8>>, _16>>;"),
            std::string::npos);
  EXPECT_NE(cu.find("constexpr int kWarps = 8, kThreads = 256;"), std::string::npos);
  // LSE and D loaded by column; the mask transposed
  EXPECT_NE(cu.find("qattn::load_cols<128, 64>(Mma<128>{}, sLSE, rLSE, tid);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::load_cols<128, 64>(Mma<128>{}, sD, rD, tid);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::ew_cols<qattn::op::Sub>(rdPt, rD, rdSt);"), std::string::npos);
  EXPECT_EQ(cu.find("rows_across_warps_to_cols"), std::string::npos);  // no D reduction in the loop
  // D = rowsum(dO * O) by the Phase: a row-wise kernel of its own into the workspace, launched first
  const size_t phase = cu.find("__global__ void __launch_bounds__(Tiling::kThreads) flash_bwd_llama3_8b_sm90_dot_do_o(");
  ASSERT_NE(phase, std::string::npos);
  EXPECT_LT(phase, cu.find("flash_bwd_llama3_8b_sm90(const __grid_constant__"));
  EXPECT_NE(cu.find("qattn::rows::row_reduce_lanes<false, false>(r_dOO, r_D);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::rows::store_vec<Tiling>(r_D, g_D, 1, (m) * (BM), seqlen_q);"), std::string::npos);
  EXPECT_NE(cu.find("float* g_D = reinterpret_cast<float*>(p.workspace) + (int64_t(b) * p.heads_q + (head)) * p.seqlen_q;"),
            std::string::npos);
  EXPECT_NE(cu.find("const float* gD = reinterpret_cast<float*>(p.workspace) + (int64_t(b) * p.heads_q + (head)) * p.seqlen_q;"),
            std::string::npos);
  const size_t launch_phase = cu.find("phase_dot_do_o::flash_bwd_llama3_8b_sm90_dot_do_o<<<");
  ASSERT_NE(launch_phase, std::string::npos);
  EXPECT_LT(launch_phase, cu.find("flash_bwd_llama3_8b_sm90<<<"));
  EXPECT_NE(cu.find("return 4 * (1 * int64_t(p.batch) * p.heads_q * p.seqlen_q + 0);"), std::string::npos);
  EXPECT_NE(t->kir.find("phase dot_do_o: rows 64 x 128 over 8 warps (row-wise), launched first"), std::string::npos) << t->kir;
  // the waits: St while dP^T's product still runs, dP^T while dV's does, dQ while dK's does; none
  // crosses an iteration
  for (const char* wait : {"qattn::sm90::wgmma_wait<1>();  // St ready", "qattn::sm90::wgmma_wait<1>();  // dPt ready",
                           "qattn::sm90::wgmma_wait<1>();  // dV, dQ ready", "qattn::sm90::wgmma_wait<0>();  // dK ready"})
    EXPECT_NE(cu.find(wait), std::string::npos) << wait;
  EXPECT_NE(cu.find("qattn::apply_mask<qattn::MaskKind::Causal, 128, 64, true>(Mma<128>{}, rSt, (i) * 64, (n_block) * 128,"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::fence_async_smem();"), std::string::npos);
  EXPECT_NE(t->kir.find("gemm wgmma.mma_async m64nNk16 (sm_90a): 2 warpgroups"), std::string::npos) << t->kir;
  // the query ring by TMA: Q and dO through tensor maps built by qattn_bwd, LSE and D by cp.async from
  // 64 threads, all on the slot's mbarrier (1 + 64 arrivals); the loop waits on it, with no
  // cp.async.wait_group and no __syncthreads at its top
  EXPECT_NE(cu.find("flash_bwd_llama3_8b_sm90(const __grid_constant__ qattn_bwd_params p, const __grid_constant__ CUtensorMap tmQ, "
                    "const __grid_constant__ CUtensorMap tmdO, const __grid_constant__ CUtensorMap tadQ) {"),
            std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::ptx::mbar_init(ring_full, 65);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::ptx::mbar_arrive_expect_tx(ring_full + ring_slot, 32768);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::tma_load_tile<64, 128>(&tmQ, ring_full + ring_slot, reinterpret_cast<Element*>(smem + kSmemQ + "
                    "ring_slot * 16384), (i) * 64, head, b);"),
            std::string::npos);
  EXPECT_NE(cu.find("qattn::copy_rows_g2s<64, 64>(gD, p.seqlen_q, i, reinterpret_cast<float*>(smem + kSmemD + ring_slot * 256), tid);"),
            std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::ptx::cp_async_arrive_noinc(ring_full + ring_slot);"), std::string::npos);
  EXPECT_NE(cu.find("if (int r = qattn::sm90::make_tile_map(&tmdO, p.dout, true, 128, p.seqlen_q, p.heads_q, p.batch, p.do_row_stride, "
                    "p.do_head_stride, p.do_batch_stride, 64); r != 0)"),
            std::string::npos);
  EXPECT_NE(cu.find("static_cast<cudaStream_t>(stream)>>>(p, tmQ, tmdO, tadQ);"), std::string::npos);
  const size_t loop = cu.find("  for (int i = lo_i; i < hi_i; ++i) {");
  ASSERT_NE(loop, std::string::npos);
  const std::string body = cu.substr(loop, cu.find("\n  }\n", loop) - loop);
  EXPECT_EQ(body.find("qattn::wait<0>();"), std::string::npos) << body;
  EXPECT_NE(body.find("qattn::sm90::ptx::mbar_wait(ring_full + (i) % 2, ((i - lo_i) >> 1) & 1);"), std::string::npos) << body;
  // one block-wide barrier an iteration (dS^T stored, before dQ = dS K reads it); the next slot's
  // copies right after it
  size_t syncs = 0;
  for (size_t at = 0; (at = body.find("__syncthreads();", at)) != std::string::npos; ++at) ++syncs;
  EXPECT_EQ(syncs, 1u) << body;
  const size_t mid = body.find("__syncthreads();  // what the block stored to shared memory is visible");
  ASSERT_NE(mid, std::string::npos) << body;
  ASSERT_NE(body.find("qattn::sm90::tma_load_tile<64, 128>(&tmQ"), std::string::npos) << body;
  EXPECT_LT(mid, body.find("qattn::sm90::tma_load_tile<64, 128>(&tmQ"));
  EXPECT_LT(body.find("qattn::sm90::tma_load_tile<64, 128>(&tmQ"), body.find("raw_pointer_cast(sdStc.data()), 0, raw_pointer_cast(sK.data())"));
  // dS^T handed between the warpgroups: its store waits for the other warpgroup's dQ product of the
  // previous iteration (named barrier 1 + wg), which arrives once that product has completed
  EXPECT_NE(body.find("[[maybe_unused]] const bool handoff_wait_i = i - lo_i != 0, handoff_pass_i = i + 1 < hi_i;"), std::string::npos)
      << body;
  const size_t sync = body.find("if (handoff_wait_i) qattn::sm90::ptx::bar_sync(1 + wg, kThreads);");
  const size_t store = body.find("qattn::store_acc_smem_pairs(Mma<128>{}, rdStc, sdStc, tid);");
  const size_t dq_done = body.find("qattn::sm90::wgmma_wait<1>();  // dV, dQ ready");
  const size_t arrive = body.find("if (g != wg) qattn::sm90::ptx::bar_arrive(1 + g, kThreads);");
  ASSERT_NE(sync, std::string::npos);
  ASSERT_NE(store, std::string::npos);
  ASSERT_NE(dq_done, std::string::npos);
  ASSERT_NE(arrive, std::string::npos);
  EXPECT_LT(sync, store);
  EXPECT_LT(store, mid);
  EXPECT_LT(dq_done, arrive);
  EXPECT_NE(body.find("if (handoff_pass_i)  // done reading the scratch tiles"), std::string::npos);
  EXPECT_NE(t->kir.find("ring D LSE Q dO: 2 slots filled by TMA (Q, dO) and cp.async (fp32 rows), one mbarrier per slot"),
            std::string::npos) << t->kir;
  // a view whose (batch, head) are not the Grid's own axes keeps the cp.async ring (TMA would bound the
  // computed coordinate by the map's extents), and with the loop-top barrier no named barrier
  std::string offset = code;
  const std::string alloc_q = "Allocate Q in global (seqlen_q, d) bf16 with offset [b, head]";
  ASSERT_NE(offset.find(alloc_q), std::string::npos);
  offset.replace(offset.find(alloc_q), alloc_q.size(), "Allocate Q in global (seqlen_q, d) bf16 with offset [b, head * 1]");
  support::DiagSink doff;
  auto toff = xlate(offset, "h100", doff);
  ASSERT_TRUE(toff.has_value()) << doff.render();
  EXPECT_EQ(toff->cuda_source.find("CUtensorMap tm"), std::string::npos);  // (dQ's additions keep theirs: tadQ)
  EXPECT_EQ(toff->cuda_source.find("tma_load_tile"), std::string::npos);
  EXPECT_NE(toff->cuda_source.find("qattn::wait<0>();  // the cp.async copies into shared memory have landed"), std::string::npos);
  EXPECT_EQ(toff->cuda_source.find("bar_sync"), std::string::npos);
  // d64: BM = 128, so dQ splits along its rows like every other product
  support::DiagSink d64;
  auto t64 = xlate(plan_backward("llama3.2-1b", "h100"), "h100", d64);
  ASSERT_TRUE(t64.has_value()) << d64.render();
  EXPECT_NE(t64->cuda_source.find("Tensor rdQ = partition_fragment_C(Mma<128>{}, Shape<Int<128>, Int<64>>{});"), std::string::npos);
  // the same TL on an A100 (one slot per ring: its shared memory): mma.sync, with the same column
  // vectors and transposed masks
  std::string one_slot = code;
  for (size_t at; (at = one_slot.find(" {stages: 2}")) != std::string::npos;) one_slot.erase(at, 12);
  support::DiagSink da;
  auto ta = xlate(one_slot, "a100", da);
  ASSERT_TRUE(ta.has_value()) << da.render();
  EXPECT_EQ(ta->arch, "sm80");
  EXPECT_EQ(ta->cuda_source.find("wg_gemm"), std::string::npos);
  EXPECT_EQ(ta->cuda_source.find("CUtensorMap"), std::string::npos);  // (cp.async)
  EXPECT_EQ(ta->cuda_source.find("bar_sync"), std::string::npos);
  EXPECT_NE(ta->cuda_source.find("qattn::load_cols<128, 64>("), std::string::npos);
  // the TL decides: a `{warps_m}` layout keeps the GEMMs on mma.sync, and says why
  std::string pinned = code;
  pinned.replace(pinned.find("Compute GEMM V, dO^T and get dPt"), std::string("Compute GEMM V, dO^T and get dPt").size(),
                 "Compute GEMM V, dO^T and get dPt {warps_m: 8}");
  support::DiagSink dpin;
  auto tp = xlate(pinned, "h100", dpin);
  ASSERT_TRUE(tp.has_value()) << dpin.render();
  EXPECT_EQ(tp->cuda_source.find("wg_gemm"), std::string::npos);
  EXPECT_NE(tp->kir.find("gemm mma.sync (no wgmma form: TL "), std::string::npos) << tp->kir;
  // MLA (192 / 128) and d256 keep the natural form (d256's on wgmma: the next test)
  EXPECT_NE(plan_backward("deepseek-v3-mla-prefill", "h100").find("Compute GEMM Q, K^T and get S"), std::string::npos);
}

// The sm90 rule's d256 backward: the natural form with every GEMM a wgmma, S / dP split over the two
// warpgroups along the keys and dK, dV, dQ along d (their Allocate'd accumulators laid out as the
// products that add to them); the mma.sync form it replaced is still `--bwd-form natural-mma`.
TEST(EmitBackward, D256OnHopperRunsTheNaturalFormOnWgmma) {
  const std::string code = plan_backward("llama3-8b", "h100", {{"head_dim", "256"}});
  EXPECT_NE(code.find("Const BM = 64, BN = 64, WARPS = 8"), std::string::npos) << code;
  EXPECT_EQ(code.find("warps_m"), std::string::npos) << code;
  EXPECT_NE(code.find("Allocate Q in shared (BM, d) bf16 {stages: 2}"), std::string::npos) << code;
  // dP's product issued right after S's: both run while P is computed
  EXPECT_NE(code.find("  Compute GEMM Q, K^T and get S\n  Compute GEMM dO, V^T and get dP\n"), std::string::npos) << code;
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_EQ(count_of(cu, "qattn::sm90::wg_gemm_ss<"), 5u) << cu;
  EXPECT_EQ(cu.find("qattn::gemm_ss<"), std::string::npos);
  // GQA (llama3-8b): dK and dV are fp32 sums of the query heads, added with the warpgroups' halves
  for (const char* acc : {"rdK", "rdV"})
    EXPECT_NE(cu.find(std::string("Tensor ") + acc + " = partition_fragment_C(MmaCols<64, 256, 2>{}, Shape<Int<64>, Int<256>>{});"),
              std::string::npos) << acc;
  EXPECT_NE(cu.find("qattn::sm90::add_acc_global_v4<64, 256>(MmaCols<64, 256, 2>{}, rdK, mdK, n_block, tid);"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::add_acc_global_v4<64, 256>(MmaCols<64, 256, 2>{}, rdQ, mdQ, i, tid);"), std::string::npos);
  // dV += P^T dO: A (P^T) and B (dO) MN-major from shared, accumulated, each warpgroup its 128 columns
  EXPECT_NE(cu.find("qattn::sm90::Wgmma<128, __nv_bfloat16, qattn::sm90::Major::MN, qattn::sm90::Major::MN>, true, true, 64, 64, 64, "
                    "true>(raw_pointer_cast(sPc.data()), 0, raw_pointer_cast(sdO.data()), 128 * wg, qattn::sm90::regs<float>(rdV));"),
            std::string::npos) << cu;
  EXPECT_NE(cu.find("qattn::apply_mask<qattn::MaskKind::Causal, 64, 64>(MmaCols<64, 64, 2>{}, rS,"), std::string::npos);
  EXPECT_NE(cu.find("qattn::sm90::wgmma_wait<1>();  // S ready"), std::string::npos) << cu;
  // P and dS, both scratch handed between the warpgroups: one named-barrier wait before P's store covers
  // both (the arrival comes after the last product that reads either, dQ = dS K); 4 boxes a 256-column tile
  EXPECT_EQ(count_of(cu, "qattn::sm90::ptx::bar_sync(1 + wg, kThreads);"), 1u) << cu;
  const size_t p_store = cu.find("qattn::store_acc_smem_pairs(MmaCols<64, 64, 2>{}, rPc, sPc, tid);");
  const size_t p_arrive = cu.find("qattn::sm90::ptx::bar_arrive(1 + g, kThreads);");
  ASSERT_NE(p_store, std::string::npos) << cu;
  ASSERT_NE(p_arrive, std::string::npos) << cu;
  EXPECT_LT(cu.find("bar_sync(1 + wg, kThreads);  // the other warpgroups' wgmma of the previous iteration are done reading Pc"), p_store)
      << cu;
  EXPECT_LT(cu.find("qattn::sm90::wgmma_wait<0>();  // dQ ready"), p_arrive);
  EXPECT_EQ(count_of(cu, "__syncthreads();  // every warp is done reading"), 0u) << cu;
  EXPECT_NE(cu.find("qattn::sm90::ptx::mbar_arrive_expect_tx(ring_full + ring_slot, 65536);"), std::string::npos) << cu;
  // every helper that places a score by its coordinates takes the tile's own layout (the first GPU
  // run of this form failed softcap and documents: their keep masks took the mma.sync layout)
  for (const auto& [flags, call] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"head_dim", "256"}, {"softcap", "30"}}, "qattn::apply_keep<64, 64>(MmaCols<64, 64, 2>{}, rS, row0, col0, p.seqlen_k, full, "
                                                      "mask_query_rows, tid);"},
           {{{"head_dim", "256"}, {"softcap", "30"}}, "qattn::apply_score<64, 64>(MmaCols<64, 64, 2>{}, rS, "},
           {{{"head_dim", "256"}, {"softcap", "30"}}, "qattn::apply_derivative<64, 64>(MmaCols<64, 64, 2>{}, rdS, rS0, "},
           {{{"head_dim", "256"}, {"document", "true"}}, "qattn::apply_keep<64, 64>(MmaCols<64, 64, 2>{}, rS, row0, col0, p.seqlen_k, full, "
                                                         "mask_document, tid);"}}) {
    support::DiagSink dv;
    auto tv = xlate(plan_backward("llama3-8b", "h100", flags), "h100", dv);
    ASSERT_TRUE(tv.has_value()) << dv.render();
    EXPECT_NE(tv->cuda_source.find(call), std::string::npos) << call;
    EXPECT_EQ(tv->cuda_source.find("(Mma<64>{}, rS"), std::string::npos) << call;
  }
  // the mma.sync form on request, as before (FlashAttention-2's d256 layouts, one slot)
  const std::string mma = plan_backward("llama3-8b", "h100", {{"head_dim", "256"}}, natural_mma());
  EXPECT_NE(mma.find("Allocate dK in register (BN, d) fp32 init 0 {warps_m: 2}"), std::string::npos) << mma;
  support::DiagSink dm;
  auto tm = xlate(mma, "h100", dm);
  ASSERT_TRUE(tm.has_value()) << dm.render();
  EXPECT_EQ(tm->cuda_source.find("wg_gemm"), std::string::npos);
  // mma.sync fragments keep the pair-wise reductions (add_acc_global_v4 takes a wgmma fragment)
  EXPECT_NE(tm->cuda_source.find("qattn::add_acc_global<"), std::string::npos);
  EXPECT_EQ(tm->cuda_source.find("add_acc_global_v4"), std::string::npos);
}

// dQ, added by every key block in the loop, goes by TMA on Hopper's wgmma form: each warpgroup stages
// its part (64 rows) in shared memory and its first thread adds the 32-column boxes with bulk tensor
// reductions; the wait for the previous iteration's reductions folded into the iteration's first
// __syncthreads, so the warpgroup's other warps only arrive at the stage's barrier (ARRIVE, the
// fourth template argument); at d64 the stage's stores go in the XOR2 order (the fifth, not at d128:
// measured slower there). Not where the stage does not fit (d256, MLA) nor for `{ordered}` additions.
TEST(EmitBackward, TmaAdditionsStageDQ) {
  for (const auto& [preset, flags, call] : std::vector<std::tuple<std::string, std::map<std::string, std::string>, std::string>>{
           {"llama3-8b", {}, "qattn::sm90::add_acc_global_tma<64, 128, true, true>(MmaCols<64, 128, 2>{}, rdQ, reinterpret_cast<float*>(smem + "
                             "kSmemAdddQ), &tadQ, i, head, b, tid, 1 + kThreads / 128 + wg);  // TMA reductions (fp32 add)"},
           {"llama3.2-1b", {}, "qattn::sm90::add_acc_global_tma<128, 64, true, true, true>(Mma<128>{}, rdQ, "},
           {"mistral-7b", {{"heads", "32,32"}, {"window", "256,0"}}, "qattn::sm90::add_acc_global_tma<64, 128, true, true>("},
           {"llama3-8b", {{"document", "true"}}, "qattn::sm90::add_acc_global_tma<64, 128, true, true>("}}) {
    support::DiagSink d;
    auto t = xlate(plan_backward(preset, "h100", flags), "h100", d);
    ASSERT_TRUE(t.has_value()) << preset << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find(call), std::string::npos) << preset << "\n" << cu;
    EXPECT_EQ(cu.find("rdQ, mdQ"), std::string::npos) << preset;  // (no thread adds dQ itself)
    // the stage after the buffers (1024-byte aligned), the fp32 map built before the launch and passed
    const size_t stage = cu.find("constexpr int kSmemAdddQ = ");
    ASSERT_NE(stage, std::string::npos) << preset;
    EXPECT_EQ(std::stol(cu.substr(stage + 27)) % 1024, 0) << preset;
    EXPECT_NE(cu.find("if (int r = qattn::sm90::make_f32_add_map(&tadQ, p.dq, "), std::string::npos) << preset;
    EXPECT_NE(cu.find("return qattn::host::fail(QATTN_ERR_ALIGNMENT, \"cuTensorMapEncodeTiled refused dQ"), std::string::npos) << preset;
    EXPECT_NE(cu.find(", const __grid_constant__ CUtensorMap tadQ"), std::string::npos) << preset;  // (MHA: then tadK, tadV)
    EXPECT_NE(cu.find(">>>(p, tmQ, tmdO, tadQ"), std::string::npos) << preset;
    // the previous iteration's reductions waited for right before the iteration's first barrier, and
    // before the block exits
    const size_t wait = cu.find("if (tid % 128 == 0) qattn::sm90::ptx::tma_store_wait<0>();  // the previous iteration's TMA additions");
    ASSERT_NE(wait, std::string::npos) << preset;
    const size_t next = cu.find('\n', wait) + 1;
    EXPECT_NE(cu.substr(next, cu.find('\n', next) - next).find("__syncthreads();"), std::string::npos) << preset;
    EXPECT_LT(wait, cu.find("add_acc_global_tma<"));
    EXPECT_NE(cu.find("qattn::sm90::add_acc_global_tma_done(tid);"), std::string::npos) << preset;
    EXPECT_NE(t->kir.find("  add dQ ("), std::string::npos) << t->kir;
    // dS^T into shared memory by 32-bit stores of value pairs (store_acc_smem_pairs), never one element at a time
    EXPECT_NE(cu.find("qattn::store_acc_smem_pairs("), std::string::npos) << preset;
    EXPECT_EQ(cu.find("qattn::store_acc_smem("), std::string::npos) << preset;
  }
  // the stage does not fit beside d256's and MLA's buffers: float4 reductions; `{ordered}` keeps its turns
  for (const auto& [preset, flags] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"llama3-8b", {{"head_dim", "256"}}}, {"deepseek-v3-mla-prefill", {}}, {"llama3-8b", {{"deterministic", "true"}}}}) {
    support::DiagSink d;
    auto t = xlate(plan_backward(preset, "h100", flags), "h100", d);
    ASSERT_TRUE(t.has_value()) << preset << d.render();
    EXPECT_EQ(t->cuda_source.find("add_acc_global_tma<"), std::string::npos) << preset;
    EXPECT_EQ(t->cuda_source.find("make_f32_add_map"), std::string::npos) << preset;
    EXPECT_EQ(t->kir.find("  add dQ ("), std::string::npos) << preset;
  }
}

// A 16-bit dK, dV (MHA) leaves by TMA stores: after a barrier past the loop, each warpgroup stages its
// rows in the loop's dead buffers (from offset 0) and one thread stores (64, 64) boxes through a map of
// dK / dV over (d, seqlen_k, heads_kv, batch). GQA's fp32 dK, dV keep their float4 reductions.
TEST(EmitBackward, TmaStoresTheEpilogueOfMha) {
  for (const auto& [preset, flags, call] : std::vector<std::tuple<std::string, std::map<std::string, std::string>, std::string>>{
           {"llama2-7b", {}, "qattn::sm90::store_acc_global_tma<128, 128>(Mma<128>{}, rdK, reinterpret_cast<ElementDK*>(smem + kSmemAdddK), "
                             "&tadK, n_block, kv_head, b, tid, 1 + kThreads / 128 + wg);  // TMA stores"},
           {"llama3.2-1b", {{"heads", "16,16"}, {"mask", "none"}}, "qattn::sm90::store_acc_global_tma<128, 64>(Mma<128>{}, rdV, "},
           {"gemma-7b", {}, "qattn::sm90::store_acc_global_tma<64, 256>(MmaCols<64, 256, 2>{}, rdK, "},
           {"deepseek-v3-mla-prefill", {}, "qattn::sm90::store_acc_global_tma<128, 192>(Mma<128>{}, rdK, "},
           {"llama2-7b", {{"dtype", "fp16"}}, "qattn::sm90::store_acc_global_tma<128, 128>(Mma<128>{}, rdV, "}}) {
    support::DiagSink d;
    auto t = xlate(plan_backward(preset, "h100", flags), "h100", d);
    ASSERT_TRUE(t.has_value()) << preset << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find(call), std::string::npos) << preset << "\n" << cu;
    EXPECT_EQ(cu.find("qattn::store_acc_global<"), std::string::npos) << preset;
    EXPECT_NE(cu.find("constexpr int kSmemAdddK = 0;"), std::string::npos) << preset;
    const bool bf16 = flags.count("dtype") == 0;
    EXPECT_NE(cu.find(std::string("if (int r = qattn::sm90::make_tile_map(&tadV, p.dv, ") + (bf16 ? "true" : "false")), std::string::npos) << preset;
    EXPECT_NE(cu.find("p.seqlen_k, p.heads_kv, p.batch, p.dk_row_stride, p.dk_head_stride, p.dk_batch_stride, 64); r != 0)"), std::string::npos)
        << preset;
    const size_t sync = cu.find("__syncthreads();  // every warp is past the loop: its shared buffers take the epilogue's TMA stages");
    ASSERT_NE(sync, std::string::npos) << preset;
    EXPECT_LT(cu.rfind("wgmma_wait<0>", sync), sync);
    EXPECT_LT(sync, cu.find("store_acc_global_tma<"));
    EXPECT_LT(cu.find("store_acc_global_tma<"), cu.find("qattn::sm90::add_acc_global_tma_done(tid);"));
    EXPECT_NE(t->kir.find("  store dK ("), std::string::npos) << t->kir;
  }
  support::DiagSink d;
  auto t = xlate(plan_backward("llama3-8b", "h100"), "h100", d);  // GQA: fp32 dK, dV
  ASSERT_TRUE(t.has_value()) << d.render();
  EXPECT_EQ(t->cuda_source.find("store_acc_global_tma"), std::string::npos);
  EXPECT_EQ(t->cuda_source.find("&tadK"), std::string::npos);
  EXPECT_EQ(t->cuda_source.find("every warp is past the loop"), std::string::npos);
}

// The main Grid's order: a causal MHA backward in Hopper's wgmma forms puts the query heads first
// (`Grid head, n_block, b`: every head's key tile 0, the longest block, before any tile 1), which
// the lowering launches as blockIdx.x = head, blockIdx.y = n_block; every other backward keeps the
// key tiles first (no mask, GQA / MQA, prefix-LM, mask_mod, `{ordered}`, the mma.sync forms, sm80).
// Causal documents on MHA go heads first too (the key tiles first left an uneven last wave).
TEST(EmitBackward, CausalMhaOnHopperRunsTheHeadsFirst) {
  const std::string heads_first = "\nGrid head = 0: heads_q, n_block = 0: cdiv(seqlen_k, BN), b = 0: batch\n";
  const std::string keys_first = "\nGrid n_block = 0: cdiv(seqlen_k, BN), head = 0: heads_q, b = 0: batch\n";
  using Flags = std::map<std::string, std::string>;
  for (const auto& [preset, flags] : std::vector<std::pair<std::string, Flags>>{
           {"llama2-7b", {}}, {"llama2-7b", {{"mask", "causal_top_left"}}}, {"llama2-7b", {{"softcap", "30"}}},
           {"llama3.2-1b", {{"heads", "32,32"}}}, {"gemma-7b", {}}, {"deepseek-v3-mla-prefill", {}}, {"llama2-7b", {{"document", "true"}}}}) {
    const std::string code = plan_backward(preset, "h100", flags);
    EXPECT_NE(code.find(heads_first), std::string::npos) << preset << "\n" << code;
    EXPECT_EQ(code.find(keys_first), std::string::npos) << preset;
    support::DiagSink d;
    auto t = xlate(code, "h100", d);
    ASSERT_TRUE(t.has_value()) << preset << d.render();
    const std::string& cu = t->cuda_source;
    EXPECT_NE(cu.find("const int head = blockIdx.x;\n  const int n_block = blockIdx.y;\n  const int b = blockIdx.z;"), std::string::npos)
        << preset << "\n" << cu;
    EXPECT_NE(cu.find("const long long gx = heads_q, gy = qattn::cdiv(seqlen_k, BN), gz = batch;"), std::string::npos) << preset;
  }
  for (const auto& [preset, gpu, flags] : std::vector<std::tuple<std::string, std::string, Flags>>{
           {"llama2-7b", "h100", {{"mask", "none"}}}, {"llama3-8b", "h100", {}}, {"starcoder-15b", "h100", {}},
           {"llama3-8b", "h100", {{"document", "true"}}}, {"llama2-7b", "h100", {{"document", "true"}, {"mask", "none"}}},
           {"llama2-7b", "h100", {{"prefix_lm", "64"}, {"mask", "none"}}}, {"llama2-7b", "h100", {{"document", "true"}, {"prefix_lm", "64"}}},
           {"llama2-7b", "h100", {{"deterministic", "true"}}}, {"phi3-mini", "h100", {}}, {"llama2-7b", "a100", {}}}) {
    const std::string code = plan_backward(preset, gpu, flags);
    EXPECT_NE(code.find(keys_first), std::string::npos) << preset << " on " << gpu << "\n" << code;
    EXPECT_EQ(code.find(heads_first), std::string::npos) << preset << " on " << gpu;
  }
}

// `{at_use}`: the transposed form at d64 on Hopper (128 query columns) reads LSE and D from their ring
// slots where `St - LSE^T` and `dPt - D^T` use them; LSE's `Multiply LSE, log2e` folds into the read.
TEST(EmitBackward, AtUseVectorsAreReadFromTheirRingSlotWhereTheyAreUsed) {
  const std::string code = plan_backward("llama3.2-1b", "h100");
  for (const char* l : {"Allocate LSE in register (BM) fp32 {at_use}\n", "Allocate D in register (BM) fp32 {at_use}\n"})
    EXPECT_NE(code.find(l), std::string::npos) << l << code;
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_EQ(cu.find("load_cols<"), std::string::npos) << cu;
  EXPECT_EQ(cu.find("Tensor rLSE"), std::string::npos);
  EXPECT_NE(cu.find("qattn::ew_cols_smem<qattn::op::Sub, 128, 128>(Mma<128>{}, rSt, sLSE, rPt, tid, (qattn::kLog2e));"), std::string::npos)
      << cu;
  EXPECT_NE(cu.find("qattn::ew_cols_smem<qattn::op::Sub, 128, 128>(Mma<128>{}, rdPt, sD, rdSt, tid);"), std::string::npos);
  // d128 (64 query columns: 16 registers a vector) keeps them in registers (1.7-2.3% faster there)
  EXPECT_EQ(plan_backward("llama3-8b", "h100").find("at_use"), std::string::npos);
  // what `{at_use}` does not lower is a diagnostic: a vector read by row, or one without a ring
  auto refused = [&](const std::string& tl, const std::string& why) {
    support::DiagSink dr;
    EXPECT_FALSE(xlate(tl, "h100", dr).has_value()) << why;
    EXPECT_NE(dr.render().find("XL0301"), std::string::npos) << why << "\n" << dr.render();
  };
  std::string one_slot = code;
  const std::string ring = "Allocate D in shared (BM) fp32 {stages: 2}";
  ASSERT_NE(one_slot.find(ring), std::string::npos);
  one_slot.replace(one_slot.find(ring), ring.size(), "Allocate D in shared (BM) fp32");
  refused(one_slot, "D's shared vector is not a ring");
  std::string by_row = code;
  const std::string use = "Compute Subtract dPt, D^T and get dSt";
  by_row.replace(by_row.find(use), use.size(), "Compute Multiply D, 2.0\n  " + use);
  std::string twice = by_row;  // a scaled D is folded; a D added to is not
  twice.replace(twice.find("Compute Multiply D, 2.0"), 23, "Compute Add D, D");
  refused(twice, "D written by a Compute");
  support::DiagSink ds;
  auto scaled = xlate(by_row, "h100", ds);
  ASSERT_TRUE(scaled.has_value()) << ds.render();
  EXPECT_NE(scaled->cuda_source.find("(Mma<128>{}, rdPt, sD, rdSt, tid, (2.0f));"), std::string::npos) << scaled->cuda_source;
  // (a review's cases) read before its Copy in the body: the slot holds this iteration's values, the
  // program means the last one's; `init` with `{at_use}`: no values of its own (TL0420)
  std::string early = code;  // D copied from global and to registers once, before the loop
  const std::string copy = "  Copy D from shared to register\n", dload = "  Copy D (BM) in coordinate [i] from global to shared\n";
  ASSERT_NE(early.find(copy), std::string::npos);
  ASSERT_NE(early.find(dload), std::string::npos);
  early.erase(early.find(copy), copy.size());
  early.erase(early.find(dload), dload.size());
  const std::string loop = "\nfor i = ";
  ASSERT_NE(early.find(loop), std::string::npos);
  early.insert(early.find(loop) + 1, "Copy D (BM) in coordinate [0] from global to shared\nCopy D from shared to register\n");
  refused(early, "D used in the loop, copied before it");
  std::string with_init = code;
  const std::string al = "Allocate D in register (BM) fp32 {at_use}";
  with_init.replace(with_init.find(al), al.size(), "Allocate D in register (BM) fp32 init 0 {at_use}");
  support::DiagSink di;
  EXPECT_FALSE(xlate(with_init, "h100", di).has_value());
  EXPECT_NE(di.render().find("TL0420"), std::string::npos) << di.render();
  // a ring written twice in the body is refused (its reads would take another slot than its writes)
  std::string twice_copied = code;
  ASSERT_NE(twice_copied.find(dload), std::string::npos);
  twice_copied.replace(twice_copied.find(use), use.size(), use + "\n" + dload.substr(0, dload.size() - 1));
  refused(twice_copied, "a ring with a second writer");
}

TEST(EmitBackward, TilesOf96ColumnsTakeThe64ByteSwizzleInEveryWgmmaThatReadsThem) {
  // smem_layout lays a tile of 96 (160, 224) columns out in 32-column atoms: every wgmma that reads
  // it builds 64-byte-swizzle descriptors (a review found them built for the 128-byte swizzle)
  std::string code = plan_backward("llama3.2-1b", "h100");
  const std::string dim = ", d = 64\n";
  ASSERT_NE(code.find(dim), std::string::npos);
  code.replace(code.find(dim), dim.size(), ", d = 96\n");
  support::DiagSink d;
  auto t = xlate(code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_NE(cu.find("false, false, 128, 128, 96, false, 32, 32>(raw_pointer_cast(sK.data()), 64 * wg,"), std::string::npos) << cu;
  EXPECT_NE(cu.find("qattn::sm90::Major::MN>, 128, 32>(qattn::sm90::regs<uint32_t>(rPtc), raw_pointer_cast(sdO.data()),"),
            std::string::npos) << cu;
  // tiles of 32-column atoms are no TMA boxes: the ring stays on cp.async, waited for at the loop's
  // top by every thread (so no named barrier hands dS^T over either)
  EXPECT_EQ(cu.find("CUtensorMap"), std::string::npos);
  EXPECT_NE(cu.find("qattn::wait<0>();  // the cp.async copies into shared memory have landed"), std::string::npos);
  EXPECT_EQ(cu.find("bar_sync"), std::string::npos);
  // and a split-along-N tile read back from shared memory takes its own layout (d256's dV)
  std::string d256 = plan_backward("llama3-8b", "h100", {{"head_dim", "256"}, {"heads", "16,16"}});
  for (size_t at; (at = d256.find(" {stages: 2}")) != std::string::npos;) d256.erase(at, 12);
  const std::string alloc = "Allocate dV in register (BN, d) fp32 init 0\n";
  ASSERT_NE(d256.find(alloc), std::string::npos) << d256;
  d256.replace(d256.find(alloc), alloc.size(), alloc + "Allocate dV in shared (BN, d) bf16\n");
  d256 += "Copy dV from register to shared\nCopy dV from shared to register\nCompute Multiply dV, 1.0\n";
  support::DiagSink d2;
  auto t2 = xlate(d256, "h100", d2);
  ASSERT_TRUE(t2.has_value()) << d2.render();
  EXPECT_NE(t2->cuda_source.find("qattn::load_acc(MmaCols<64, 256, 2>{}, sdV, rdV, tid);"), std::string::npos) << t2->cuda_source;
}

TEST(EmitBackward, MlaAndD192OnHopperReadHalvesOf192ColumnsFromTilesOfThe64ByteSwizzle) {
  // MLA 192/128: 128 key rows (dK, dV split along M, 64 a warpgroup), dQ = dS K split along d: each
  // warpgroup reads K from column 96 * wg, inside a 64-column atom of the 128-byte swizzle, so K is
  // laid out in atoms of 32 columns (the 64-byte swizzle) for every GEMM that reads it
  const std::string mla = plan_backward("deepseek-v3-mla-prefill", "h100");
  EXPECT_NE(mla.find("Const BM = 64, BN = 128, WARPS = 8"), std::string::npos) << mla;
  support::DiagSink dl;
  auto tl = xlate(mla, "h100", dl);
  ASSERT_TRUE(tl.has_value()) << dl.render();
  const std::string& cu = tl->cuda_source;
  EXPECT_EQ(count_of(cu, "qattn::sm90::wg_gemm_ss<"), 5u) << cu;
  EXPECT_NE(cu.find("using SmemLayoutK = decltype(qattn::smem_layout<Element, 128, 192, 32>());"), std::string::npos) << cu;
  EXPECT_NE(cu.find("using SmemLayoutQ = decltype(qattn::smem_layout<Element, 64, 192>());"), std::string::npos) << cu;
  EXPECT_NE(cu.find("Tensor rdK = partition_fragment_C(Mma<128>{}, Shape<Int<128>, Int<192>>{});"), std::string::npos);
  // S = Q K^T: Q in 64-column atoms, K in 32; dQ = dS K: the halves of 96 columns
  EXPECT_NE(cu.find("qattn::sm90::Major::K, qattn::sm90::Major::K>, false, false, 64, 128, 192, false, 64, 32>(raw_pointer_cast(sQ.data()), "
                    "0, raw_pointer_cast(sK.data()), 64 * wg,"),
            std::string::npos) << cu;
  EXPECT_NE(cu.find("qattn::sm90::Wgmma<96, __nv_bfloat16, qattn::sm90::Major::K, qattn::sm90::Major::MN>, false, true, 64, 128, 128, "
                    "false, 64, 32>(raw_pointer_cast(sdSc.data()), 0, raw_pointer_cast(sK.data()), 96 * wg,"),
            std::string::npos) << cu;
  // d192 (MHA): 64 key rows, dK and dQ halves of 96 columns from Q and K: both in 32-column atoms
  support::DiagSink d192;
  auto t192 = xlate(plan_backward("llama3-8b", "h100", {{"head_dim", "192"}}), "h100", d192);
  ASSERT_TRUE(t192.has_value()) << d192.render();
  for (const char* l : {"using SmemLayoutQ = decltype(qattn::smem_layout<Element, 64, 192, 32>());",
                        "using SmemLayoutK = decltype(qattn::smem_layout<Element, 64, 192, 32>());",
                        "Tensor rdK = partition_fragment_C(MmaCols<64, 192, 2>{}, Shape<Int<64>, Int<192>>{});"})
    EXPECT_NE(t192->cuda_source.find(l), std::string::npos) << l;
  // a split that no atom takes stays on mma.sync (d160: halves of 80 columns), and the kernel says why
  support::DiagSink d160;
  auto t160 = xlate(plan_backward("llama3-8b", "h100", {{"head_dim", "160"}}), "h100", d160);
  ASSERT_TRUE(t160.has_value()) << d160.render();
  EXPECT_EQ(t160->cuda_source.find("wg_gemm"), std::string::npos);
}

}  // namespace
}  // namespace qattn::backend
