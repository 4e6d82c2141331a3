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
  // ---- GQA packing: the kernel implements `{pack: heads_q / heads_kv}` with the Grid
  // (m_block over packed rows, the kv head, the batch) ----
  if (info_.pack) {
    const std::string g = tl::print_expr(*info_.pack);
    if (g != "heads_q / heads_kv") {
      diags_.error("XL0202", info_.pack->loc.line ? info_.pack->loc : at, "`{pack: " + g + "}` is not lowered on sm90",
                   "the sm90 kernel packs every query head of a kv head into its tiles: write `{pack: heads_q / heads_kv}`");
      return false;
    }
    if (grid_.size() != 3) {
      diags_.error("XL0203", grid_stmt_ ? grid_stmt_->loc : at, "a packed program's Grid has 3 axes",
                   "write `Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_kv, b = 0: batch`");
      return false;
    }
    sm90_.pack_gqa = true;
  }
  // ---- auxiliary globals of the Score / Mask declarations (ABI aux[]), the loop's {skip} ----
  for (const auto& st : prog_.stmts) {
    if (st.kind != tl::Stmt::Kind::Allocate || st.alloc.space != tl::Space::Global) continue;
    const auto& a = st.alloc;
    if (a.name == "Q" || a.name == "K" || a.name == "V" || a.name == "O" || a.name == "LSE") continue;
    if (std::find(info_.aux.begin(), info_.aux.end(), a.name) == info_.aux.end()) {
      diags_.error("XL0301", st.loc, "global tensor " + a.name + " has no ABI argument",
                   "globals are Q, K, V, O, LSE and up to 4 auxiliary fp32/int32 inputs of Score/Mask declarations");
      return false;
    }
    AuxInfo ai;
    ai.slot = int(aux_order_.size());
    ai.is_int = a.dtype && *a.dtype == tl::DType::I32;
    for (const auto& e : a.shape) ai.extents.push_back(cpp_int(e));
    aux_[a.name] = ai;
    aux_order_.push_back(a.name);
  }
  for (const auto& a : loop_->attrs)
    if (a.key == "skip" && a.value && a.value->kind == tl::Expr::Kind::Name && !analyze_skip(*loop_, a.value->name)) return false;
  // ---- the loop body: GEMM, the score stage, the online-softmax form ----
  // The score stage (after the first GEMM): Multiply, Modify and Mask statements. The kernel runs
  // the Multiplies and Modifies up to the last Modify element-wise (Scope::modify), then the masks,
  // and folds the Multiplies after the last Modify into its Exp2 (positive factors commute with
  // a mask's -inf).
  const std::vector<std::string> tail = {"RowMax", "Max", "Subtract", "Exp2", "Subtract", "Exp2", "RowSum",
                                         "Rescale", "Add", "Rescale", "Convert", "Reshape", "GEMM", "Max"};
  std::vector<std::string> got;
  std::vector<const tl::Stmt*> stage;
  for (const auto& s : loop_->loop.body) {
    if (s.kind == tl::Stmt::Kind::Copy || s.kind == tl::Stmt::Kind::Comment || s.kind == tl::Stmt::Kind::Blank) continue;
    if (s.kind == tl::Stmt::Kind::Reshape) {
      got.push_back("Reshape");
      continue;
    }
    if (s.kind != tl::Stmt::Kind::Compute) {
      diags_.error("XL0301", s.loc, "this statement is not lowered inside the sm90 main loop",
                   "the loop body holds the K/V Copies, the GEMMs, the score Multiply/Modify/Mask statements and the online-softmax Computes");
      return false;
    }
    const auto& c = s.compute;
    const bool score_op = c.op == "Multiply" || c.op == "Modify" || c.op == "Mask";
    if (score_op && got.size() == 1 && got[0] == "GEMM") {
      stage.push_back(&s);
      continue;
    }
    std::string op = c.op == "Exp" ? "Exp2" : c.op;
    if (c.op == "Exp") sm90_.natural_exp = true;
    got.push_back(op);
  }
  std::vector<std::string> want = {"GEMM"};
  want.insert(want.end(), tail.begin(), tail.end());
  if (got != want || stage.empty()) {
    std::vector<std::string> shown = got;
    if (!stage.empty() && !shown.empty()) shown.insert(shown.begin() + 1, "(" + std::to_string(stage.size()) + " score statements)");
    diags_.error("XL0301", loop_->loc, "the loop body is not the online-softmax form the sm90 kernel implements: " + op_list(shown),
                 "expected GEMM, then the score statements (Multiply S by `softmax_scale * log2e`; Modify and Mask), then " +
                     op_list(tail) + " (in this order), as `qattn plan --gpu h100` writes");
    return false;
  }
  size_t last_modify = 0;
  bool any_modify = false;
  for (size_t i = 0; i < stage.size(); ++i)
    if (stage[i]->compute.op == "Modify") last_modify = i, any_modify = true;
  for (size_t i = 0; i < stage.size(); ++i) {
    const tl::Stmt& s = *stage[i];
    const auto& c = s.compute;
    if (c.op == "Multiply") {
      if (c.operands.size() != 2 || !is_positive_scalar(c.operands[1].expr)) {
        diags_.error("XL0301", s.loc, "the score tile is scaled by something that is not a positive scalar",
                     "write `Compute Multiply S, softmax_scale * log2e` (Score declarations change S element-wise)");
        return false;
      }
      (any_modify && i < last_modify ? sm90_.score_ops : sm90_.post_scale).push_back(&s);
      continue;
    }
    if (c.op == "Modify") {
      for (size_t k = 0; k < i; ++k)
        if (stage[k]->compute.op == "Mask") {
          diags_.error("XL0301", s.loc, "a Modify after a Mask is not lowered on sm90",
                       "the kernel applies the Score declarations before the masks: move the Mask statements after every Modify");
          return false;
        }
      auto v = info_.variants.find(c.mask.name);
      if (v == info_.variants.end() || v->second.is_mask) {
        diags_.error("XL0301", s.loc, "`" + c.mask.name + "` is not a Score declaration", "declare `Score " + c.mask.name + " = ...`");
        return false;
      }
      sm90_.score_ops.push_back(&s);
      continue;
    }
    // Mask
    if (c.mask.kind == tl::MaskSpec::Kind::Named) {
      auto v = info_.variants.find(c.mask.name);
      if (v == info_.variants.end() || !v->second.is_mask) {
        diags_.error("XL0301", s.loc, "`" + c.mask.name + "` is not a Mask declaration", "declare `Mask " + c.mask.name + " = ...`");
        return false;
      }
      sm90_.named_masks.push_back(&s);
      continue;
    }
    if (mask_stmt_) {
      diags_.error("XL0301", s.loc, "a second kernel Mask in the loop", "one `Compute Mask S ... with causal/window/...` per score tile");
      return false;
    }
    mask_stmt_ = &s;
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
  smem_bytes_ = 1024 + int64_t(tile_m_) * dqkp * eb + int64_t(stages_) * sm90_.bn * (dqkp + dvp) * eb + 8 * (2 + 4 * stages_) + 40;  // + fwd.cuh's TileExchange (2 slots, 4 mbarriers)
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
  if (!info_.variants.empty()) w.line("#include \"qattn/variant.cuh\"  // Score/Mask declarations: fast_tanh, aux_at, ...");
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
  w.line(std::string("static constexpr bool kPackGqa = ") + (sm90_.pack_gqa ? "true" : "false") +
         ";  // TL {pack: heads_q / heads_kv}: tile row r is query r / group of head kv_head * group + r % group");
  w.line("// S = Q K^T: both operands K-major in shared memory; O += P V: P in registers, V MN-major");
  w.line("using MmaQK = " + gmma + "MMA_64x" + std::to_string(sm90_.bn) + "x16_F32" + ty + "_SS<" + gmma + "Major::K, " + gmma +
         "Major::K>;");
  w.line("using MmaPV = " + gmma + "MMA_64x" + std::to_string(d_v_) + "x16_F32" + ty + "_RS<" + gmma + "Major::K, " + gmma +
         "Major::MN>;");
  // Loop bounds: the TL for-loop's lo and hi, over the launch's dims.
  auto dims_locals = [&](Writer& w2) {
    w2.line("[[maybe_unused]] const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k, heads_q = p.heads_q, heads_kv = p.heads_kv;");
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
  emit_sm90_scope(w);
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

// The Traits' Scope: the TL names a work tile binds (Grid variables, runtime Dims, Consts, Lets,
// softmax_scale, the auxiliary globals) and, over them, the element-wise part of the loop body the
// kernel calls per score tile: modify() (the Multiply and Modify statements before the last Modify,
// in TL order), keep() (the kernel's mask and every Mask declaration), tile_needs_mask() (whole
// tiles the masks cannot touch skip the element test; a declaration's `full when` clause counts),
// visible() (the loop's `{skip: M}`: tiles whose `empty when` clause holds are never loaded).
void Lowering::emit_sm90_scope(Writer& w) {
  w.line("// The TL names of one work tile, and the Score / Mask declarations over them.");
  w.open("struct Scope {");
  // Grid variables, runtime Dims, Consts (fixed Dims too), softmax_scale.
  std::string grid_vars;
  for (const auto& [var, ext] : grid_) grid_vars += (grid_vars.empty() ? "" : ", ") + ident(var);
  w.line("int " + grid_vars + ";  // TL Grid");
  std::string dims;
  for (const auto& [name, field] : runtime_dims_) dims += (dims.empty() ? "" : ", ") + ident(name);
  if (!dims.empty()) w.line("int " + dims + ";  // TL Dims bound at launch");
  for (const auto& [n, v] : fixed_dims_) w.line("static constexpr int " + ident(n) + " = " + std::to_string(v) + ";  // TL Dim");
  for (const auto& [n, v] : consts_) w.line("static constexpr int " + ident(n) + " = " + std::to_string(v) + ";  // TL Const");
  w.line("float softmax_scale;");
  std::vector<const tl::Stmt*> lets, decls;
  for (const auto& st : prog_.stmts) {
    if (st.kind == tl::Stmt::Kind::Let) lets.push_back(&st);
    if (st.kind == tl::Stmt::Kind::Variant) decls.push_back(&st);
  }
  for (const auto* l : lets) w.line("int " + ident(l->let.name) + ";  // TL " + std::to_string(l->loc.line) + ": Let");
  for (const auto& n : aux_order_) {
    const AuxInfo& a = aux_.at(n);
    w.line("const " + std::string(a.is_int ? "int" : "float") + "* __restrict__ aux_" + n + ";  // p.aux[" +
           std::to_string(a.slot) + "]");
  }
  w.line("int sq_, sk_, wl_, wr_;  // the kernel's mask: seqlen_q, seqlen_k, window (left, right)");
  // Constructor: binds them for the work tile (m_block, head, batch) of the Grid.
  w.open("__device__ Scope(int grid0_, int grid1_, int grid2_, qattn::sm90::Params const& p) {");
  static const char* gpar[] = {"grid0_", "grid1_", "grid2_"};
  std::string gl;
  for (size_t i = 0; i < grid_.size(); ++i) gl += ident(grid_[i].first) + " = " + gpar[i] + "; ";
  w.line(gl + "(void)grid0_, (void)grid1_, (void)grid2_;");
  static const std::map<std::string, std::string> sm90_field = {{"seqlen_q", "p.seqlen_q"}, {"seqlen_k", "p.seqlen_k"},
                                                               {"heads_q", "p.heads_q"},   {"heads_kv", "p.heads_kv"},
                                                               {"batch", "p.batch"}};
  for (const auto& [name, field] : runtime_dims_) w.line(ident(name) + " = " + sm90_field.at(field) + ";");
  w.line("softmax_scale = p.softmax_scale;");
  for (const auto* l : lets) w.line(ident(l->let.name) + " = " + cpp_int(l->let.value) + ";");
  for (const auto& n : aux_order_) {
    const AuxInfo& a = aux_.at(n);
    const std::string ty = a.is_int ? "int" : "float";
    w.line("aux_" + n + " = static_cast<const " + ty + "*>(p.aux[" + std::to_string(a.slot) + "]);");
  }
  w.line("sq_ = p.seqlen_q; sk_ = p.seqlen_k; wl_ = p.window_left; wr_ = p.window_right;");
  w.close();
  // The declarations as member functions.
  for (const auto* d : decls) {
    comment_stmt(w, *d);
    const tl::VariantStmt& v = d->variant;
    DeclType t;
    const std::string body = cpp_decl(v.expr, t);
    if (!v.is_mask) {
      w.line("__device__ float score_" + v.name + "(float score, int q_idx, int kv_idx) const { return " +
             (t == DeclType::Float ? body : "float(" + body + ")") + "; }");
      continue;
    }
    w.line("__device__ bool mask_" + v.name + "(int q_idx, int kv_idx) const { return " + body + "; }");
    auto clause = [&](const char* what, const std::optional<tl::Expr>& c) {
      DeclType ct;
      const std::string e = c ? cpp_decl(*c, ct) : "false";
      w.line("__device__ bool " + std::string(what) + "_" + v.name + "(int q_lo, int q_hi, int kv_lo, int kv_hi) const { return " +
             e + "; }" + (c ? (v.derived ? "  // derived from the predicate" : "  // declared") : "  // no clause: never"));
    };
    clause("empty", v.empty_when);
    clause("full", v.full_when);
  }
  // modify(): the score stage before the exp2-domain factor.
  w.open("template <int NS> __device__ void modify(float (&s)[NS], int qa, int qb, int col0, int c) const {");
  if (sm90_.score_ops.empty()) {
    w.line("(void)s, (void)qa, (void)qb, (void)col0, (void)c;  // no Score declaration: S only gets the scale folded into Exp2");
  } else {
    w.open("qattn::sm90::for_each_score(s, qa, qb, col0, c, [&](float& x, [[maybe_unused]] int q_idx, [[maybe_unused]] int kv_idx) {");
    for (const auto* op : sm90_.score_ops) {
      comment_stmt(w, *op);
      if (op->compute.op == "Multiply") w.line("x *= " + cpp_float(op->compute.operands[1].expr) + ";");
      else w.line("x = score_" + op->compute.mask.name + "(x, q_idx, kv_idx);");
    }
    w.close("});");
  }
  w.close();
  // keep(): the kernel's mask (its Mask statement) and the Mask declarations.
  const std::string mk = sm90_mask_kind();
  if (mask_stmt_) comment_stmt(w, *mask_stmt_);
  for (const auto* m : sm90_.named_masks) comment_stmt(w, *m);
  w.open("__device__ bool keep(int q, int k) const {");
  w.line("[[maybe_unused]] const int off = sk_ - sq_;");
  std::string pred = "k < sk_";
  if (mk == "causal") pred += " && k <= q + off";
  if (mk == "causal_top_left") pred += " && k <= q";
  if (mk == "window") pred += " && k >= q + off - wl_ && k <= q + off + wr_";
  for (const auto* m : sm90_.named_masks) pred += " && mask_" + m->compute.mask.name + "(q, k)";
  w.line("return " + pred + ";");
  w.close();
  w.open("__device__ bool tile_needs_mask(int q_lo, int q_hi, int n) const {  // the queries of one warpgroup's 64 rows x BN keys");
  w.line("[[maybe_unused]] const int off = sk_ - sq_;");
  w.line("const int col0 = n * kBN, last_col = col0 + kBN - 1;");
  std::string need = "last_col >= sk_";
  if (mk == "causal") need += " || last_col > q_lo + off";
  if (mk == "causal_top_left") need += " || last_col > q_lo";
  if (mk == "window") need += " || last_col > q_lo + off + wr_ || col0 < q_hi + off - wl_";
  for (const auto* m : sm90_.named_masks) need += " || !full_" + m->compute.mask.name + "(q_lo, q_hi, col0, last_col)";
  w.line("return " + need + ";");
  w.close();
  const std::string j = ident(loop_->loop.var);
  if (skip_mask_.empty()) {
    w.line("__device__ bool visible(int) const { return true; }  // the loop has no {skip}");
  } else {
    w.line("// TL " + std::to_string(loop_->loc.line) + ": {skip: " + skip_mask_ + "}: key tiles whose `empty when` clause holds are not visited");
    w.open("__device__ bool visible(int " + j + ") const {");
    w.line("const int row0 = (" + skip_row_ + ") * kBM, col0 = (" + skip_col_ + ") * " + skip_cols_ + ";");
    w.line("return !empty_" + skip_mask_ + "(row0, row0 + kBM - 1, col0, col0 + " + skip_cols_ + " - 1);");
    w.close();
  }
  w.close("};");
}

void Lowering::emit_sm90_launch(Writer& w) {
  w.line("qattn::sm90::Params kp;");
  w.line("const bool bf16 = " + std::string(elem_ == tl::DType::BF16 ? "true" : "false") + ";");
  // GQA packing: Q and O maps cut boxes of (group heads x rows / group) (tma.cuh, make_packed_map).
  const std::string pk = sm90_.pack_gqa ? ", kp.pack" : "";  // packed: the 5-D maps, also for a group of 1
  if (sm90_.pack_gqa) {
    w.line("kp.pack = p.heads_q / p.heads_kv;  // TL {pack: heads_q / heads_kv}");
    w.line("if (p.heads_q % p.heads_kv != 0 || 64 % kp.pack != 0)");
    w.line("  return fail(QATTN_ERR_SHAPE, \"this kernel packs the heads_q / heads_kv = %d query heads of a kv head into its 64-row tiles: the group must divide 64 (heads_q %d, heads_kv %d)\", p.heads_q / p.heads_kv, p.heads_q, p.heads_kv);");
  } else {
    w.line("kp.pack = 1;");
  }
  w.line("if (!qattn::sm90::make_tile_map(&kp.tma_q, p.q, bf16, " + std::to_string(d_qk_) +
         ", p.seqlen_q, p.heads_q, p.batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride, Traits::kBM" + pk + ") ||");
  w.line("    !qattn::sm90::make_tile_map(&kp.tma_k, p.k, bf16, " + std::to_string(d_qk_) +
         ", p.seqlen_k, p.heads_kv, p.batch, p.k_row_stride, p.k_head_stride, p.k_batch_stride, Traits::kBN) ||");
  w.line("    !qattn::sm90::make_tile_map(&kp.tma_v, p.v, bf16, " + std::to_string(d_v_) +
         ", p.seqlen_k, p.heads_kv, p.batch, p.v_row_stride, p.v_head_stride, p.v_batch_stride, Traits::kBN) ||");
  w.line("    !qattn::sm90::make_tile_map(&kp.tma_o, p.o, bf16, " + std::to_string(d_v_) +
         ", p.seqlen_q, p.heads_q, p.batch, p.o_row_stride, p.o_head_stride, p.o_batch_stride, 64" + pk + "))");
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
  w.line("{");
  w.line("  const float softmax_scale = p.softmax_scale;");
  std::string f;
  for (const auto* st : sm90_.post_scale) {
    comment_stmt(w, *st, "folded into the exponent");
    f += (f.empty() ? "" : " * ") + std::string("(") + cpp_float(st->compute.operands[1].expr) + ")";
  }
  w.line("  kp.scale_log2 = " + (f.empty() ? std::string("1.0f") : f) + ";");
  w.line("  kp.scale = kp.scale_log2 * 0.693147181f;  // the row max in natural-log units (LSE)");
  w.line("  kp.softmax_scale = softmax_scale;");
  w.line("}");
  w.line("kp.heads_kv = p.heads_kv; kp.batch = p.batch;");
  if (mask_.kind == tl::MaskSpec::Kind::Window) {
    w.line("kp.window_left = " + cpp_int(mask_.left) + "; kp.window_right = " + cpp_int(mask_.right) + ";");
  } else {
    w.line("kp.window_left = kp.window_right = 0;");
  }
  w.line("for (int i = 0; i < 4; ++i) kp.aux[i] = p.aux[i];");

}

}  // namespace qattn::backend::detail
