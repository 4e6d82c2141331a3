// Stage 2 for Hopper (sm90a): TL code in the wgmma form (GEMM operands read from shared memory,
// the schedule of docs/tl.md "Hopper schedule") -> a Traits struct and an instantiation of the
// warp-specialised kernel of device/qattn/sm90/fwd.cuh (TMA + mbarrier rings, wgmma, setmaxnreg).
//
// The TL decides: tile sizes (BM, BN from the shared Allocates), the ring depth ({stages} or
// STAGES), the roles and their registers (Role statements), ping-pong and the GEMM/softmax overlap,
// the loop bounds (whole tiles outside them are never loaded), the mask, the softmax factor, LSE.
// The translator decides: the wgmma atoms (N = BN for S = Q K^T, N = d_v for O += P V), the 128-byte
// swizzle of every tile, the tensor maps, and checks that the loop body is the online-softmax form
// the kernel implements (anything else is XL0301 with the form it expects).
#include <algorithm>

#include "backend/lowering.h"
#include "tl/printer.h"

namespace qattn::backend::detail {
namespace {

std::string op_list(const std::vector<std::string>& ops) {
  std::string s;
  for (const auto& o : ops) s += (s.empty() ? "" : ", ") + o;
  return s;
}

// wgmma atoms exist for N = 8..256 in steps of 8 (CuTe's MMA_64xNx16 family).
bool wgmma_n_ok(int n) { return n >= 8 && n <= 256 && n % 8 == 0; }

}  // namespace

bool Lowering::analyze_sm90() {
  const support::SrcLoc at = loop_ ? loop_->loc : (const_stmt_ ? const_stmt_->loc : support::SrcLoc{});
  if (!loop_) {
    diags_.error("XL0302", {}, "the program has no loop over K/V tiles", "the sm90 kernel streams K and V tiles in one `for j = ...` loop");
    return false;
  }
  // ---- roles (TL Role statements; defaults when the program states none) ----
  sm90_.consumers = tile_m_ / 64;
  if (tile_m_ % 64 != 0 || sm90_.consumers < 1 || sm90_.consumers > 3) {
    diags_.error("XL0202", at, "BM = " + std::to_string(tile_m_) + " rows cannot be split over 64-row consumer warpgroups",
                 "on sm90 BM is 64, 128 or 192 (each consumer warpgroup owns 64 rows of the wgmma tile)");
    return false;
  }
  sm90_.producer_regs = sm90_.consumers == 3 ? 32 : 24;
  sm90_.consumer_regs = sm90_.consumers == 3 ? 160 : 240;
  sm90_.pingpong = sm90_.consumers == 2;
  sm90_.overlap = true;
  if (!apply_schedule_sm90(at)) return false;
  if (stages_ < 1 || stages_ > 4) {
    diags_.error("XL0202", at, std::to_string(stages_) + " K/V stages are not lowered", "use 1 to 4 stages");
    return false;
  }
  threads_ = 128 * (1 + sm90_.consumers);
  // ---- tiles ----
  if (!shared_.count("K") || !shared_.count("V") || !shared_.count("Q")) {
    diags_.error("XL0301", at, "the sm90 kernel stages Q, K and V through shared memory",
                 "allocate `Q in shared (BM, d)`, `K in shared (BN, d)`, `V in shared (BN, d)`");
    return false;
  }
  sm90_.bn = shared_.at("K").rows;
  if (shared_.at("V").rows != sm90_.bn || !wgmma_n_ok(sm90_.bn) || sm90_.bn % 16 != 0) {
    diags_.error("XL0202", at, "K/V tiles of " + std::to_string(sm90_.bn) + " rows are not lowered",
                 "BN must be a multiple of 16 up to 256 (the N of the S = Q K^T wgmma), the same for K and V");
    return false;
  }
  if (!wgmma_n_ok(d_v_) || d_v_ > 256 || d_qk_ > 256 || d_v_ > (d_qk_ + 63) / 64 * 64) {
    diags_.error("XL0202", at, "head dims (" + std::to_string(d_qk_) + ", " + std::to_string(d_v_) + ") are not lowered on sm90",
                 "d_qk and d_v up to 256, d_v a multiple of 8 and not above d_qk rounded up to 64");
    return false;
  }
  // ---- the loop body: the online-softmax form ----
  const std::vector<std::string> want = {"GEMM",   "Multiply", "RowMax",  "Max", "Subtract", "Exp2",    "Subtract", "Exp2",
                                         "RowSum", "Rescale",  "Add",     "Rescale", "Convert", "Reshape", "GEMM",    "Max"};
  std::vector<std::string> got;
  for (const auto& s : loop_->loop.body) {
    if (s.kind == tl::Stmt::Kind::Copy || s.kind == tl::Stmt::Kind::Comment || s.kind == tl::Stmt::Kind::Blank) continue;
    if (s.kind == tl::Stmt::Kind::Reshape) {
      got.push_back("Reshape");
      continue;
    }
    if (s.kind != tl::Stmt::Kind::Compute) {
      diags_.error("XL0301", s.loc, "this statement is not lowered inside the sm90 main loop",
                   "the loop body holds the K/V Copies, the GEMMs, the Mask and the online-softmax Computes");
      return false;
    }
    const auto& c = s.compute;
    if (c.op == "Mask") {
      if (c.mask.kind == tl::MaskSpec::Kind::Named) {
        diags_.error("XL0301", s.loc, "Mask/Score declarations are not lowered on sm90 yet",
                     "use the sm80 path for custom variants on Hopper (--gpu a100), or a built-in mask");
        return false;
      }
      if (mask_stmt_) {
        diags_.error("XL0301", s.loc, "a second Mask in the loop", "one Mask statement per score tile");
        return false;
      }
      mask_stmt_ = &s;
      continue;
    }
    if (c.op == "Modify") {
      diags_.error("XL0301", s.loc, "score modifications are not lowered on sm90 yet",
                   "use the sm80 path for Score declarations on Hopper (--gpu a100)");
      return false;
    }
    std::string op = c.op == "Exp" ? "Exp2" : c.op;
    if (c.op == "Exp") sm90_.natural_exp = true;
    got.push_back(op);
    if (c.op == "Multiply" && got.size() == 2) scale_stmt_ = &s;
  }
  if (got != want) {
    diags_.error("XL0301", loop_->loc, "the loop body is not the online-softmax form the sm90 kernel implements: " + op_list(got),
                 "expected the Computes " + op_list(want) + " (in this order; Mask after Multiply), as `qattn plan --gpu h100` writes");
    return false;
  }
  if (!scale_stmt_ || scale_stmt_->compute.operands.size() != 2) {
    diags_.error("XL0301", loop_->loc, "the score tile is not scaled by one factor", "write `Compute Multiply S, softmax_scale * log2e`");
    return false;
  }
  if (sm90_.natural_exp) {
    diags_.error("XL0301", loop_->loc, "the sm90 kernel computes the softmax with Exp2",
                 "multiply S by `softmax_scale * log2e` and use Exp2 (as `qattn plan --gpu h100` writes)");
    return false;
  }
  return analyze_smem_sm90();
}

bool Lowering::analyze_smem_sm90() {
  const int eb = 2;
  const int dqkp = (d_qk_ + 63) / 64 * 64, dvp = (d_v_ + 63) / 64 * 64;
  smem_bytes_ = 1024 + int64_t(tile_m_) * dqkp * eb + int64_t(stages_) * sm90_.bn * (dqkp + dvp) * eb + 8 * (3 + 4 * stages_);
  // Persistent: O gets its own staging tile when it fits, so the next tile's Q load does not wait
  // for this tile's epilogue (fwd.cuh, SmemPlan::kO).
  const int64_t o_bytes = int64_t(tile_m_) * dvp * eb;
  sm90_.separate_o = sm90_.persistent && smem_bytes_ + o_bytes <= target_.smem_per_block;
  if (sm90_.separate_o) smem_bytes_ += o_bytes;
  if (smem_bytes_ > target_.smem_per_block) {
    diags_.error("XL0202", const_stmt_ ? const_stmt_->loc : support::SrcLoc{},
                 "the tiles need " + std::to_string(smem_bytes_ / 1024) + " KB of shared memory; " + target_.name + " has " +
                     std::to_string(target_.smem_per_block / 1024) + " KB per block",
                 "lower BN or STAGES");
    return false;
  }
  const int regs = 128 * (sm90_.producer_regs + sm90_.consumers * sm90_.consumer_regs);
  if (regs > 65536) {
    diags_.error("XL0202", at_role(), "the roles ask for " + std::to_string(regs) + " registers; an SM has 65536",
                 "lower the registers of a Role");
    return false;
  }
  return true;
}

support::SrcLoc Lowering::at_role() const { return const_stmt_ ? const_stmt_->loc : support::SrcLoc{}; }

// The program's Hopper schedule (Role statements, {stages}, {async}, {overlap}; the checker has
// verified their consistency, CheckInfo::schedule) replaces the defaults. What the kernel of
// device/qattn/sm90/fwd.cuh cannot run is XL0202 with the nearest form it can.
bool Lowering::apply_schedule_sm90(support::SrcLoc at) {
  const tl::ScheduleInfo& sc = info_.schedule;
  sm90_.persistent = sc.persistent;  // Grid {persistent}
  if (!sc.present) return true;  // no Role statements: the defaults above
  if (sc.producer_wg != 1) {
    diags_.error("XL0202", at, std::to_string(sc.producer_wg) + " producer warpgroups are not lowered",
                 "the sm90 kernel has one producer warpgroup (its thread 0 issues every TMA): `Role producer warpgroups 1 ...`");
    return false;
  }
  if (sc.consumer_wg != sm90_.consumers) {
    diags_.error("XL0202", at,
                 std::to_string(sc.consumer_wg) + " consumer warpgroups do not split BM = " + std::to_string(tile_m_) + " rows",
                 "each consumer warpgroup owns 64 rows of the query tile: `Role consumer warpgroups " +
                     std::to_string(sm90_.consumers) + " ...` for BM = " + std::to_string(tile_m_));
    return false;
  }
  if (sc.pingpong && sc.consumer_wg != 2) {
    diags_.error("XL0202", at, "ping-pong over " + std::to_string(sc.consumer_wg) + " consumer warpgroups is not lowered",
                 "the kernel alternates exactly two consumer warpgroups; drop `pingpong` or use BM = 128");
    return false;
  }
  for (const char* b : {"Q", "K", "V"}) {
    if (!sc.async_buffers.count(b)) {
      diags_.error("XL0301", at, std::string("the copy into shared ") + b + " is not `{async}`",
                   "in a program with Roles the producer fills Q, K and V with TMA: mark their global -> shared Copies `{async}`");
      return false;
    }
  }
  const auto stages_of = [&](const char* b) { auto it = sc.stages.find(b); return it == sc.stages.end() ? 1 : it->second; };
  if (stages_of("K") != stages_of("V")) {
    diags_.error("XL0202", at,
                 "K has " + std::to_string(stages_of("K")) + " stages and V " + std::to_string(stages_of("V")),
                 "the kernel keeps K and V in rings of one depth: give both the same `{stages: N}`");
    return false;
  }
  sm90_.producer_regs = sc.producer_regs;
  sm90_.consumer_regs = sc.consumer_regs;
  sm90_.pingpong = sc.pingpong;
  sm90_.overlap = sc.overlap;
  stages_ = stages_of("K");
  return true;
}

std::string Lowering::sm90_mask_kind() const {
  if (!mask_stmt_) return "none";
  return tl::to_string(mask_stmt_->compute.mask.kind);
}

void Lowering::emit_sm90_preamble(Writer& w) {
  w.line("// Generated by qattn stage 2 (src/backend/emit_sm90.cc) from TL kernel `" + tl_kernel_name_ + "` for sm90a (" +
         target_.name + "). Do not edit: change the TL and translate again.");
  w.line("#include \"qattn/qattn.h\"");
  w.line("#include \"qattn/host.cuh\"");
  w.line("#include \"qattn/intmath.cuh\"");
  w.line("#include \"qattn/sm90/fwd.cuh\"");
  w.line();
  w.line("#pragma GCC visibility push(hidden)  // only the C ABI below is exported");
  w.line("namespace qattn_generated {");
  w.line();
  emit_tl_header(w);
  w.line();
}

void Lowering::emit_sm90_kernel(Writer& w) {
  const bool bf16 = elem_ == tl::DType::BF16;
  const std::string ty = bf16 ? "BF16BF16" : "F16F16";
  const std::string gmma = "cute::SM90::GMMA::";
  w.line("// ---- what the TL does not state, chosen for sm90a ----");
  w.line("// Roles: 1 producer warpgroup (TMA) + " + std::to_string(sm90_.consumers) + " consumer warpgroups (wgmma), " +
         std::to_string(threads_) + " threads; setmaxnreg " + std::to_string(sm90_.producer_regs) + " / " +
         std::to_string(sm90_.consumer_regs));
  w.open("struct Traits {");
  w.line("using Element = " + std::string(cute_type(elem_)) + ";");
  w.line(std::string("static constexpr bool kBf16 = ") + (bf16 ? "true" : "false") + ";");
  w.line("static constexpr int kBM = " + tile_m_expr_ + ", kBN = " + shared_.at("K").rows_expr + ";");
  w.line("static constexpr int kDqk = " + std::to_string(d_qk_) + ", kDv = " + std::to_string(d_v_) + ";");
  w.line("static constexpr int kStages = " + std::to_string(stages_) + ";  // TL {stages} of K and V");
  w.line("static constexpr int kConsumers = " + std::to_string(sm90_.consumers) + ", kProducerRegs = " +
         std::to_string(sm90_.producer_regs) + ", kConsumerRegs = " + std::to_string(sm90_.consumer_regs) + ";  // TL Role");
  w.line(std::string("static constexpr bool kPingpong = ") + (sm90_.pingpong ? "true" : "false") + ";  // TL Role consumer ... pingpong");
  w.line(std::string("static constexpr bool kOverlap = ") + (sm90_.overlap ? "true" : "false") + ";  // TL for ... {overlap}");
  w.line(std::string("static constexpr bool kPersistent = ") + (sm90_.persistent ? "true" : "false") +
         ";  // TL Grid ... {persistent}: one block per SM walks the grid");
  w.line(std::string("static constexpr bool kSeparateO = ") + (sm90_.separate_o ? "true" : "false") +
         ";  // O staged in its own shared tile (else in the Q tile)");
  const bool causal = mask_.kind == tl::MaskSpec::Kind::Causal || mask_.kind == tl::MaskSpec::Kind::CausalTopLeft;
  w.line(std::string("static constexpr bool kReverseM = ") + (causal ? "true" : "false") +
         ";  // causal: the longest rows start first");
  w.line(std::string("static constexpr bool kLse = ") + (has_lse_ ? "true" : "false") + ";");
  w.line("// S = Q K^T: both operands K-major in shared memory; O += P V: P in registers, V MN-major");
  w.line("using MmaQK = " + gmma + "MMA_64x" + std::to_string(sm90_.bn) + "x16_F32" + ty + "_SS<" + gmma + "Major::K, " + gmma +
         "Major::K>;");
  w.line("using MmaPV = " + gmma + "MMA_64x" + std::to_string(d_v_) + "x16_F32" + ty + "_RS<" + gmma + "Major::K, " + gmma +
         "Major::MN>;");
  // Loop bounds: the TL for-loop's lo and hi, over the launch's dims.
  auto dims_locals = [&](Writer& w2) {
    w2.line("[[maybe_unused]] const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k, heads_q = p.heads_q;");
  };
  comment_stmt(w, *loop_, "tiles outside [lo, hi) are never loaded");
  w.open("__device__ static int n_begin(int m_block, qattn::sm90::Params const& p) {");
  dims_locals(w);
  w.line("return qattn::imax(0, " + cpp_int(loop_->loop.lo) + ");");
  w.close();
  w.open("__device__ static int n_end(int m_block, qattn::sm90::Params const& p) {");
  dims_locals(w);
  w.line("return " + cpp_int(loop_->loop.hi) + ";");
  w.close();
  // The mask: element predicate and the per-tile test (64 query rows of one warpgroup x BN keys).
  const std::string mk = sm90_mask_kind();
  if (mask_stmt_) comment_stmt(w, *mask_stmt_);
  w.open("__device__ static bool keep(int q, int k, qattn::sm90::Params const& p) {");
  w.line("[[maybe_unused]] const int off = p.seqlen_k - p.seqlen_q;");
  std::string pred = "k < p.seqlen_k";
  if (mk == "causal") pred += " && k <= q + off";
  if (mk == "causal_top_left") pred += " && k <= q";
  if (mk == "window") pred += " && k >= q + off - p.window_left && k <= q + off + p.window_right";
  w.line("return " + pred + ";");
  w.close();
  w.open("__device__ static bool tile_needs_mask(int row0, int n, qattn::sm90::Params const& p) {");
  w.line("[[maybe_unused]] const int off = p.seqlen_k - p.seqlen_q;");
  w.line("const int col0 = n * kBN, last_col = col0 + kBN - 1;");
  w.line("[[maybe_unused]] const int last_row = row0 + 63;");
  std::string need = "last_col >= p.seqlen_k";
  if (mk == "causal") need += " || last_col > row0 + off";
  if (mk == "causal_top_left") need += " || last_col > row0";
  if (mk == "window") need += " || last_col > row0 + off + p.window_right || col0 < last_row + off - p.window_left";
  w.line("return " + need + ";");
  w.close();
  w.line("template <int NS> __device__ static void modify(float (&)[NS], int, int, int, int, int, qattn::sm90::Params const&) {}");
  w.close("};");
  w.line();
  w.line("// TL Kernel " + tl_kernel_name_ + ": the body is device/qattn/sm90/fwd.cuh, statement by statement:");
  w.line("//   Copy Q/K/V ... {async}   producer warpgroup, TMA into the rings (tma_load_tile)");
  w.line("//   GEMM Q, K^T -> S         gemm_ss<MmaQK> (wgmma, shared x shared)");
  w.line("//   Multiply / Mask / RowMax / Max / Subtract / Exp2 / RowSum / Rescale / Add: online_softmax, mask_tile");
  w.line("//   Convert + Reshape P      convert_p (the accumulator is the register-A operand)");
  w.line("//   GEMM P, V -> O           gemm_rs<MmaPV> (wgmma, registers x shared)");
  w.line("//   Normalize O, Copy O      epilogue: staged in shared memory, TMA store; LSE from registers");
  w.line("__global__ void __launch_bounds__(" + std::to_string(threads_) + ", 1) " + kernel_name_ +
         "(const __grid_constant__ qattn::sm90::Params p) {");
  w.line("  qattn::sm90::fwd_body<Traits>(p);");
  w.line("}");
  w.line("constexpr int kThreads = " + std::to_string(threads_) + ";");
  w.line("constexpr int kSmemBytes = qattn::sm90::SmemPlan<Traits>::kBytes;");
  w.line("static_assert(kSmemBytes == " + std::to_string(smem_bytes_) + ", \"the translator's shared-memory plan\");");
  w.line("using Element = Traits::Element;");
  w.line("using ElementO = Traits::Element;");
}

void Lowering::emit_sm90_launch(Writer& w) {
  w.line("qattn::sm90::Params kp;");
  w.line("const bool bf16 = " + std::string(elem_ == tl::DType::BF16 ? "true" : "false") + ";");
  w.line("if (!qattn::sm90::make_tile_map(&kp.tma_q, p.q, bf16, " + std::to_string(d_qk_) +
         ", p.seqlen_q, p.heads_q, p.batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride, Traits::kBM) ||");
  w.line("    !qattn::sm90::make_tile_map(&kp.tma_k, p.k, bf16, " + std::to_string(d_qk_) +
         ", p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride, Traits::kBN) ||");
  w.line("    !qattn::sm90::make_tile_map(&kp.tma_v, p.v, bf16, " + std::to_string(d_v_) +
         ", p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride, Traits::kBN) ||");
  w.line("    !qattn::sm90::make_tile_map(&kp.tma_o, p.o, bf16, " + std::to_string(d_v_) +
         ", p.seqlen_q, p.heads_q, p.batch, p.o_row_stride, p.o_head_stride, p.o_batch_stride, 64))");
  w.line("  return fail(QATTN_ERR_LAUNCH, \"cuTensorMapEncodeTiled refused a tensor (strides must be multiples of 16 bytes below 2^40; the driver must support TMA)\");");
  w.line("kp.lse = " + std::string(has_lse_ ? "p.lse" : "nullptr") + ";");
  w.line("// The TL Grid (m_block, head, b) as one grid axis, m_block fastest (fwd.cuh, tile_coord).");
  w.line("if (gx * gy * gz > 2147483647LL) return fail(QATTN_ERR_SHAPE, \"%lld blocks exceed 2^31\", gx * gy * gz);");
  w.line("kp.num_tiles = int(gx * gy * gz);");
  if (sm90_.persistent) {
    w.line("// TL Grid {persistent}: one block per SM (at most one per tile) walks the tiles.");
    w.line("const int sms = qattn::host::sm_count();");
    w.line("const long long blocks = sms > 0 && sms < kp.num_tiles ? sms : kp.num_tiles;");
    w.line("kp.tile_counter = qattn::host::tile_counter();");
    w.line("if (!kp.tile_counter) return fail(QATTN_ERR_LAUNCH, \"could not allocate the persistent grid's tile counter (first launch on this device inside a stream capture?)\");");
  } else {
    w.line("const long long blocks = kp.num_tiles;  // one block per tile");
    w.line("kp.tile_counter = nullptr;");
  }
  w.line("kp.seqlen_q = p.seqlen_q; kp.seqlen_k = p.seqlen_k; kp.heads_q = p.heads_q; kp.group = p.heads_q / p.heads_kv;");
  const tl::Expr& f = scale_stmt_->compute.operands[1].expr;
  w.line("{");
  w.line("  const float softmax_scale = p.softmax_scale;");
  comment_stmt(w, *scale_stmt_, "folded into the exponent");
  w.line("  kp.scale_log2 = " + cpp_float(f) + ";");
  w.line("  kp.scale = softmax_scale;");
  w.line("}");
  if (mask_.kind == tl::MaskSpec::Kind::Window) {
    w.line("kp.window_left = " + cpp_int(mask_.left) + "; kp.window_right = " + cpp_int(mask_.right) + ";");
  } else {
    w.line("kp.window_left = kp.window_right = 0;");
  }
  w.line("for (int i = 0; i < 4; ++i) kp.aux[i] = p.aux[i];");

}

}  // namespace qattn::backend::detail
