// DeepSeek's absorbed-MLA decoding on the CPU (issue 20): the spec's `v_from_k` (V is K's first d_v
// columns), the planner's Hopper TL (V `{view: K}`, `split columns` consumers, P staged in shared
// memory, 128 query heads packed into 64-row tiles), and its sm90 lowering: the split-columns
// primitives of device/qattn/sm90/split.cuh, no V ring, the ABI's v == k check; and every form the
// lowering cannot run refused at its statement. The GPU side: tests/python/test_mla_decode.py and
// bench/bench_mla_decode.py.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/translate.h"
#include "diag_test_util.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace qattn {
namespace {

using test::contains;
constexpr auto npos = std::string::npos;

spec::AttentionSpec mla_spec(std::map<std::string, std::string> flags = {}) {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset("deepseek-v3-mla-prefill");
  std::map<std::string, std::string> f{{"heads", "128/1"}, {"head-dim", "576,512"}, {"kv-cache", "paged"}, {"seqlen", "1,4096"},
                                       {"mask", "none"},   {"v-from-k", "true"},    {"gpu", "h100"}};
  for (const auto& [k, v] : flags) f[k] = v;
  EXPECT_TRUE(spec::apply_flags(s, f, d)) << d.render();
  return s;
}

std::optional<plan::Plan> plan_for(const spec::AttentionSpec& s, support::DiagSink& d, const std::string& gpu = "h100") {
  return plan::make_plan(s, *hw::find_gpu(gpu), d);
}

std::string code_of(std::map<std::string, std::string> flags = {}) {
  support::DiagSink d;
  auto p = plan_for(mla_spec(flags), d);
  EXPECT_TRUE(p.has_value()) << d.render();
  return p ? p->code : std::string();
}

std::optional<backend::Translation> xlate(const std::string& code, support::DiagSink& d) {
  return backend::translate_text(code, plan::make_target(*hw::find_gpu("h100")), d, "test.tl");
}

std::string edit(std::string code, const std::string& from, const std::string& to) {
  const size_t at = code.find(from);
  EXPECT_NE(at, npos) << "not in the TL: `" << from << "`";
  if (at != npos) code.replace(at, from.size(), to);
  return code;
}

TEST(MlaDecode, SpecTakesVFromKOnly) {
  // 576 columns of Q and K are DeepSeek's latent + rotary, accepted only with V inside K
  support::DiagSink ok;
  EXPECT_TRUE(spec::validate(mla_spec(), ok)) << ok.render();
  support::DiagSink d1;
  EXPECT_FALSE(spec::validate(mla_spec({{"v-from-k", "false"}}), d1));
  EXPECT_TRUE(test::find(d1, "SPEC0203")) << d1.render();
  support::DiagSink d5;  // past DeepSeek's 576 columns
  EXPECT_FALSE(spec::validate(mla_spec({{"head-dim", "640,512"}}), d5));
  ASSERT_TRUE(test::find(d5, "SPEC0203")) << d5.render();
  EXPECT_TRUE(contains(test::find(d5, "SPEC0203")->hint, "576")) << d5.render();
  support::DiagSink d2;
  EXPECT_FALSE(spec::validate(mla_spec({{"head-dim", "512,512"}}), d2));
  EXPECT_TRUE(test::find(d2, "SPEC0236")) << d2.render();
  support::DiagSink d3;
  EXPECT_FALSE(spec::validate(mla_spec({{"varlen", "true"}}), d3));
  EXPECT_TRUE(test::find(d3, "SPEC0237")) << d3.render();
  // the JSON form round-trips
  support::DiagSink d4;
  const std::string j = spec::to_json(mla_spec());
  EXPECT_TRUE(contains(j, "\"v_from_k\": true")) << j;
  auto back = spec::parse_json(j, d4);
  ASSERT_TRUE(back.has_value()) << d4.render();
  EXPECT_TRUE(back->v_from_k);
}

TEST(MlaDecode, HopperPlanReadsVFromKsSlots) {
  const std::string code = code_of();
  EXPECT_TRUE(contains(code, "Allocate V in shared (BN, d_v) bf16 {view: K}")) << code;
  EXPECT_FALSE(contains(code, "Allocate V in global")) << code;
  EXPECT_FALSE(contains(code, "Copy V")) << code;
  EXPECT_TRUE(contains(code, "Role consumer warpgroups 2 registers 224 split columns")) << code;
  EXPECT_TRUE(contains(code, "Const BM = 64, BN = 64, WARPS = 12, STAGES = 2")) << code;
  EXPECT_TRUE(contains(code, "{pack: heads_q / heads_kv}")) << code;  // 128 heads in two 64-row tiles
  EXPECT_TRUE(contains(code, "Copy Pc from register to shared\n  Compute GEMM Pc, V and accumulate O {release: K}")) << code;
  EXPECT_TRUE(contains(code, "Compute GEMM Q, K^T and get S {wait: Q, wait: K}\n")) << code;
  EXPECT_TRUE(contains(code, "for j = 0: cdiv(seqlen_k, BN)\n")) << code;  // not pipelined: measured slower
  // not on an A100
  support::DiagSink d;
  EXPECT_FALSE(plan_for(mla_spec({{"gpu", "a100"}}), d, "a100").has_value());
  EXPECT_TRUE(test::find(d, "PLAN0103")) << d.render();
}

TEST(MlaDecode, SplitColumnsLowerToTheSharedRowPrimitives) {
  support::DiagSink d;
  auto t = xlate(code_of(), d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* want : {
           "gemm_ss<MmaS, 64, 64, 576, false>(sQ, 0, ringK.slot(sK, posK), tSrS, 32 * cw);",  // each warpgroup's 32 keys
           "v.mask_tile_bounds(tSrS, rows, j, 32 * cw);",
           "combine_rows<op::Max, 2>(rm_tile, xchg, xturn, rows, cw);",
           "store_p<64, 2>(tOrPc, sPc, 32 * cw, rows);",
           "gemm_ss_mn<MmaO, 64>(sPc, ringK.slot(sK, posK), 256 * cw, tOrO);",  // V = the slot's first 512 columns
           "combine_rows<op::AddNonNeg, 2>(rl, xchg, xturn, rows, cw);",
           "store_o_split<512, 2, kBf16, kPack>(tOrO, sO, rows, tid, cw, &p.tma_o, v.kv_head, v.b);",
           "float tOrO[128];",  // (64, 256) per warpgroup
           "const RowMap<kPack> rows(v.m_block, 64, 0, tid, p.pack);",
           "zero_rows_from<64, 512>(ringK.slot(sK, posK), tail_rows, tid, cw);",
           "params->v != params->k",
       })
    EXPECT_TRUE(contains(cu, want)) << want << "\n" << cu;
  EXPECT_FALSE(contains(cu, "ringV")) << cu;
  EXPECT_FALSE(contains(cu, "gemm_rs")) << cu;
  EXPECT_FALSE(contains(cu, "PP::wait_turn")) << cu;
  // the combine of the row maximum comes before the exponentials; the P barrier before the second GEMM
  const size_t comb = cu.find("combine_rows<op::Max"), exp = cu.find("map<op::Exp2>(Row{h}, tSrP"), sp = cu.find("store_p<"),
               pv = cu.find("gemm_ss_mn<"), rel = cu.find("ringK.release(posK");
  ASSERT_NE(comb, npos);
  ASSERT_NE(exp, npos);
  ASSERT_NE(rel, npos);
  EXPECT_LT(comb, exp);
  EXPECT_LT(sp, pv);
  EXPECT_LT(pv, rel);
  // the kernel IR names the split and the view; the kernel info tells qattn.verify to pass v = k
  EXPECT_TRUE(contains(t->info_json, "\"v_from_k\":true") || contains(t->info_json, "\"v_from_k\": true")) << t->info_json;
  EXPECT_TRUE(contains(t->kir, "split columns")) << t->kir;
  EXPECT_TRUE(contains(t->kir, "view: the first columns of K's slots")) << t->kir;
}

TEST(MlaDecode, SplitKeysWriteEachPartsColumnsAndOneLse) {
  // small batches: the key split (a Grid axis) with the split columns; O and LSE at [b, split, kv_head]
  support::DiagSink d;
  const std::string code = code_of({{"split-keys", "true"}, {"batch", "8"}});
  EXPECT_TRUE(contains(code, "split = 0: splits")) << code;
  auto t = xlate(code, d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_TRUE(contains(cu, "store_o_split<512, 2, kBf16, kPack>(tOrO, sO, rows, tid, cw, &p.tma_o, v.kv_head, v.b * v.splits + v.split);")) << cu;
  EXPECT_TRUE(contains(cu, "if (cw == 0) store_rows(p.lse, rLSE, rows, v.kv_head, v.b * v.splits + v.split")) << cu;
  // the row sums are made whole over both warpgroups before the LSE reads them
  const size_t comb = cu.find("combine_rows<op::AddNonNeg, 2>(rl"), lg = cu.find("map<op::Log2>(Row{h}, rl, rLSE)");
  ASSERT_NE(comb, npos);
  ASSERT_NE(lg, npos);
  EXPECT_LT(comb, lg);
}

TEST(MlaDecode, OverlapRunsTheSoftmaxUnderThePreviousTilesProduct) {
  // {overlap}: tile j's S = Q K^T and the softmax run while tile j - 1's O += P V is in flight; K's slot
  // is waited for by posK (advanced after the first GEMM) and read by the view's GEMM and released by
  // posKr, a key tile behind; P is stored once both warpgroups' previous product is done
  support::DiagSink d;
  const std::string overlapped = edit(code_of(), "for j = 0: cdiv(seqlen_k, BN)\n", "for j = 0: cdiv(seqlen_k, BN) {overlap}\n");
  auto t = xlate(overlapped, d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  const size_t steady = cu.find("// -- key tile j: stage 0 up to its first GEMM");
  ASSERT_NE(steady, npos) << cu;
  const std::string body = cu.substr(steady, cu.find("// -- the last key tile: stage 1") - steady);
  const size_t s_gemm = body.find("gemm_ss<MmaS"), adv = body.find("posK.advance(2);"), pv = body.find("gemm_ss_mn<MmaO, 64>(sPc, ringK.slot(sK, posKr)"),
               comb = body.find("combine_rows<op::Max"), wait_pv = body.find("gemm_wait<0>(tOrO)"), rel = body.find("ringK.release(posKr, tid == 0);"),
               store = body.find("store_p<64, 2, true>(tOrPc, sPc, 32 * cw, rows);");
  for (size_t x : {s_gemm, adv, pv, comb, wait_pv, rel, store}) ASSERT_NE(x, npos) << body;
  EXPECT_LT(s_gemm, adv);
  EXPECT_LT(adv, pv);
  EXPECT_LT(pv, comb);      // the softmax of tile j under tile j - 1's product
  EXPECT_LT(comb, wait_pv);
  EXPECT_LT(wait_pv, rel);  // the slot freed once the product that reads it is done
  EXPECT_LT(wait_pv, store);
  EXPECT_TRUE(contains(cu, "RingPos posQ, posK, posKr;")) << cu;
  EXPECT_TRUE(contains(t->kir, "barrier of the warpgroups, store Pc")) << t->kir;
  // without {overlap} (the planner's loop): P needs no barrier before its store
  support::DiagSink d2;
  auto t2 = xlate(code_of(), d2);
  ASSERT_TRUE(t2.has_value()) << d2.render();
  EXPECT_TRUE(contains(t2->cuda_source, "store_p<64, 2>(tOrPc")) << t2->cuda_source;
}

TEST(MlaDecode, PIsStoredAfterABarrierOfTheWarpgroups) {
  // the other warpgroup's product of the previous key tile reads the P tile: without a combine of the
  // rows before the store in its block (a TL with no RowMax there), the warpgroups meet first
  support::DiagSink d;
  std::string tl = edit(code_of(), "  Compute RowMax S and get m_tile\n", "");
  tl = edit(tl, "Compute Max m, m_tile and get m_new", "Compute Max m, m and get m_new");
  auto t = xlate(tl, d);
  ASSERT_TRUE(t.has_value()) << d.render();
  EXPECT_TRUE(contains(t->cuda_source, "store_p<64, 2, true>(tOrPc")) << t->cuda_source;
  EXPECT_FALSE(contains(t->cuda_source, "combine_rows<op::Max")) << t->cuda_source;
}

TEST(MlaDecode, FormsTheSplitKernelCannotRunAreRefused) {
  const std::string code = code_of();
  struct Case {
    std::string tl, code, what;
  };
  const Case cases[] = {
      {edit(code, " split columns", ""), "", "a view without split columns (the checker: P is read from registers there)"},
      {edit(edit(code, "for j = 0: cdiv(seqlen_k, BN)\n", "for j = 0: cdiv(seqlen_k, BN) {overlap}\n"), "{stages: STAGES}", "{stages: 1}"),
       "XL0304", "overlap over a one-slot ring the view reads (tile j's wait on the slot tile j - 1 holds)"},
      {edit(code, "Role consumer warpgroups 2 registers 224 split columns", "Role consumer warpgroups 1 registers 224 split columns"),
       "", "one consumer warpgroup cannot split"},
      {edit(edit(code, "  Copy Pc from register to shared\n", "  Reshape Pc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n"),
            "Allocate Pc in shared (BM, BN) bf16\n", ""),
       "XL0303", "P from registers with split columns"},
  };
  for (const auto& c : cases) {
    support::DiagSink d;
    EXPECT_FALSE(xlate(c.tl, d).has_value()) << c.what;
    if (!c.code.empty()) EXPECT_TRUE(test::find(d, c.code)) << c.what << "\n" << d.render();
    EXPECT_TRUE(d.error_count() > 0) << c.what;
  }
}

}  // namespace
}  // namespace qattn
