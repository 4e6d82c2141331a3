// Stage 2 for Hopper on the CPU: the sm90 lowering (src/backend/sm90/lower*.cc, schedule.cc: TL ->
// kir::Kernel, every XL diagnostic) and emitter (sm90/emit.cc: kir -> CUDA on device/qattn/sm90/).
//  - presets lower: wgmma atoms, roles and threads, launch bounds, the mask predicate, a `// TL n:`
//    for every TL statement, no ABI boilerplate (host.cuh checks the call), a short kernel body
//  - the TL drives the kernel with no C++ change: a deleted Rescale, a legal reordering, {stage: N},
//    {async} on the O store, {overlap}, the score factor, Roles / stages / persistent grid
//  - what the kernel cannot run is refused (XL0202 / XL0301 / XL0303 / XL0304, each with a hint);
//    forms the old fixed-order emitter refused and the new one lowers are asserted to lower
//  - variants (softcap, document mask with {skip}, aux inputs), GQA packing, the kernel IR text
// The GPU side (numerics, speed) is tests/gpu/build_kernels.sh + verify.py + bench/bench_sm90.py;
// compiling one kernel with nvcc is in emit_compile_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "backend/translate.h"
#include "diag_test_util.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "tl/parser.h"

namespace qattn::backend {
namespace {

using test::contains;
constexpr auto npos = std::string::npos;

bool has(const support::DiagSink& d, const std::string& code) { return test::find(d, code) != nullptr; }

std::string plan_code(const std::string& preset, std::map<std::string, std::string> flags = {}, const std::string& gpu = "h100") {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset(preset);
  flags["gpu"] = gpu;
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  auto p = plan::make_plan(s, *hw::find_gpu(gpu), d);
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

// `code` with its first `from` replaced by `to` (a missing `from` fails the test).
std::string edit(std::string code, const std::string& from, const std::string& to) {
  const size_t at = code.find(from);
  EXPECT_NE(at, npos) << "not in the TL: `" << from << "`";
  if (at != npos) code.replace(at, from.size(), to);
  return code;
}

// The translation of a program that must lower (an empty one, after a failure, if it does not).
Translation lower_ok(const std::string& code, const std::string& what) {
  support::DiagSink d;
  auto t = xlate(code, d);
  EXPECT_TRUE(t.has_value()) << what << "\n" << d.render() << "\n" << code;
  EXPECT_EQ(d.error_count(), 0) << what << "\n" << d.render();
  return t ? *t : Translation{};
}

void expect_refused(std::string code, const std::string& from, const std::string& to, const std::string& xl) {
  ASSERT_NE(code.find(from), npos) << from;
  code.replace(code.find(from), from.size(), to);
  support::DiagSink d;
  EXPECT_FALSE(xlate(code, d)) << "accepted after replacing `" << from << "`";
  EXPECT_TRUE(has(d, xl)) << from << " -> " << to << "\n" << d.render();
  for (const auto& x : d.all()) {
    if (x.code == xl) {
      EXPECT_FALSE(x.hint.empty()) << x.message;
    }
  }
}

// The text from `from` up to `to` (both must occur, in that order).
std::string between(const std::string& s, const std::string& from, const std::string& to) {
  const size_t a = s.find(from), b = a == npos ? npos : s.find(to, a + from.size());
  EXPECT_TRUE(a != npos && b != npos) << "no `" << from << "` ... `" << to << "` in\n" << s;
  return a == npos || b == npos ? std::string() : s.substr(a, b - a);
}
// The consumer's blocks of an {overlap} loop.
std::string first_block(const std::string& cu) { return between(cu, "// -- the first key tile", "// -- key tile j:"); }
std::string steady_block(const std::string& cu) { return between(cu, "// -- key tile j:", "// -- the last key tile"); }
std::string drain_block(const std::string& cu) { return between(cu, "// -- the last key tile", "finish_stores<"); }

// Each of `parts` occurs in `s`, in this order.
void expect_in_order(const std::string& s, const std::vector<std::string>& parts, const std::string& what) {
  size_t at = 0;
  for (const auto& p : parts) {
    const size_t f = s.find(p, at);
    EXPECT_NE(f, npos) << what << ": `" << p << "` missing, or not after `" << parts.front() << "` ...\n" << s;
    if (f == npos) return;
    at = f + p.size();
  }
}
size_t pos(const std::string& s, const std::string& part) {
  const size_t f = s.find(part);
  EXPECT_NE(f, npos) << "no `" << part << "` in\n" << s;
  return f;
}

// O's staging tile shares Q's shared memory (else it has its own).
bool o_in_q(const std::string& cu) {
  std::smatch q, o;
  EXPECT_TRUE(std::regex_search(cu, q, std::regex(R"(constexpr int kSmemQ = (\d+);)"))) << cu;
  EXPECT_TRUE(std::regex_search(cu, o, std::regex(R"(constexpr int kSmemO = (\d+);)"))) << cu;
  return !q.empty() && !o.empty() && q[1].str() == o[1].str();
}

// The lines of the TL statements (not comments or blanks), recursively; loop_only: the loop body.
std::vector<int> stmt_lines(const std::string& code, bool loop_only = false) {
  support::DiagSink pd;
  const tl::Program p = tl::parse(code, pd);
  EXPECT_FALSE(pd.has_errors()) << pd.render();
  std::vector<int> out;
  std::function<void(const std::vector<tl::Stmt>&, bool)> visit = [&](const std::vector<tl::Stmt>& body, bool in_loop) {
    for (const auto& s : body) {
      if (s.kind == tl::Stmt::Kind::Comment || s.kind == tl::Stmt::Kind::Blank) continue;
      if (in_loop || !loop_only) out.push_back(s.loc.line);
      if (s.kind == tl::Stmt::Kind::For) visit(s.loop.body, true);
    }
  };
  visit(p.stmts, false);
  return out;
}

// The line of the TL statement `text` (a whole line of `code`, leading spaces included), as a string.
std::string line_of(const std::string& code, const std::string& text) {
  std::istringstream in(code);
  int n = 0;
  for (std::string l; std::getline(in, l);)
    if (++n, l == text || l.rfind(text + " {", 0) == 0) return std::to_string(n);
  ADD_FAILURE() << "no line `" << text << "` in\n" << code;
  return "?";
}
// `TL a, b, ...` for the loop comment listing the stage-1 statements.
std::string stage1(const std::string& code, const std::vector<std::string>& stmts) {
  std::string s = "stage 1, TL ";
  for (size_t i = 0; i < stmts.size(); ++i) s += (i ? ", " : "") + line_of(code, stmts[i]);
  return s + ", of a tile runs after the next tile's first GEMM";
}
const std::string kPv = "  Compute GEMM Pc, V and accumulate O", kMax = "  Compute Max m, m_new";

// Lines from the `__global__` line to the kernel's closing brace, both included.
int kernel_lines(const std::string& cu) {
  const size_t a = cu.find("__global__"), b = a == npos ? npos : cu.find("\n}\n", a);
  EXPECT_TRUE(a != npos && b != npos) << cu;
  return a == npos || b == npos ? 1 << 20 : 1 + int(std::count(cu.begin() + long(a), cu.begin() + long(b) + 1, '\n'));
}

// ---- presets ---------------------------------------------------------------------------------
struct Case {
  std::string preset;
  std::map<std::string, std::string> flags;
  int d_qk, d_v;
  std::string ty;    // wgmma operand types in the atom name
  std::string keep;  // the Scope's keep_<kind> predicate
  std::string window = "0, 0";
  bool pack = false;
  std::string what() const {
    std::string w = preset;
    for (const auto& [k, v] : flags) w += " --" + k + " " + v;
    return w;
  }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"llama3-8b", {}, 128, 128, "BF16BF16", "keep_causal(int q, int k) const { [[maybe_unused]] const int off = sk_ - sq_; return k < sk_ && k <= q + off; }"},
      {"llama2-7b", {{"mask", "none"}, {"lse", "true"}}, 128, 128, "BF16BF16", "keep_bounds(int q, int k) const { [[maybe_unused]] const int off = sk_ - sq_; return k < sk_; }"},
      {"llama3.2-1b", {}, 64, 64, "BF16BF16", "keep_causal(int q, int k) const { [[maybe_unused]] const int off = sk_ - sq_; return k < sk_ && k <= q + off; }"},
      {"deepseek-v3-mla-prefill", {}, 192, 128, "BF16BF16", "return k < sk_ && k <= q + off; }"},
      {"llama2-7b", {{"head-dim", "256"}}, 256, 256, "BF16BF16", "return k < sk_ && k <= q + off; }"},
      {"mistral-7b", {{"window", "256,0"}}, 128, 128, "BF16BF16", "keep_window(int q, int k) const { [[maybe_unused]] const int off = sk_ - sq_; return k < sk_ && k >= q + off - wl_ && k <= q + off + wr_; }", "window_left, window_right"},
      {"llama2-7b", {{"mask", "causal_top_left"}, {"dtype", "fp16"}}, 128, 128, "F16F16", "keep_causal_top_left(int q, int k) const { [[maybe_unused]] const int off = sk_ - sq_; return k < sk_ && k <= q; }"},
      {"llama3-8b", {{"seqlen", "16/4096"}}, 128, 128, "BF16BF16", "return k < sk_ && k <= q + off; }", "0, 0", true},
  };
  return all;
}

TEST(EmitSm90, PresetsLowerToTheWarpSpecialisedKernel) {
  for (const auto& c : cases()) {
    const std::string what = c.what();
    const std::string code = plan_code(c.preset, c.flags);
    const Translation t = lower_ok(code, what);
    const std::string& cu = t.cuda_source;
    EXPECT_EQ(t.arch, "sm90") << what;
    EXPECT_NE(std::find(t.nvcc_flags.begin(), t.nvcc_flags.end(), "-gencode=arch=compute_90a,code=sm_90a"), t.nvcc_flags.end())
        << what << ": wgmma and setmaxnreg need sm_90a";
    const int bm = const_of(code, "BM"), bn = const_of(code, "BN");
    // the TL's tiles pick the wgmma atoms: N = BN for S = Q K^T, N = d_v for O += P V (P in registers)
    const std::string g = "qattn::sm90::Wgmma<", el = c.ty == std::string("BF16BF16") ? "__nv_bfloat16" : "__half",
                      mj = "qattn::sm90::Major::";
    EXPECT_TRUE(contains(cu, "using MmaS = " + g + std::to_string(bn) + ", " + el + ", " + mj + "K, " + mj + "K>;")) << what;
    EXPECT_TRUE(contains(cu, "using MmaO = " + g + std::to_string(c.d_v) + ", " + el + ", " + mj + "K, " + mj + "MN>;")) << what;
    EXPECT_TRUE(contains(cu, "gemm_ss<MmaS, " + std::to_string(bm) + ", " + std::to_string(bn) + ", ")) << what;
    // roles: the TL's Role statements (one producer warpgroup, one consumer warpgroup per 64 rows)
    std::smatch pr, co;
    ASSERT_TRUE(std::regex_search(code, pr, std::regex(R"(Role producer warpgroups 1 registers (\d+))"))) << code;
    ASSERT_TRUE(std::regex_search(code, co, std::regex(R"(Role consumer warpgroups (\d+) registers (\d+)( pingpong)?)"))) << code;
    EXPECT_EQ(std::stoi(co[1].str()), bm / 64) << what;
    EXPECT_EQ(t.threads, 128 * (1 + bm / 64)) << what;
    EXPECT_TRUE(contains(cu, "constexpr int kConsumers = " + std::to_string(bm / 64) + ", kThreads = " + std::to_string(t.threads) + ";")) << what;
    EXPECT_TRUE(contains(cu, "producer_registers<" + pr[1].str() + ">();")) << what;
    EXPECT_TRUE(contains(cu, "consumer_registers<" + co[2].str() + ">();")) << what;
    EXPECT_TRUE(contains(cu, std::string("using PP = Pingpong<kConsumers, ") + (co[3].matched ? "true" : "false") + ">;")) << what;
    EXPECT_TRUE(contains(cu, "__global__ void __launch_bounds__(kThreads, 1) " + t.kernel_name + "(const __grid_constant__ Params p) {"))
        << what << ": setmaxnreg needs a register cap at entry";
    // the mask predicate and the window the host passes
    EXPECT_TRUE(contains(cu, c.keep)) << what;
    EXPECT_TRUE(contains(cu, "make_params(&kp, p, shape, gx * gy * gz, " + c.window + ", &blocks)")) << what;
    EXPECT_TRUE(contains(cu, std::string("constexpr bool kPack = ") + (c.pack ? "true;" : "false;"))) << what;
    // the device primitives, not the old hand-written kernel template
    EXPECT_TRUE(contains(cu, "#include \"qattn/sm90/kernel.cuh\"")) << what;
    EXPECT_FALSE(contains(cu, "fwd.cuh")) << what;
    // no ABI boilerplate: host.cuh checks the call, launch.cuh builds the maps
    EXPECT_TRUE(contains(cu, "qattn::host::check_fwd_params(params, " + std::to_string(c.d_qk) + ", " + std::to_string(c.d_v) + ", 2, 2, " +
                                 (c.flags.count("lse") ? "true" : "false"))) << what;
    EXPECT_FALSE(contains(cu, "abi_version")) << what;
    EXPECT_LE(t.smem_bytes, 227 * 1024) << what;
    EXPECT_TRUE(contains(t.info_json, "\"arch\":\"sm90\"")) << what << t.info_json;
  }
}

// The generated code names every TL statement (`// TL <line>:`) and its kernel stays short: the TL
// statements compose it from the device primitives.
TEST(EmitSm90, EveryTlStatementIsNamedAndTheKernelIsShort) {
  for (const auto& c : cases()) {
    const std::string code = plan_code(c.preset, c.flags);
    const std::string cu = lower_ok(code, c.what()).cuda_source;
    std::vector<std::string> lines{""};
    std::istringstream in(code);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (int line : stmt_lines(code))
      EXPECT_TRUE(contains(cu, "// TL " + std::to_string(line) + ":")) << c.what() << ": no `// TL " << line << ":` block for `"
                                                                    << lines.at(size_t(line)) << "`";
    EXPECT_LT(kernel_lines(cu), 200) << c.what() << ": the kernel (from its `__global__` line to its closing brace)";
  }
}

// The pipelined consumer of the planner's program: the first GEMM of tile j is issued with the
// P V GEMM of tile j - 1, each GEMM wait sits before the first op that touches its registers, the
// first key tile folds the initial values, and row-wise runs go row by row.
TEST(EmitSm90, OverlapPipelinesTheKeyLoop) {
  const std::string code = plan_code("llama3-8b");
  const std::string cu = lower_ok(code, "llama3-8b").cuda_source;
  const std::string first = first_block(cu), steady = steady_block(cu), drain = drain_block(cu);
  expect_in_order(steady, {"gemm_ss<MmaS", "gemm_rs<MmaO", "PP::pass_turn(cw);", "ew<op::MaxOfUpper>(rm, rm_new, rm);",
                           "gemm_wait<1>(tSrS);", "ringK.release(posK", "v.mask_tile_causal(tSrS, rows, j);",
                           "for (int h = 0; h < 2; ++h) {", "row_max<false>(Row{h}, tSrS, rm_tile, scale_S);",
                           "ew<op::SubMax>(Row{h}, rm, rm_new, ralpha);", "ew_rows<op::Sub>(Row{h}, tSrS, rm_new, tSrP, scale_S);",
                           "map<op::Exp2>(Row{h}, tSrP, tSrP);", "row_sum<false, true>(Row{h}, tSrP, rl_tile);",
                           "gemm_wait<0>(tOrO, tOrPc);", "ringV.release(posV", "rescale(Row{h}, tOrO, ralpha);",
                           "convert<kBf16>(Row{h}, tSrP, tOrPc);"},
                  "steady");
  // the mask waits for S only (1 GEMM left in flight): P V runs under the softmax until O is rescaled
  EXPECT_GT(pos(steady, "gemm_wait<0>(tOrO, tOrPc);"), pos(steady, "ew<op::AddNonNeg>(Row{h}, rl, rl_tile, rl);"));
  // the first key tile: no P V GEMM, m = -inf and l = O = 0 folded
  EXPECT_FALSE(contains(first, "gemm_rs<"));
  EXPECT_TRUE(contains(first, "copy(Row{h}, rm_tile, rm_new);"));
  EXPECT_TRUE(contains(first, "copy(Row{h}, rl_tile, rl);"));
  EXPECT_FALSE(contains(first, "rescale(Row{h}, tOrO"));
  // the drain: stage 1 of the last tile
  expect_in_order(drain, {"gemm_rs<MmaO", "ew<op::MaxOfUpper>(rm, rm_new, rm);", "gemm_wait<0>(tOrO, tOrPc);", "ringV.release(posV"}, "drain");
  EXPECT_FALSE(contains(drain, "gemm_ss<"));
  // the score factor is a kernel scalar the host computes
  EXPECT_TRUE(contains(cu, "const float scale_S = p.scalars[0];"));
  EXPECT_TRUE(contains(cu, "kp.scalars[0] = p.softmax_scale * qattn::kLog2e;"));
  EXPECT_TRUE(contains(cu, stage1(code, {kPv, kMax}))) << stage1(code, {kPv, kMax});
}

// ---- the TL drives the kernel: edits with no C++ change ----------------------------------------
TEST(EmitSm90, DeletingTheRescaleOfOTranslatesWithoutIt) {
  const std::string code = plan_code("llama3-8b");
  const std::regex rescale_o(R"(rescale\((Row\{h\}, )?tOrO)");
  ASSERT_TRUE(std::regex_search(lower_ok(code, "planner").cuda_source, rescale_o));
  const std::string cu = lower_ok(edit(code, "  Compute Rescale O, alpha\n", ""), "no Rescale O").cuda_source;
  EXPECT_FALSE(std::regex_search(cu, rescale_o)) << cu;
  EXPECT_FALSE(contains(cu, "Compute Rescale O, alpha"));
  EXPECT_TRUE(contains(cu, "rescale(Row{h}, rl, ralpha);")) << "the other Rescale stays";
}

TEST(EmitSm90, ALegalReorderingIsFollowed) {
  const std::string code = plan_code("llama3-8b");
  std::string moved = edit(code, "  Compute Subtract m, m_new and get alpha\n  Compute Exp2 alpha\n", "");
  moved = edit(moved, "  Compute RowSum P and get l_tile\n",
               "  Compute RowSum P and get l_tile\n  Compute Subtract m, m_new and get alpha\n  Compute Exp2 alpha\n");
  const std::string before = steady_block(lower_ok(code, "planner").cuda_source);
  const std::string after = steady_block(lower_ok(moved, "reordered").cuda_source);
  expect_in_order(before, {"ew<op::SubMax>(Row{h}, rm, rm_new, ralpha);", "map<op::Exp2>(Row{h}, ralpha, ralpha);",
                           "ew_rows<op::Sub>(Row{h}, tSrS, rm_new, tSrP, scale_S);", "map<op::Exp2>(Row{h}, tSrP, tSrP);",
                           "row_sum<false, true>(Row{h}, tSrP, rl_tile);", "rescale(Row{h}, rl, ralpha);"},
                  "planner order");
  expect_in_order(after, {"ew_rows<op::Sub>(Row{h}, tSrS, rm_new, tSrP, scale_S);", "map<op::Exp2>(Row{h}, tSrP, tSrP);",
                          "row_sum<false, true>(Row{h}, tSrP, rl_tile);", "ew<op::SubMax>(Row{h}, rm, rm_new, ralpha);",
                          "map<op::Exp2>(Row{h}, ralpha, ralpha);", "rescale(Row{h}, rl, ralpha);"},
                  "reordered");
  expect_in_order(after, {"// TL " + line_of(moved, "  Compute RowSum P and get l_tile") + ": Compute RowSum P and get l_tile",
                          "// TL " + line_of(moved, "  Compute Subtract m, m_new and get alpha") + ": Compute Subtract m, m_new and get alpha",
                          "// TL " + line_of(moved, "  Compute Exp2 alpha") + ": Compute Exp2 alpha"},
                  "the comments name the moved lines");
}

TEST(EmitSm90, StageAttributesMoveStatementsAcrossTheGemm) {
  const std::string code = plan_code("llama3-8b");
  const std::string base = steady_block(lower_ok(code, "planner").cuda_source);
  EXPECT_GT(pos(base, "rescale(Row{h}, tOrO, ralpha);"), pos(base, "gemm_rs<MmaO"));
  EXPECT_GT(pos(base, "convert<kBf16>(Row{h}, tSrP, tOrPc);"), pos(base, "gemm_rs<MmaO"));
  // Rescale O in stage 1: before the P V GEMM of the previous tile, in the steady block and the drain
  {
    const std::string c = edit(code, "  Compute Rescale O, alpha\n", "  Compute Rescale O, alpha {stage: 1}\n");
    const std::string cu = lower_ok(c, "stage 1 rescale").cuda_source;
    const std::string st = steady_block(cu);
    expect_in_order(st, {"gemm_ss<MmaS", "rescale(tOrO, ralpha);", "gemm_rs<MmaO"}, "steady");
    const size_t rs = pos(st, "gemm_rs<");
    EXPECT_FALSE(rs == npos || contains(st.substr(rs), "tOrO, ralpha")) << "one rescale of O per tile";
    expect_in_order(drain_block(cu), {"rescale(tOrO, ralpha);", "gemm_rs<MmaO"}, "drain");
    EXPECT_FALSE(contains(first_block(cu), "tOrO")) << "stage 0 of the first tile does not touch O";
    // alpha = exp2(-inf) = 0 is folded in the first tile; the steady block's stage 1 reads it first
    EXPECT_TRUE(contains(first_block(cu), "fill(ralpha, 0.f);")) << first_block(cu);
    EXPECT_TRUE(contains(cu, stage1(c, {"  Compute Rescale O, alpha", kPv, kMax})));
  }
  // Convert and Reshape in stage 1: the P of the previous tile is converted right before its GEMM
  {
    std::string c = edit(code, "  Compute Convert P and get Pc bf16\n", "  Compute Convert P and get Pc bf16 {stage: 1}\n");
    c = edit(c, "(MMA_A, MMA_M, MMA_K)\n", "(MMA_A, MMA_M, MMA_K) {stage: 1}\n");
    const std::string cu = lower_ok(c, "stage 1 convert").cuda_source;
    expect_in_order(steady_block(cu), {"gemm_ss<MmaS", "convert<kBf16>(tSrP, tOrPc);", "gemm_rs<MmaO", "rescale(tOrO, ralpha);"}, "steady");
    expect_in_order(drain_block(cu), {"convert<kBf16>(tSrP, tOrPc);", "gemm_rs<MmaO"}, "drain");
    EXPECT_FALSE(contains(first_block(cu), "convert<"));
    EXPECT_TRUE(contains(cu, stage1(c, {"  Compute Convert P and get Pc bf16", "  Reshape Pc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)", kPv, kMax})));
  }
  // {stage: 0} on the accumulating GEMM's successor keeps it in stage 0
  {
    const std::string c = edit(code, "  Compute Max m, m_new\n", "  Compute Max m, m_new {stage: 0}\n");
    const std::string cu = lower_ok(c, "stage 0 max").cuda_source;
    EXPECT_TRUE(contains(cu, stage1(c, {kPv})));
    EXPECT_TRUE(contains(first_block(cu), "copy(Row{h}, rm_new, rm);")) << "stage 0: in the first tile's block (m = -inf folded)";
    expect_in_order(steady_block(cu), {"gemm_rs<MmaO", "convert<kBf16>(Row{h}, tSrP, tOrPc);", "ew<op::MaxOfUpper>(Row{h}, rm, rm_new, rm);"}, "steady");
    EXPECT_FALSE(contains(drain_block(cu), "MaxOfUpper"));
  }
}

TEST(EmitSm90, AsyncStoreOverlapAndScaleComeFromTheTl) {
  const std::string code = plan_code("llama3-8b");  // persistent: O has its own staging tile
  const std::string cu = lower_ok(code, "planner").cuda_source;
  EXPECT_TRUE(contains(cu, "constexpr bool kDeferStoreWait = true;"));
  const std::string sync_store = edit(code, "from register to global {async}", "from register to global");
  EXPECT_TRUE(contains(lower_ok(sync_store, "sync store").cuda_source, "constexpr bool kDeferStoreWait = false;"));
  // no {overlap}: one loop, no first / drain blocks, each GEMM waited for before its result is read
  const std::string plain = lower_ok(edit(code, " {overlap}\n", "\n"), "no overlap").cuda_source;
  for (const char* gone : {"// -- the first key tile", "// -- the last key tile", "any_kv", "gemm_wait<1>", "stage 1, TL"})
    EXPECT_FALSE(contains(plain, gone)) << gone;
  const std::string loop = between(plain, "consumer_registers<", "finish_stores<");
  expect_in_order(loop, {"gemm_ss<MmaS", "gemm_wait<0>(tSrS);", "v.mask_tile_causal", "ew<op::Max>(Row{h}, rm, rm_tile, rm_new);",
                         "rescale(Row{h}, tOrO, ralpha);", "convert<kBf16>", "gemm_rs<MmaO", "ew<op::MaxOfUpper>(rm, rm_new, rm);",
                         "gemm_wait<0>(tOrO, tOrPc);"},
                  "no overlap");
  EXPECT_LT(kernel_lines(plain), kernel_lines(cu)) << "no first / drain blocks";
  // the score factor is the TL's
  const std::string scale = lower_ok(edit(code, "Compute Multiply S, softmax_scale * log2e", "Compute Multiply S, softmax_scale"), "scale").cuda_source;
  EXPECT_TRUE(contains(scale, "kp.scalars[0] = p.softmax_scale;"));
  EXPECT_FALSE(contains(scale, "kLog2e"));
  // the window bounds are the TL's: launch arguments as the planner writes them, constants when the TL has numbers
  const std::string wcode = plan_code("mistral-7b", {{"window", "300,7"}});
  const std::string wrun = lower_ok(wcode, "window").cuda_source;
  for (const char* want : {"make_params(&kp, p, shape, gx * gy * gz, window_left, window_right, &blocks)",
                           "qattn::host::check_launch_args(p, true, false)",
                           "const int window_left = qattn::window_side(p.window_left, p.seqlen_q, p.seqlen_k);",
                           "window_left = p.arg_window_left;", "v.seqlen_q - v.window_left, BN)"})
    EXPECT_TRUE(contains(wrun, want)) << want;
  std::string wtl = wcode;
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"window(window_left, window_right)", "window(300, 7)"}, {"window(window_left, window_right)", "window(300, 7)"},
           {"- window_left) / BN", "- 300) / BN"}, {"+ window_right, BN", "+ 7, BN"}})
    wtl = edit(wtl, from, to);
  const std::string wconst = lower_ok(wtl, "window constant").cuda_source;
  EXPECT_TRUE(contains(wconst, "make_params(&kp, p, shape, gx * gy * gz, 300, 7, &blocks)"));
  EXPECT_FALSE(contains(wconst, "check_launch_args"));
}

// The TL's Hopper schedule (Role statements, {stages}, {overlap}) is what the kernel runs with.
TEST(EmitSm90, TheTlScheduleDrivesTheKernel) {
  const std::string code = plan_code("llama2-7b", {{"mask", "none"}, {"head-dim", "256"}});  // not persistent
  const std::string cu = lower_ok(code, "d256").cuda_source;
  for (const char* want : {"producer_registers<24>();", "consumer_registers<240>();", "using PP = Pingpong<kConsumers, true>;",
                           "const Ring<2, 20480> ringK", "constexpr bool kPersistent = false;", "// -- the first key tile",
                           "PP::wait_turn(cw);"})
    EXPECT_TRUE(contains(cu, want)) << want;
  EXPECT_TRUE(o_in_q(cu)) << "not persistent: O is staged in Q's rows";
  std::string changed = edit(code, "Role producer warpgroups 1 registers 24", "Role producer warpgroups 1 registers 40");
  changed = edit(changed, "Role consumer warpgroups 2 registers 240 pingpong", "Role consumer warpgroups 2 registers 232");
  changed = edit(changed, "Allocate K in shared (BN, d) bf16 {stages: STAGES}", "Allocate K in shared (BN, d) bf16 {stages: 1}");
  changed = edit(changed, "Allocate V in shared (BN, d) bf16 {stages: STAGES}", "Allocate V in shared (BN, d) bf16 {stages: 1}");
  changed = edit(changed, " {overlap}\n", "\n");
  const std::string c2 = lower_ok(changed, "changed").cuda_source;
  for (const char* want : {"producer_registers<40>();", "consumer_registers<232>();", "using PP = Pingpong<kConsumers, false>;",
                           "const Ring<1, 20480> ringK"})
    EXPECT_TRUE(contains(c2, want)) << want;
  for (const char* gone : {"// -- the first key tile", "PP::wait_turn(cw);"}) EXPECT_FALSE(contains(c2, gone)) << gone;
  // a program without Roles (and so without {async} copies) gets the sm90 policy's roles and rings
  std::string no_roles = std::regex_replace(code, std::regex("Role [^\n]*\n| \\{async\\}| \\{wait: [^}]*\\}"), "");
  ASSERT_FALSE(contains(no_roles, "Role ") || contains(no_roles, "async") || contains(no_roles, "wait:")) << no_roles;
  const std::string policy = lower_ok(no_roles, "no roles").cuda_source;
  for (const char* want : {"(the TL states no Role: 24 registers by the sm90 policy)", "consumer_registers<240>();",
                           "using PP = Pingpong<kConsumers, true>;", "ringK.wait(posK);", "ringV.release(posV, tid == 0);"})
    EXPECT_TRUE(contains(policy, want)) << want;
}

// Grid {persistent}: one block per SM walks the tiles; O gets its own staging tile when it fits,
// else it is staged in Q's and the next tile's Q copy waits for the store (issued late).
TEST(EmitSm90, PersistentGridFromTheTl) {
  const std::string code = plan_code("llama3-8b");
  ASSERT_TRUE(contains(code, "b = 0: batch {persistent}\n")) << code;
  const Translation t = lower_ok(code, "llama3-8b");
  EXPECT_TRUE(contains(t.cuda_source, "constexpr bool kPersistent = true;"));
  EXPECT_FALSE(o_in_q(t.cuda_source)) << "32 KB of O staging fit next to Q and the K/V rings";
  EXPECT_FALSE(contains(t.cuda_source, "issuedQ"));
  EXPECT_TRUE(contains(t.info_json, "\"persistent\":true"));
  // d256: Q 64 KB + 2 x 80-row K/V stages leave no room for a separate O tile
  const std::string d256 = edit(plan_code("llama2-7b", {{"head-dim", "256"}}), "b = 0: batch", "b = 0: batch {persistent}");
  const std::string cu = lower_ok(d256, "d256 persistent").cuda_source;
  EXPECT_TRUE(o_in_q(cu));
  EXPECT_TRUE(contains(cu, "constexpr bool kDeferStoreWait = false;"));
  expect_in_order(cu, {"bool issuedQ = false;", "load_tile<80, 256>(ringK", "if (!issuedQ) {", "load_tile<128, 256>(ringQ"}, "late Q");
  expect_in_order(cu, {"store_o<", "ringQ.release(posQ, tid == 0);  // Q is copied once per tile and its buffer stages O"}, "Q after O");
  // the attribute belongs to the Grid
  const std::string misplaced = edit(plan_code("llama2-7b", {{"mask", "none"}}), "Let kv_head = head / (heads_q / heads_kv)",
                                     "Let kv_head = head / (heads_q / heads_kv) {persistent}");
  support::DiagSink d;
  EXPECT_FALSE(xlate(misplaced, d));
  EXPECT_TRUE(has(d, "TL0717")) << d.render();
}

// ---- refusals ----------------------------------------------------------------------------------
// V wider than Q and K (head_dim_v > head_dim_qk): O no longer fits Q's rows, so it stages in a tile of
// its own even where the grid is not persistent, and the shared memory counts it.
TEST(EmitSm90, AWiderVStagesOInItsOwnTile) {
  for (const auto& [flags, persistent] : std::vector<std::pair<std::map<std::string, std::string>, bool>>{
           {{{"head-dim", "128,256"}, {"mask", "none"}}, false}, {{{"head-dim", "64,128"}}, true}}) {
    const std::string code = plan_code("llama2-7b", flags);
    const Translation t = lower_ok(code, flags.at("head-dim"));
    EXPECT_EQ(contains(t.cuda_source, "constexpr bool kPersistent = true;"), persistent) << flags.at("head-dim");
    EXPECT_FALSE(o_in_q(t.cuda_source)) << flags.at("head-dim");
    EXPECT_TRUE(contains(t.kir, "O staging: its own tile (O is wider than Q)")) << t.kir;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(t.cuda_source, m, std::regex(R"(constexpr int kSmemBytes = (\d+);)")));
    EXPECT_LE(std::stol(m[1].str()), 227 * 1024);
  }
}

TEST(EmitSm90, IllegalStageAssignmentsAreRefused) {
  const std::string code = plan_code("llama3-8b");
  // P is read by later stage-0 statements (Exp2 P, RowSum P, Convert), S written by the GEMM before it;
  // the message names the stage-1 statement
  support::DiagSink d;
  EXPECT_FALSE(xlate(edit(code, "  Compute Subtract S, m_new and get P\n", "  Compute Subtract S, m_new and get P {stage: 1}\n"), d));
  const auto* x = test::find(d, "XL0304");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_TRUE(contains(x->message, "stage-1 statement at line " + line_of(code, "  Compute Subtract S, m_new and get P"))) << x->message;
  EXPECT_FALSE(x->hint.empty());
  expect_refused(code, "  Compute Subtract m, m_new and get alpha\n", "  Compute Subtract m, m_new and get alpha {stage: 1}\n", "XL0304");
  // the pending score factor orders like a write of S: the stage-0 Mask and RowMax read it
  expect_refused(code, "  Compute Multiply S, softmax_scale * log2e\n", "  Compute Multiply S, softmax_scale * log2e {stage: 1}\n", "XL0304");
  // the first GEMM runs the pipeline: it stays in stage 0
  expect_refused(code, "{wait: Q, wait: K, release: K}", "{wait: Q, wait: K, release: K, stage: 1}", "XL0304");
  // the checker refuses other stages and {stage} outside an {overlap} loop
  expect_refused(code, "  Compute Rescale O, alpha\n", "  Compute Rescale O, alpha {stage: 2}\n", "TL0718");
  expect_refused(edit(code, " {overlap}\n", "\n"), "  Compute Rescale O, alpha\n", "  Compute Rescale O, alpha {stage: 1}\n", "TL0718");
}

TEST(EmitSm90, SchedulesTheKernelCannotRunAreRefused) {
  const std::string code = plan_code("llama3-8b");
  // tiles: K/V rows the wgmma cannot cover; a block tile that does not split into 64-row consumers
  expect_refused(code, "Const BM = 128, BN = 128", "Const BM = 128, BN = 120", "XL0202");
  expect_refused(code, "Const BM = 128, BN = 128", "Const BM = 96, BN = 128", "XL0202");
  // roles
  expect_refused(edit(code, "registers 232 pingpong", "registers 200 pingpong"), "Role producer warpgroups 1 registers 40",
                 "Role producer warpgroups 2 registers 24", "XL0202");
  expect_refused(code, "Role consumer warpgroups 2 registers 232 pingpong", "Role consumer warpgroups 1 registers 232", "XL0202");
  expect_refused(code, "Allocate V in shared (BN, d) bf16 {stages: STAGES}", "Allocate V in shared (BN, d) bf16 {stages: 1}", "XL0202");
  std::string bm192 = edit(code, "Const BM = 128, BN = 128", "Const BM = 192, BN = 128");
  bm192 = edit(bm192, "Role producer warpgroups 1 registers 40", "Role producer warpgroups 1 registers 32");
  expect_refused(bm192, "Role consumer warpgroups 2 registers 232 pingpong", "Role consumer warpgroups 3 registers 160 pingpong", "XL0202");
  // ... three consumers without ping-pong run
  const std::string three = edit(bm192, "Role consumer warpgroups 2 registers 232 pingpong", "Role consumer warpgroups 3 registers 160");
  EXPECT_TRUE(contains(lower_ok(three, "BM 192").cuda_source, "constexpr int kConsumers = 3, kThreads = 512;"));
  // synchronous copies in a program with Roles (the producer fills shared memory by TMA)
  expect_refused(edit(code, "{wait: Q, wait: K, release: K}", "{wait: Q}"), "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async}",
                 "  Copy K (BN, d) in coordinate [j, 0] from global to shared", "XL0301");
  expect_refused(edit(code, "{wait: Q, wait: K, release: K}", "{wait: K, release: K}"), "[m_block, 0] from global to shared {async}",
                 "[m_block, 0] from global to shared", "XL0301");
  // statements: a second kernel Mask; a score tile at rows other than the work tile's
  expect_refused(code, "  Compute Mask S at [m_block, j] with causal\n", "  Compute Mask S at [m_block, j] with causal\n"
                 "  Compute Mask S at [m_block, j] with causal\n", "XL0301");
  expect_refused(code, "Compute Mask S at [m_block, j]", "Compute Mask S at [j, j]", "XL0301");
  // operands: a register accumulator that is not fp32; a GEMM B operand that is not a ring
  expect_refused(code, "Allocate O in register (BM, d) fp32 init 0", "Allocate O in register (BM, d) bf16 init 0", "XL0303");
  std::string b_reg = edit(code, "Allocate l in register (BM) fp32 init 0\n", "Allocate l in register (BM) fp32 init 0\nAllocate W in register (BN, d) fp32 init 0\n");
  expect_refused(b_reg, "  Compute GEMM Pc, V and", "  Compute Convert W and get W16 bf16\n  Compute GEMM Pc, W16 and", "XL0303");
  // fp8 operands have no wgmma lowering yet
  support::DiagSink d;
  EXPECT_FALSE(xlate(plan_code("llama2-7b", {{"dtype", "fp8_e4m3"}}), d));
  EXPECT_TRUE(has(d, "XL0102")) << d.render();
  EXPECT_FALSE(test::find(d, "XL0102") == nullptr || test::find(d, "XL0102")->hint.empty());
}

// Forms the fixed-order emitter refused that the sm90 lowering now composes as the TL states them.
TEST(EmitSm90, FormsTheOldEmitterRefusedNowLower) {
  // natural exp of the score tile
  const std::string code = plan_code("llama3-8b");
  const std::string e = lower_ok(edit(code, "Compute Exp2 P", "Compute Exp P"), "Exp P").cuda_source;
  EXPECT_TRUE(contains(steady_block(e), "map<op::Exp>(Row{h}, tSrP, tSrP);"));
  EXPECT_TRUE(contains(steady_block(e), "map<op::Exp2>(Row{h}, ralpha, ralpha);"));
  EXPECT_FALSE(contains(steady_block(e), "map<op::Exp2>(Row{h}, tSrP"));
  // a Mask before a Modify, in TL order (softcap then sees the masked -inf)
  const std::string gemma = plan_code("gemma2-9b");
  std::string c = edit(gemma, "  Compute Modify S at [m_block, j] with softcap\n", "");
  c = edit(c, "  Compute Mask S at [m_block, j] with causal\n", "  Compute Mask S at [m_block, j] with causal\n  Compute Modify S at [m_block, j] with softcap\n");
  const std::string mm = steady_block(lower_ok(c, "Mask before Modify").cuda_source);
  EXPECT_LT(pos(mm, "v.mask_tile_causal(tSrS"), pos(mm, "v.modify_tile_softcap(tSrS"));
  // a score factor that is not a positive scalar is an element-wise multiply where the TL has it
  const std::string neg = lower_ok(edit(gemma, "Compute Multiply S, log2e", "Compute Multiply S, 0 - log2e"), "negative factor").cuda_source;
  expect_in_order(steady_block(neg), {"v.modify_tile_softcap(tSrS, rows, j, scale_S);", "ew_scalar<op::Mul>(tSrS, 0.0f - qattn::kLog2e, tSrS);",
                                      "v.mask_tile_causal(tSrS"},
                  "negative factor");
  EXPECT_FALSE(contains(neg, "p.scalars[1]"));
}

// The Hopper schedule on an mma.sync target is refused at its statement, not ignored.
TEST(EmitSm90, HopperScheduleOnAnAmpereTargetIsRefused) {
  const std::string code = edit(plan_code("llama3-8b", {}, "a100"), "\nAllocate ",
                                "\nRole producer warpgroups 1 registers 24\nRole consumer warpgroups 1 registers 240\nAllocate ");
  support::DiagSink d;
  EXPECT_FALSE(translate_text(code, plan::make_target(*hw::find_gpu("a100")), d, "test.tl"));
  const auto* x = test::find(d, "XL0301");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_TRUE(contains(x->hint, "--gpu h100")) << x->hint;
}

// ---- variants, packing, the kernel IR -----------------------------------------------------------
// Score declarations: each Modify statement is a Scope member applied where the TL has it, with the
// pending factor before it; the factor after it is a second kernel scalar.
TEST(EmitSm90, SoftcapLowersIntoTheScope) {
  const std::string code = plan_code("gemma2-9b");  // softcap 50
  const std::string cu = lower_ok(code, "gemma2-9b").cuda_source;
  for (const char* want : {"__device__ float score_softcap(float score, int q_idx, int kv_idx) const { return (softcap) * (qattn::fast_tanh(",
                           "float softcap;  // TL builtin, a launch argument", "softcap = p.softcap;",
                           "qattn::host::check_launch_args(p, false, true)",
                           "__device__ void modify_tile_softcap(float (&s)[N], const RowMap<P>& rows, int j, float xscale) const {",
                           "x = score_softcap(x * xscale, q_idx, kv_idx);", "#include \"qattn/scalar.cuh\"",
                           "kp.scalars[0] = p.softmax_scale;", "kp.scalars[1] = qattn::kLog2e;"})
    EXPECT_TRUE(contains(cu, want)) << want;
  expect_in_order(steady_block(cu), {"gemm_wait<1>(tSrS);", "v.modify_tile_softcap(tSrS, rows, j, scale_S);", "v.mask_tile_causal(tSrS, rows, j);",
                                     "row_max<false>(Row{h}, tSrS, rm_tile, scale_S_2);"},
                  "softcap");
  // a plain program has no declarations
  const std::string plain = lower_ok(plan_code("llama3-8b"), "plain").cuda_source;
  EXPECT_FALSE(contains(plain, "qattn/variant.cuh"));
  EXPECT_FALSE(contains(plain, "modify_tile_"));
}

// Mask declarations: keep/needs/mask_tile per Mask statement, a `full when` clause lets whole tiles
// skip the element test, `{skip: M}` makes visible() test the `empty when` clause; aux globals bind
// to p.aux[].
TEST(EmitSm90, MaskDeclarationsSkipTilesAndReadAuxInputs) {
  const std::string code = plan_code("llama3-8b", {{"document", "true"}, {"alibi", "true"}});
  ASSERT_TRUE(contains(code, "{skip: document, overlap}")) << code;
  const Translation t = lower_ok(code, "document");
  const std::string& cu = t.cuda_source;
  for (const char* want : {"__device__ bool mask_document(int q_idx, int kv_idx) const {",
                           "__device__ bool empty_document(int q_lo, int q_hi, int kv_lo, int kv_hi) const {",
                           "__device__ bool full_document(int q_lo, int q_hi, int kv_lo, int kv_hi) const {",
                           "return k < sk_ && mask_document(q, k); }", "return last_col >= sk_ || !full_document(q_lo, q_hi, col0, last_col);",
                           "__device__ bool visible(int j) const {", "return !empty_document(row0, row0 + 128 - 1, col0, col0 + 128 - 1);",
                           "const float* __restrict__ aux_alibi_slopes;", "aux_seg_q = static_cast<const int*>(p.aux[",
                           "aux_alibi_slopes = static_cast<const float*>(p.aux[", "x = score_alibi(x * xscale, q_idx, kv_idx);",
                           "check_fwd_params(params, 128, 128, 2, 2, false, 7u)"})
    EXPECT_TRUE(contains(cu, want)) << want;
  expect_in_order(steady_block(cu), {"v.modify_tile_alibi(tSrS, rows, j, scale_S);", "v.mask_tile_causal(tSrS, rows, j);",
                                     "v.mask_tile_document(tSrS, rows, j);"},
                  "document");
  EXPECT_TRUE(contains(t.info_json, "\"aux\":[{\"name\":\"")) << t.info_json;
  EXPECT_TRUE(contains(lower_ok(plan_code("llama3-8b"), "plain").cuda_source, "__device__ bool visible(int) const { return true; }"));
}

// GQA packing: a spec with a short query length plans `{pack: heads_q / heads_kv}`; the kernel loads
// Q through the packed map and stores O with kPack; other pack factors and mma.sync are refused.
TEST(EmitSm90, GqaPackingFromTheTl) {
  const std::string code = plan_code("llama3-8b", {{"seqlen", "32/4096"}});  // 128 packed rows: two consumer warpgroups
  ASSERT_TRUE(contains(code, "with offset [b, kv_head] {pack: heads_q / heads_kv}")) << code;
  const std::string cu = lower_ok(code, "packed").cuda_source;
  for (const char* want : {"constexpr bool kPack = true;", "load_tile_packed<128, 128>(ringQ, posQ, &p.tma_q, sQ, v.m_block * BM, v.kv_head, v.b, leader, p.pack);",
                           "store_o<128, 128, kBf16, kPack, kPersistent, kDeferStoreWait>(tOrO, sO, rows, tid, &p.tma_o, v.kv_head, v.b);",
                           "qattn::cdiv(qattn::cdiv((v.m_block + 1) * BM, qattn::floordiv(v.heads_q, v.heads_kv))",
                           "m_block = t.m_block; kv_head = t.head; b = t.batch;"})
    EXPECT_TRUE(contains(cu, want)) << want;
  EXPECT_FALSE(contains(cu, "load_tile<128, 128>(ringQ"));
  // decoding (16 queries x 4 heads = 64 packed rows): one 64-row tile on one consumer warpgroup (plan::decode_tile)
  const std::string dec = lower_ok(plan_code("llama3-8b", {{"seqlen", "16/4096"}}), "decoding").cuda_source;
  for (const char* want : {"constexpr int kConsumers = 1, kThreads = 256;", "load_tile_packed<64, 128>(ringQ, posQ, &p.tma_q, sQ, v.m_block * BM, v.kv_head, v.b, leader, p.pack);",
                           "store_o<64, 128, kBf16, kPack, kPersistent, kDeferStoreWait>(tOrO, sO, rows, tid, &p.tma_o, v.kv_head, v.b);"})
    EXPECT_TRUE(contains(dec, want)) << want;
  const std::string plain = lower_ok(plan_code("llama3-8b"), "plain").cuda_source;
  EXPECT_TRUE(contains(plain, "constexpr bool kPack = false;"));
  EXPECT_FALSE(contains(plain, "load_tile_packed"));
  // a pack factor the kernel does not implement (the same value, another expression)
  std::string other = code;
  for (size_t at; (at = other.find("{pack: heads_q / heads_kv}")) != npos;) other.replace(at, 26, "{pack: heads_q / heads_kv / 1}");
  support::DiagSink d;
  EXPECT_FALSE(xlate(other, d));
  ASSERT_TRUE(has(d, "XL0202")) << d.render();
  EXPECT_FALSE(test::find(d, "XL0202")->hint.empty());
  // packing on an mma.sync target (tests/tl/gqa_packed.tl interprets): refused at the attribute
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/gqa_packed.tl");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string tl = edit(ss.str(), "seqlen_k, d\n", "seqlen_k, d = 64\n");  // the translator builds the head dim in
  tl = edit(tl, "Const BM = 16, BN = 16", "Const BM = 64, BN = 64");  // 4 warps of 16 rows
  support::DiagSink d2;
  EXPECT_FALSE(translate_text(tl, plan::make_target(*hw::find_gpu("a100")), d2, "gqa_packed.tl"));
  const auto* x = test::find(d2, "XL0301");
  ASSERT_NE(x, nullptr) << d2.render();
  EXPECT_TRUE(contains(x->hint, "--gpu h100")) << x->hint;
}

// Split keys written in TL (docs/tl.md, "Splitting the keys"; spec split_keys): the planner's fourth Grid
// axis and [b, split, kv_head] offsets lower to a tile scheduler that folds the part into the batch
// axis, a key loop over the part's tiles, O and LSE stored at entry b * splits + split, the launch's
// tile count times splits and the ABI 8 check; the same program under a causal mask, and the spec
// with one, are refused (the lowered causal split kernel hung on an H200).
TEST(EmitSm90, SplitKeysFromTheTl) {
  const std::map<std::string, std::string> flags{{"mask", "none"}, {"seqlen", "32/4096"}, {"kv-cache", "paged"}, {"split-keys", "true"}};
  const std::string code = plan_code("llama3-8b", flags);
  for (const char* want : {", page_size, pages, splits", ", b = 0: batch, split = 0: splits", "Let tiles_per_split = cdiv(cdiv(seqlen_k, BN), splits)",
                           "Allocate O in global (seqlen_q, d) bf16 with offset [b, split, kv_head] {pack: heads_q / heads_kv}",
                           "Allocate LSE in global (seqlen_q) fp32 with offset [b, split, kv_head] {pack: heads_q / heads_kv}",
                           "for j = split * tiles_per_split: min(cdiv(seqlen_k, BN), (split + 1) * tiles_per_split)"})
    EXPECT_TRUE(contains(code, want)) << want << "\n" << code;
  const Translation t = lower_ok(code, "split keys");
  const std::string& cu = t.cuda_source;
  for (const char* want : {"constexpr bool kSplit = true;", "m_block = t.m_block; kv_head = t.head; b = t.batch; split = t.split;",
                           "tile_coord<128, kReverseM, kPack, kSplit>(tile, p)", "splits = (p.splits > 1 ? p.splits : 1);",
                           "const int j_lo = qattn::imax(0, v.split * v.tiles_per_split), j_hi = qattn::imin(qattn::cdiv(v.seqlen_k, BN), (v.split + 1) * v.tiles_per_split);",
                           "&p.tma_o, v.kv_head, v.b * v.splits + v.split);", "store_rows(p.lse, rLSE, rows, v.kv_head, v.b * v.splits + v.split, p.heads_q, p.seqlen_q);",
                           "gz = batch * 1LL * (splits);", "3u, true); st != QATTN_OK)", "\"splits\":true",
                           "load_tile_packed<128, 128>(ringQ, posQ, &p.tma_q, sQ, v.m_block * BM, v.kv_head, v.b, leader, p.pack);"})
    EXPECT_TRUE(contains(cu, want)) << want;
  EXPECT_TRUE(contains(t.kir, "split keys: the parts folded into the batch axis")) << t.kir;
  // the plain kernel: no split axis, the same scheduler call with kSplit false
  const std::string plain = lower_ok(plan_code("llama3-8b", {{"mask", "none"}, {"seqlen", "32/4096"}, {"kv-cache", "paged"}}), "plain").cuda_source;
  EXPECT_TRUE(contains(plain, "constexpr bool kSplit = false;"));
  EXPECT_FALSE(contains(plain, "t.split"));
  // the number of parts fixed in the TL (the launch could not pass it), or no Grid axis over the parts
  expect_refused(code, ", pages, splits\n", ", pages, splits = 4\n", "XL0203");
  std::string three = code;
  three.replace(three.find(", split = 0: splits"), 19, "");
  three.replace(three.find("Let tiles_per_split"), 19, "Let split = 0\nLet tiles_per_split");
  expect_refused(three, "Let split = 0", "Let split = 0", "XL0203");
  // under a causal mask (the planner's TL): the part's tiles within the mask's, the mask applied per
  // part; the loop bound is the one ptxas once miscompiled through cdiv (tests/gpu/intmath_check.cu)
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  support::DiagSink d;
  ASSERT_TRUE(spec::apply_flags(s, {{"seqlen", "4/4096"}, {"split-keys", "true"}, {"gpu", "h100"}}, d)) << d.render();
  ASSERT_TRUE(spec::validate(s, d)) << d.render();
  const std::string causal = plan_code("llama3-8b", {{"seqlen", "4/4096"}, {"split-keys", "true"}});
  EXPECT_TRUE(contains(causal, " with mask causal\n")) << causal;
  EXPECT_TRUE(contains(causal, "for j = split * tiles_per_split: min(min(cdiv(seqlen_k, BN), cdiv(cdiv((m_block + 1) * BM, "
                               "heads_q / heads_kv) + seqlen_k - seqlen_q, BN)), (split + 1) * tiles_per_split)")) << causal;
  const std::string ccu = lower_ok(causal, "causal split keys").cuda_source;
  for (const char* want : {"constexpr bool kSplit = true;", "constexpr bool kReverseM = true;", "v.mask_tile_causal(tSrS, rows, j);",
                           "j_hi = qattn::imin(qattn::imin(qattn::cdiv(v.seqlen_k, BN), qattn::cdiv(qattn::cdiv((v.m_block + 1) * BM, "
                           "qattn::floordiv(v.heads_q, v.heads_kv)) + v.seqlen_k - v.seqlen_q, BN)), (v.split + 1) * v.tiles_per_split);"})
    EXPECT_TRUE(contains(ccu, want)) << want << "\n" << ccu;
}

// Translation::kir: the kernel IR the CUDA is emitted from, naming every statement of the loop.
TEST(EmitSm90, TheKernelIrNamesTheLoop) {
  for (const auto& [preset, flags] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"llama3-8b", {}}, {"llama2-7b", {{"mask", "none"}, {"lse", "true"}}}, {"gemma2-9b", {}}}) {
    const std::string code = plan_code(preset, flags);
    const Translation t = lower_ok(code, preset);
    ASSERT_FALSE(t.kir.empty()) << preset;
    EXPECT_EQ(t.kir.rfind("# kernel IR", 0), 0u) << t.kir;
    EXPECT_TRUE(contains(t.kir, "kernel " + t.kernel_name + "  family wgmma  arch sm90")) << t.kir;
    expect_in_order(t.kir, {"\n  first\n", "\n  steady\n", "\n  drain"}, "the loop's blocks");
    const std::vector<int> loop = stmt_lines(code, true);
    ASSERT_GE(loop.size(), 18u) << preset;
    for (int line : loop) {
      const std::string n = std::to_string(line);
      EXPECT_TRUE(contains(t.kir, "TL " + n + ":") || contains(t.kir, "[TL " + n + "]")) << preset << ": TL line " << n << "\n" << t.kir;
    }
  }
}

}  // namespace
}  // namespace qattn::backend
