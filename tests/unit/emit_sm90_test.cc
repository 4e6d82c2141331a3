// Stage 2 for Hopper (src/backend/emit_sm90.cc): the planner's sm90 TL translates to the
// warp-specialised TMA + wgmma kernel with the TL's tiles, roles and mask; forms the kernel does
// not implement are refused with XL diagnostics (never silently repaired). The GPU side (numerics,
// speed) is tests/gpu/build_kernels.sh + verify.py + bench/bench_sm90.py; compiling one kernel with
// nvcc is in emit_compile_test.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <regex>
#include <string>

#include "backend/translate.h"
#include "diag_test_util.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "tl/parser.h"

namespace qattn::backend {
namespace {

bool has(const support::DiagSink& d, const std::string& code) { return test::find(d, code) != nullptr; }

std::string plan_code(const std::string& preset, std::map<std::string, std::string> flags = {}) {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset(preset);
  flags["gpu"] = "h100";
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  auto p = plan::make_plan(s, *hw::find_gpu("h100"), d);
  EXPECT_TRUE(p.has_value()) << preset << "\n" << d.render();
  return p ? p->code : std::string();
}

std::optional<Translation> xlate(const std::string& code, support::DiagSink& d) {
  return translate_text(code, plan::make_target(*hw::find_gpu("h100")), d, "test.tl");
}

int const_of(const std::string& code, const std::string& name) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(code, m, std::regex("\\b" + name + " = (\\d+)"))) << name << "\n" << code;
  return m.empty() ? -1 : std::stoi(m[1].str());
}

struct Case {
  std::string preset;
  std::map<std::string, std::string> flags;
  int d_qk, d_v;
  std::string ty;    // wgmma operand types in the atom name
  std::string mask;  // the keep() predicate's distinctive part
};

TEST(EmitSm90, PresetsLowerToTheWarpSpecialisedKernel) {
  const std::vector<Case> cases = {
      {"llama3-8b", {}, 128, 128, "BF16BF16", "k <= q + off"},
      {"llama2-7b", {{"mask", "none"}, {"lse", "true"}}, 128, 128, "BF16BF16", "return k < sk_;"},
      {"llama3.2-1b", {}, 64, 64, "BF16BF16", "k <= q + off"},
      {"deepseek-v3-mla-prefill", {}, 192, 128, "BF16BF16", "k <= q + off"},
      {"llama2-7b", {{"head-dim", "256"}}, 256, 256, "BF16BF16", "k <= q + off"},
      {"mistral-7b", {{"window", "256,0"}}, 128, 128, "BF16BF16", "k >= q + off - wl_"},
      {"llama2-7b", {{"mask", "causal_top_left"}, {"dtype", "fp16"}}, 128, 128, "F16F16", "k <= q;"},
  };
  for (const auto& c : cases) {
    const std::string what = c.preset;
    const std::string code = plan_code(c.preset, c.flags);
    support::DiagSink d;
    auto t = xlate(code, d);
    ASSERT_TRUE(t.has_value()) << what << "\n" << d.render() << "\n" << code;
    const std::string& cu = t->cuda_source;
    EXPECT_EQ(t->arch, "sm90") << what;
    bool native = false;
    for (const auto& f : t->nvcc_flags) native = native || f == "-gencode=arch=compute_90a,code=sm_90a";
    EXPECT_TRUE(native) << what << ": wgmma and setmaxnreg need sm_90a";
    const int bm = const_of(code, "BM"), bn = const_of(code, "BN");
    // the TL's tiles pick the wgmma atoms: N = BN for S = Q K^T, N = d_v for O += P V (P in registers)
    EXPECT_NE(cu.find("MMA_64x" + std::to_string(bn) + "x16_F32" + c.ty + "_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>"),
              std::string::npos) << what;
    EXPECT_NE(cu.find("MMA_64x" + std::to_string(c.d_v) + "x16_F32" + c.ty + "_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>"),
              std::string::npos) << what;
    // roles: one producer warpgroup + one consumer warpgroup per 64 query rows
    EXPECT_EQ(t->threads, 128 * (1 + bm / 64)) << what;
    EXPECT_NE(cu.find("kConsumers = " + std::to_string(bm / 64)), std::string::npos) << what;
    EXPECT_NE(cu.find("kDqk = " + std::to_string(c.d_qk) + ", kDv = " + std::to_string(c.d_v)), std::string::npos) << what;
    EXPECT_NE(cu.find("__launch_bounds__(" + std::to_string(t->threads) + ", 1)"), std::string::npos)
        << what << ": setmaxnreg needs a register cap at entry";
    EXPECT_NE(cu.find(c.mask), std::string::npos) << what;
    EXPECT_NE(cu.find("#include \"qattn/sm90/fwd.cuh\""), std::string::npos) << what;
    EXPECT_NE(cu.find("make_tile_map(&kp.tma_q"), std::string::npos) << what;
    EXPECT_LE(t->smem_bytes, 227 * 1024) << what;
    EXPECT_NE(t->info_json.find("\"arch\": \"sm90\""), std::string::npos) << what;
    // the loop bounds are the TL's (tiles outside them are never loaded)
    tl::Program p;
    support::DiagSink pd;
    p = tl::parse(code, pd);
    for (const auto& s : p.stmts)
      if (s.kind == tl::Stmt::Kind::For)
        EXPECT_NE(cu.find("// TL " + std::to_string(s.loc.line) + ": for"), std::string::npos) << what;
  }
}

TEST(EmitSm90, WindowAndScaleComeFromTheTl) {
  const std::string code = plan_code("mistral-7b", {{"window", "300,7"}});
  support::DiagSink d;
  auto t = xlate(code, d);
  ASSERT_TRUE(t) << d.render();
  EXPECT_NE(t->cuda_source.find("kp.window_left = 300; kp.window_right = 7;"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("kp.scale_log2 = (softmax_scale * qattn::kLog2e);"), std::string::npos);
  // a different factor in the TL is what the kernel uses (the translator does not fix the TL)
  std::string changed = code;
  const std::string from = "Compute Multiply S, softmax_scale * log2e";
  ASSERT_NE(changed.find(from), std::string::npos);
  changed.replace(changed.find(from), from.size(), "Compute Multiply S, softmax_scale");
  support::DiagSink d2;
  auto t2 = xlate(changed, d2);
  ASSERT_TRUE(t2) << d2.render();
  EXPECT_NE(t2->cuda_source.find("kp.scale_log2 = (softmax_scale);"), std::string::npos);
}

void expect_refused(std::string code, const std::string& from, const std::string& to, const std::string& xl) {
  ASSERT_NE(code.find(from), std::string::npos) << from;
  code.replace(code.find(from), from.size(), to);
  support::DiagSink d;
  EXPECT_FALSE(xlate(code, d)) << "accepted after replacing `" << from << "`";
  EXPECT_TRUE(has(d, xl)) << from << " -> " << to << "\n" << d.render();
  for (const auto& x : d.all())
    if (x.code == xl) EXPECT_FALSE(x.hint.empty()) << x.message;
}

TEST(EmitSm90, FormsTheKernelDoesNotImplementAreRefused) {
  const std::string code = plan_code("llama3-8b");
  // a missing step of the online softmax is not silently restored
  expect_refused(code, "  Compute Rescale O, alpha\n", "", "XL0301");
  // natural exp instead of Exp2
  expect_refused(code, "Compute Exp2 P", "Compute Exp P", "XL0301");
  // K/V tiles the wgmma cannot cover
  expect_refused(code, "Const BM = 128, BN = 128", "Const BM = 128, BN = 120", "XL0202");
  // a block tile that does not split into 64-row consumer warpgroups
  expect_refused(code, "Const BM = 128, BN = 128", "Const BM = 96, BN = 128", "XL0202");
  // fp8 operands have no wgmma lowering yet
  support::DiagSink d;
  EXPECT_FALSE(xlate(plan_code("llama2-7b", {{"dtype", "fp8_e4m3"}}), d));
  EXPECT_TRUE(has(d, "XL0102")) << d.render();
}

// The TL's Hopper schedule (Role statements, {stages}, {overlap}) is what the kernel runs with.
TEST(EmitSm90, TheTlScheduleDrivesTheKernel) {
  const std::string code = plan_code("llama2-7b", {{"mask", "none"}, {"head-dim", "256"}});  // not persistent
  {
    support::DiagSink d;
    auto t = xlate(code, d);
    ASSERT_TRUE(t) << d.render();
    EXPECT_NE(t->cuda_source.find("kStages = 2;"), std::string::npos);
    EXPECT_NE(t->cuda_source.find("kConsumers = 2, kProducerRegs = 24, kConsumerRegs = 240;"), std::string::npos);
    EXPECT_NE(t->cuda_source.find("kPingpong = true;"), std::string::npos);
    EXPECT_NE(t->cuda_source.find("kOverlap = true;"), std::string::npos);
    EXPECT_NE(t->cuda_source.find("kPersistent = false;"), std::string::npos);
    EXPECT_NE(t->cuda_source.find("const long long blocks = kp.num_tiles;  // one block per tile"), std::string::npos);
  }
  std::string changed = code;
  const auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = changed.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    changed.replace(at, from.size(), to);
  };
  replace("Role producer warpgroups 1 registers 24", "Role producer warpgroups 1 registers 40");
  replace("Role consumer warpgroups 2 registers 240 pingpong", "Role consumer warpgroups 2 registers 232");
  replace("Allocate K in shared (BN, d) bf16 {stages: STAGES}", "Allocate K in shared (BN, d) bf16 {stages: 1}");
  replace("Allocate V in shared (BN, d) bf16 {stages: STAGES}", "Allocate V in shared (BN, d) bf16 {stages: 1}");
  replace(" {overlap}\n", "\n");
  support::DiagSink d;
  auto t = xlate(changed, d);
  ASSERT_TRUE(t) << d.render() << "\n" << changed;
  EXPECT_NE(t->cuda_source.find("kStages = 1;"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("kConsumers = 2, kProducerRegs = 40, kConsumerRegs = 232;"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("kPingpong = false;"), std::string::npos);
  EXPECT_NE(t->cuda_source.find("kOverlap = false;"), std::string::npos);
}

TEST(EmitSm90, SchedulesTheKernelCannotRunAreRefused) {
  const std::string code = plan_code("llama2-7b", {{"mask", "none"}, {"head-dim", "256"}});
  std::string two_producers = code;
  const std::string cons = "Role consumer warpgroups 2 registers 240 pingpong";
  ASSERT_NE(two_producers.find(cons), std::string::npos);
  two_producers.replace(two_producers.find(cons), cons.size(), "Role consumer warpgroups 2 registers 232 pingpong");
  expect_refused(two_producers, "Role producer warpgroups 1 registers 24", "Role producer warpgroups 2 registers 24", "XL0202");
  expect_refused(code, "Role consumer warpgroups 2 registers 240 pingpong", "Role consumer warpgroups 1 registers 240", "XL0202");
  expect_refused(code, "Allocate V in shared (BN, d) bf16 {stages: STAGES}", "Allocate V in shared (BN, d) bf16 {stages: 1}", "XL0202");
  // three consumers (BM = 192) cannot ping-pong in this kernel
  std::string bm192 = plan_code("llama3-8b");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"Const BM = 128, BN = 128", "Const BM = 192, BN = 128"},
           {"Role producer warpgroups 1 registers 40", "Role producer warpgroups 1 registers 32"}}) {
    ASSERT_NE(bm192.find(from), std::string::npos) << from;
    bm192.replace(bm192.find(from), from.size(), to);
  }
  expect_refused(bm192, "Role consumer warpgroups 2 registers 232 pingpong", "Role consumer warpgroups 3 registers 160 pingpong", "XL0202");
}

// Grid {persistent}: one block per SM takes the tiles in turn from a counter; O gets its own
// staging tile when it fits (else Q is released after the epilogue).
TEST(EmitSm90, PersistentGridFromTheTl) {
  const std::string code = plan_code("llama3-8b");  // causal d128: the planner's Grid is persistent
  ASSERT_NE(code.find("b = 0: batch {persistent}\n"), std::string::npos) << code;
  support::DiagSink d;
  auto t = xlate(code, d);
  ASSERT_TRUE(t) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_NE(cu.find("kPersistent = true;"), std::string::npos);
  EXPECT_NE(cu.find("kSeparateO = true;"), std::string::npos) << "32 KB of O staging fits next to Q and the K/V rings";
  EXPECT_NE(cu.find("qattn::host::sm_count()"), std::string::npos);
  EXPECT_NE(cu.find("kp.tile_counter = qattn::host::tile_counter();"), std::string::npos);
  EXPECT_NE(cu.find("kConsumers = 2, kProducerRegs = 40, kConsumerRegs = 232;"), std::string::npos);
  // d256: Q 64 KB + 2 x 80-row K/V stages leave no room for a separate O tile
  std::string d256 = plan_code("llama2-7b", {{"head-dim", "256"}});
  const std::string grid = "b = 0: batch";
  ASSERT_NE(d256.find(grid), std::string::npos);
  d256.insert(d256.find(grid) + grid.size(), " {persistent}");
  support::DiagSink d2;
  auto t2 = xlate(d256, d2);
  ASSERT_TRUE(t2) << d2.render();
  EXPECT_NE(t2->cuda_source.find("kSeparateO = false;"), std::string::npos);
  // the attribute belongs to the Grid
  std::string misplaced = plan_code("llama2-7b", {{"mask", "none"}});
  const std::string kv = "Let kv_head = head / (heads_q / heads_kv)";
  ASSERT_NE(misplaced.find(kv), std::string::npos);
  misplaced.insert(misplaced.find(kv) + kv.size(), " {persistent}");
  support::DiagSink d3;
  EXPECT_FALSE(xlate(misplaced, d3));
  EXPECT_TRUE(has(d3, "TL0717")) << d3.render();
}

// GQA packing: a spec with a short query length plans `{pack: heads_q / heads_kv}` (one tile holds
// the query heads of a kv head); the kernel takes the packed Q/O maps, the head-group grid and the
// loop bounds over row / group from the TL; other pack factors and mma.sync targets are refused.
TEST(EmitSm90, GqaPackingFromTheTl) {
  const std::string code = plan_code("llama3-8b", {{"seqlen", "16/4096"}});
  ASSERT_NE(code.find("Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_kv, b = 0: batch"),
            std::string::npos) << code;
  ASSERT_NE(code.find("with offset [b, kv_head] {pack: heads_q / heads_kv}"), std::string::npos) << code;
  support::DiagSink d;
  auto t = xlate(code, d);
  ASSERT_TRUE(t) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* want : {"kPackGqa = true;", "kp.pack = p.heads_q / p.heads_kv;", "Traits::kBM, kp.pack) ||",
                           "p.o_batch_stride, 64, kp.pack))", "cdiv((m_block + 1) * BM, heads_q / heads_kv)"})
    EXPECT_NE(cu.find(want), std::string::npos) << want << "\n" << cu;
  // the same spec without a stated length: one query head per tile
  support::DiagSink d2;
  auto plain = xlate(plan_code("llama3-8b"), d2);
  ASSERT_TRUE(plain) << d2.render();
  EXPECT_NE(plain->cuda_source.find("kPackGqa = false;"), std::string::npos);
  EXPECT_NE(plain->cuda_source.find("kp.pack = 1;"), std::string::npos);
  // a pack factor the kernel does not implement
  std::string two = code;
  for (size_t at; (at = two.find("{pack: heads_q / heads_kv}")) != std::string::npos;)
    two.replace(at, 26, "{pack: heads_q / heads_kv / 1}");  // the same value, another expression: checked, not lowered
  support::DiagSink d3;
  EXPECT_FALSE(xlate(two, d3));
  EXPECT_TRUE(has(d3, "XL0202")) << d3.render();
  // packing on an mma.sync target (tests/tl/gqa_packed.tl interprets): refused at the attribute
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/gqa_packed.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string tl = ss.str();
  ASSERT_NE(tl.find("{pack: heads_q / heads_kv}"), std::string::npos);
  const std::string dims = "seqlen_k, d\n";
  ASSERT_NE(tl.find(dims), std::string::npos);
  tl.replace(tl.find(dims), dims.size(), "seqlen_k, d = 64\n");  // the translator builds the head dim in
  const std::string tiles = "Const BM = 16, BN = 16";
  ASSERT_NE(tl.find(tiles), std::string::npos);
  tl.replace(tl.find(tiles), tiles.size(), "Const BM = 64, BN = 64");  // 4 warps of 16 rows
  support::DiagSink d4;
  EXPECT_FALSE(translate_text(tl, plan::make_target(*hw::find_gpu("a100")), d4, "gqa_packed.tl"));
  const auto* x = test::find(d4, "XL0301");
  ASSERT_NE(x, nullptr) << d4.render();
  EXPECT_NE(x->hint.find("--gpu h100"), std::string::npos) << x->hint;
}

// The Hopper schedule on an mma.sync target is refused at its statement, not ignored.
TEST(EmitSm90, HopperScheduleOnAnAmpereTargetIsRefused) {
  support::DiagSink pd;
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  ASSERT_TRUE(spec::apply_flags(s, {{"gpu", "a100"}}, pd)) << pd.render();
  auto p = plan::make_plan(s, *hw::find_gpu("a100"), pd);
  ASSERT_TRUE(p) << pd.render();
  std::string code = p->code;
  const size_t at = code.find("\nAllocate ");
  ASSERT_NE(at, std::string::npos);
  code.insert(at + 1, "Role producer warpgroups 1 registers 24\nRole consumer warpgroups 1 registers 240\n");
  support::DiagSink d;
  EXPECT_FALSE(translate_text(code, plan::make_target(*hw::find_gpu("a100")), d, "test.tl"));
  const auto* x = test::find(d, "XL0301");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_NE(x->hint.find("--gpu h100"), std::string::npos) << x->hint;
}

// Score declarations (issue 8) lower into the Traits' Scope: the Multiply before the Modify and
// the Modify run element-wise in TL order, the Multiply after it folds into Exp2.
TEST(EmitSm90, ScoreDeclarationsLowerIntoTheScope) {
  support::DiagSink d;
  const std::string code = plan_code("gemma2-9b");  // softcap 50
  auto t = xlate(code, d);
  ASSERT_TRUE(t) << d.render() << code;
  const std::string& cu = t->cuda_source;
  EXPECT_NE(cu.find("__device__ float score_softcap(float score, int q_idx, int kv_idx) const { return (50.0f) * (qattn::fast_tanh("),
            std::string::npos) << cu;
  const size_t mul = cu.find("x *= softmax_scale;"), mod = cu.find("x = score_softcap(x, q_idx, kv_idx);");
  ASSERT_NE(mul, std::string::npos);
  ASSERT_NE(mod, std::string::npos);
  EXPECT_LT(mul, mod) << "the TL order: Multiply S, softmax_scale before Modify";
  EXPECT_NE(cu.find("kp.scale_log2 = (qattn::kLog2e);"), std::string::npos) << "the Multiply after the Modify folds into Exp2";
  EXPECT_NE(cu.find("#include \"qattn/variant.cuh\""), std::string::npos);
  // a plain program's modify() does nothing
  support::DiagSink d2;
  auto plain = xlate(plan_code("llama3-8b"), d2);
  ASSERT_TRUE(plain) << d2.render();
  EXPECT_NE(plain->cuda_source.find("(void)s, (void)qa, (void)qb, (void)col0, (void)c;"), std::string::npos);
  EXPECT_EQ(plain->cuda_source.find("qattn/variant.cuh"), std::string::npos);
}

// Mask declarations: keep() ands the predicate, a `full when` clause lets whole tiles skip the
// element test, `{skip: M}` makes visible() test the `empty when` clause (fwd.cuh's prev_tile walks
// only visible key tiles, in the producer and the consumers alike); aux globals bind to p.aux[].
TEST(EmitSm90, MaskDeclarationsSkipTilesAndReadAuxInputs) {
  support::DiagSink d;
  const std::string code = plan_code("llama3-8b", {{"document", "true"}, {"alibi", "true"}});
  ASSERT_NE(code.find("{skip: document, overlap}"), std::string::npos) << code;
  auto t = xlate(code, d);
  ASSERT_TRUE(t) << d.render() << code;
  const std::string& cu = t->cuda_source;
  for (const char* want : {"return k < sk_ && k <= q + off && mask_document(q, k);", "|| !full_document(q_lo, q_hi, col0, last_col);",
                           "return !empty_document(row0, row0 + kBM - 1, col0, col0 + BN - 1);",
                           "aux_seg_q = static_cast<const int*>(p.aux[", "aux_alibi_slopes = static_cast<const float*>(p.aux[",
                           "x = score_alibi(x, q_idx, kv_idx);", "__device__ bool visible(int j) const {"})
    EXPECT_NE(cu.find(want), std::string::npos) << want << "\n" << cu;
  EXPECT_NE(t->info_json.find("\"aux\": [{\"name\": \""), std::string::npos) << t->info_json;
}

TEST(EmitSm90, ScoreStagesTheKernelCannotRunAreRefused) {
  const std::string code = plan_code("gemma2-9b");
  // a Mask before a Modify: softcap would turn a masked -inf into a finite score
  {
    std::string c = code;
    const std::string mod = "  Compute Modify S at [m_block, j] with softcap\n";
    ASSERT_NE(c.find(mod), std::string::npos) << c;
    c.erase(c.find(mod), mod.size());
    const std::string mask = "  Compute Mask S at [m_block, j] with causal\n";
    ASSERT_NE(c.find(mask), std::string::npos) << c;
    c.insert(c.find(mask) + mask.size(), mod);
    support::DiagSink d;
    EXPECT_FALSE(xlate(c, d));
    const auto* x = test::find(d, "XL0301");
    ASSERT_NE(x, nullptr) << d.render();
    EXPECT_NE(x->message.find("Modify after a Mask"), std::string::npos) << x->message;
  }
  // a score factor that is not a positive scalar would not commute with the masks
  {
    std::string c = code;
    const std::string from = "Compute Multiply S, log2e";
    ASSERT_NE(c.find(from), std::string::npos);
    c.replace(c.find(from), from.size(), "Compute Multiply S, 0 - log2e");
    support::DiagSink d;
    EXPECT_FALSE(xlate(c, d));
    EXPECT_TRUE(has(d, "XL0301")) << d.render();
  }
}

}  // namespace
}  // namespace qattn::backend
