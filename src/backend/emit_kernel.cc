// Stage 2 emitter: the kernel body, one `// TL <line>: <statement>` block per TL statement, in
// program order. Header statements (Kernel, Dim, Const) become the constants of the preamble
// (emit_host.cc); Grid and Let become block-index variables; Allocate, Copy and the loop are here;
// Compute and Reshape are in emit_ops.cc. The K/V copies of the main loop follow the schedule of
// analyze.cc: their issue points move earlier (never later) so copies overlap compute.
#include "backend/lowering.h"
#include "tl/printer.h"

namespace qattn::backend::detail {

void Lowering::comment_stmt(Writer& w, const tl::Stmt& s, const std::string& note) {
  std::string text;
  if (s.kind == tl::Stmt::Kind::For) {
    text = "for " + s.loop.var + " = " + tl::print_expr(s.loop.lo) + ": " + tl::print_expr(s.loop.hi);
  } else {
    text = tl::print_stmt(s, 0);
  }
  w.line("// TL " + std::to_string(s.loc.line) + ": " + text + (note.empty() ? "" : "  (" + note + ")"));
}

std::string Lowering::stage_view(const std::string& tensor, const std::string& stage) const {
  auto it = shared_.find(tensor);
  if (it != shared_.end() && it->second.staged) return "s" + tensor + "(_, _, " + stage + ")";
  return "s" + tensor;
}

std::string Lowering::g2s_call(const std::string& tensor, const std::string& tile_row, const std::string& stage) const {
  return "qattn::copy_g2s(gmem_copy, m" + tensor + ", " + tile_row + ", " + stage_view(tensor, stage) + ", tid);";
}

// Waits (at top level) for the last committed copy group of `tensor`, then a barrier.
void Lowering::emit_wait_for(Writer& w, const std::string& tensor) {
  long idx = -1;
  for (size_t i = 0; i < pending_groups_.size(); ++i)
    if (pending_groups_[i] == tensor) idx = long(i);
  if (idx < 0) return;
  const size_t newer = pending_groups_.size() - size_t(idx) - 1;
  w.line("qattn::wait<" + std::to_string(newer) + ">();  // " + tensor + " has landed (" + std::to_string(newer) +
         " newer copy group" + (newer == 1 ? "" : "s") + " may still be in flight)");
  w.line("__syncthreads();");
  pending_groups_.erase(pending_groups_.begin(), pending_groups_.begin() + idx + 1);
}

void Lowering::emit_kernel(Writer& w) {
  w.open("__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) " + kernel_name_ +
         "(const __grid_constant__ qattn_fwd_params p) {");
  w.line("extern __shared__ __align__(128) char smem[];");
  w.line("const int tid = threadIdx.x;");
  std::string dims;
  for (const auto& [name, field] : runtime_dims_) dims += (dims.empty() ? "" : ", ") + ident(name) + " = p." + field;
  if (!dims.empty())  // a KV cache's `Let seqlen_k = T[b]` (a ragged batch's seqlen_q / seqlen_k) narrows them below: not const
    w.line("[[maybe_unused]] " + std::string(info_.kv_lengths.empty() && info_.q_lengths.empty() ? "const " : "") + "int " + dims +
           ";  // TL Dims bound at launch");
  w.line("const float softmax_scale = p.softmax_scale;  // TL builtin softmax_scale");
  write_launch_bindings(w, launch_args(), true);
  if (arch_.fp8) {
    w.line("// fp8: per-tensor descale factors (NULL -> 1): Q K^T carries descale_q * descale_k, P V descale_v");
    w.line("const float descale_q = p.descale_q ? *p.descale_q : 1.f, descale_k = p.descale_k ? *p.descale_k : 1.f;");
    w.line("const float descale_v = p.descale_v ? *p.descale_v : 1.f, descale_qk = descale_q * descale_k;");
  }
  w.line("TiledMma tiled_mma;");
  w.line("GmemCopy gmem_copy;");
  for (size_t i = 0; i < prog_.stmts.size(); ++i) {
    emit_stmt(w, prog_.stmts[i], false, i);
    if (sched_.pipelined && !prologue_done_ && long(i) == sched_.prologue_after) emit_prologue(w);
  }
  w.close();
}

void Lowering::emit_stmt(Writer& w, const tl::Stmt& s, bool in_loop, size_t index) {
  switch (s.kind) {
    case tl::Stmt::Kind::Kernel:
    case tl::Stmt::Kind::Dim:
    case tl::Stmt::Kind::Const: return;  // the preamble's constants
    case tl::Stmt::Kind::Blank: return;
    case tl::Stmt::Kind::Comment:
      if (kernel_stmt_ && s.loc.line < kernel_stmt_->loc.line) return;  // the file's heading
      w.line("//" + (s.comment.text.empty() ? std::string() : " " + s.comment.text)); return;
    case tl::Stmt::Kind::Grid: {
      comment_stmt(w, s);
      static const char* axes[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
      std::string line;
      for (size_t i = 0; i < grid_.size(); ++i) line += (i ? ", " : "") + ident(grid_[i].first) + " = " + axes[i];
      w.line("const int " + line + ";");
      return;
    }
    case tl::Stmt::Kind::Let:
      comment_stmt(w, s);
      if ((s.let.name == "seqlen_k" && !info_.kv_lengths.empty()) || (s.let.name == "seqlen_q" && !info_.q_lengths.empty())) {
        // a KV cache / ragged batch: this sequence's count (clamped to the Dim's launch value)
        w.line(ident(s.let.name) + " = min(max(" + cpp_int(s.let.value) + ", 0), p." + s.let.name + ");");
        if (s.let.name == "seqlen_q")  // the Grid points past the sequence's queries store nothing
          for (const auto& [var, extent] : grid_)
            if (tl::expr_reads(extent, "seqlen_q"))
              w.line("if (" + ident(var) + " >= " + cpp_int(extent) + ") return;  // past this sequence's queries");
        return;
      }
      w.line("const int " + ident(s.let.name) + " = " + cpp_int(s.let.value) + ";");
      return;
    case tl::Stmt::Kind::Allocate: emit_allocate(w, s); return;
    case tl::Stmt::Kind::Copy: emit_copy(w, s, in_loop, index); return;
    case tl::Stmt::Kind::Compute: emit_compute(w, s); return;
    case tl::Stmt::Kind::Reshape: emit_reshape(w, s); return;
    case tl::Stmt::Kind::For: emit_loop(w, s); return;
    case tl::Stmt::Kind::Variant: emit_declaration(w, s); return;
    case tl::Stmt::Kind::Role: return;  // refused for mma.sync targets in analyze_statements
    case tl::Stmt::Kind::Phase: return;  // backward programs only (TL0419)
    case tl::Stmt::Kind::Merge: return;  // split keys only, which the mma.sync targets refuse (XL0203)
  }
}

void Lowering::emit_allocate(Writer& w, const tl::Stmt& s) {
  const auto& a = s.alloc;
  const std::string shape = [&] {
    std::string r;
    for (const auto& e : a.shape) r += (r.empty() ? "" : ", ") + tl::print_expr(e);
    return "(" + r + ")";
  }();
  if (a.space == tl::Space::Global && aux_.count(a.name)) return emit_aux(w, s);
  if (a.space == tl::Space::Global) {
    comment_stmt(w, s);
    const std::string n = a.name;
    const std::string off0 = a.offset.size() > 0 ? cpp_int(a.offset[0]) : "0";
    const std::string off1 = a.offset.size() > 1 ? cpp_int(a.offset[1]) : "0";
    std::string rows = cpp_int(a.shape[0]);
    const bool q_side = n == "Q" || n == "O" || n == "LSE";
    const std::string& ragged = q_side ? info_.q_ragged : info_.kv_ragged;
    if (!ragged.empty()) {  // TL {ragged: T}: sequence off0 starts at row T[off0] of the packed tensor
      const std::string total = q_side ? "p.total_q" : "p.total_k", start = "start" + n;
      w.line("const int " + start + " = min(max(aux_" + ragged + "[" + off0 + "], 0), " + total + ");  // " + n +
             "'s first row (packed, " + total + " rows)");
      rows = "min(" + rows + ", " + total + " - " + start + ")";
      if (n == "LSE") {  // (heads_q, total_q), as flash_attn_varlen_func returns it
        w.line("Tensor mLSE = qattn::global_vector_out<float>(p.lse, int64_t(" + off1 + ") * p.total_q + " + start + ", " + rows +
               ");  // " + shape);
        return;
      }
      const std::string f = n == "Q" ? "q" : n == "K" ? "k" : n == "V" ? "v" : "o";
      const std::string fn = n == "O" ? "global_matrix_out<ElementO, " : "global_matrix<Element, ";
      w.line("Tensor m" + n + " = qattn::" + fn + cpp_int(a.shape[1]) + ">(p." + f + ", int64_t(" + start + ") * p." + f +
             "_row_stride + " + off1 + " * p." + f + "_head_stride, " + rows + ", p." + f + "_row_stride);  // " + shape);
      return;
    }
    if (n == "LSE") {
      // (batch, heads_q, seqlen_q) contiguous, as include/qattn/qattn.h describes
      w.line("Tensor mLSE = qattn::global_vector_out<float>(p.lse, (int64_t(" + off0 + ") * p.heads_q + " + off1 +
             ") * p.seqlen_q, " + rows + ");  // " + shape);
      return;
    }
    const std::string f = n == "Q" ? "q" : n == "K" ? "k" : n == "V" ? "v" : "o";
    const std::string cols = cpp_int(a.shape[1]);
    const std::string fn = n == "O" ? "global_matrix_out<ElementO, " : "global_matrix<Element, ";
    if ((n == "K" || n == "V") && !info_.paged.empty()) {  // a paged KV cache: rows through the block table
      w.line("const auto m" + n + " = qattn::paged_matrix<Element, " + cols + ">(p." + f + ", " + off1 + " * p." + f +
             "_head_stride, " + rows + ", p." + f + "_row_stride, p." + f + "_batch_stride, aux_" + info_.paged + " + " + off0 +
             " * p.pages, p.page_size, p.num_pages);  // " + shape + " in pages of page_size rows");
      return;
    }
    w.line("Tensor m" + n + " = qattn::" + fn + cols + ">(p." + f + ", " + off0 + " * p." + f + "_batch_stride + " + off1 +
           " * p." + f + "_head_stride, " + rows + ", p." + f + "_row_stride);  // " + shape);
    return;
  }
  if (a.space == tl::Space::Shared) {
    comment_stmt(w, s);
    const SharedBuf& b = shared_.at(a.name);
    std::string dims = shape;
    if (b.staged) dims.insert(dims.size() - 1, ", " + stages_expr_);
    w.line("Tensor s" + a.name + " = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem + kSmemOffset" + a.name +
           ")), SmemLayout" + a.name + "{});  // " + dims);
    // the (N, K) view a GEMM reads when the TL states this tensor as an untransposed B operand
    for (const auto& [st, g] : gemms_) {
      if (g.b_name != a.name || g.b_kmajor) continue;
      std::string tdims = "(" + tl::print_expr(a.shape[1]) + ", " + tl::print_expr(a.shape[0]) +
                          (b.staged ? ", " + stages_expr_ : "") + ")";
      if (arch_.fp8) {
        w.line("Tensor s" + a.name + "t = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem + kSmemOffset" + a.name +
               "t)), SmemLayout" + a.name + "t{});  // (" + tl::print_expr(a.shape[1]) + ", " + tl::print_expr(a.shape[0]) +
               "): " + a.name + "^T for TL " + std::to_string(st->loc.line) +
               " (no ldmatrix.trans for 8-bit data: transposed in shared memory)");
      } else {
        w.line("Tensor s" + a.name + "t = make_tensor(s" + a.name + ".data(), qattn::transposed(SmemLayout" + a.name +
               "{}));  // " + tdims + ": " + a.name + "^T view for TL " + std::to_string(st->loc.line) + " (ldmatrix.trans)");
      }
      break;
    }
    return;
  }
  // register
  const tl::TensorInfo& t = info_.tensors.at(a.name);
  for (const auto& [st, g] : gemms_) {
    const bool is_b = g.b_name == a.name;
    const bool is_a_stream = g.a_name == a.name && g.a == GemmPlan::A::Streamed;
    if (is_b || is_a_stream) {
      comment_stmt(w, s, std::string(is_b ? "B" : "A") + " operand of TL " + std::to_string(st->loc.line) +
                             ": its fragments are loaded from s" + a.name + " inside the GEMM, one k-block ahead");
      RegTensor r;
      r.kind = RegKind::Streamed;
      r.dtype = t.register_dtype;
      regs_[a.name] = r;
      return;
    }
    if (g.a_name == a.name && g.a == GemmPlan::A::Resident) {
      comment_stmt(w, s, "A operand of TL " + std::to_string(st->loc.line) + ", kept in registers for the whole loop");
      RegTensor r;
      r.kind = RegKind::OperandA;
      r.family = g.c_name;
      r.var = "t" + g.c_name + "r" + a.name;
      r.dtype = t.register_dtype;
      w.line("Tensor " + r.var + " = qattn::fragment_A<" + cpp_int(a.shape[0]) + ", " + cpp_int(a.shape[1]) +
             ">(tiled_mma, tid);  // (MMA, MMA_M, MMA_K)");
      regs_[a.name] = r;
      return;
    }
  }
  comment_stmt(w, s);
  RegTensor r;
  r.dtype = a.dtype.value_or(tl::DType::F32);
  if (a.shape.size() == 1) {
    r.kind = RegKind::Rows;
    r.var = "r" + a.name;
    r.rows = tile_m_;
    w.line("Tensor " + r.var + " = make_tensor<" + cute_type(r.dtype) + ">(Shape<Int<kRowsPerThread>>{});  // " + shape +
           ": the rows this thread holds");
  } else {
    r.kind = RegKind::Tile;
    r.family = a.name;
    r.var = "t" + a.name + "r" + a.name;
    r.rows = tile_m_;
    r.cols_expr = cpp_int(a.shape[1]);
    std::string frag = "partition_fragment_C(tiled_mma, Shape<Int<" + cpp_int(a.shape[0]) + ">, Int<" + r.cols_expr + ">>{})";
    if (r.dtype != tl::DType::F32) frag = "make_fragment_like<" + std::string(cute_type(r.dtype)) + ">(" + frag + ")";
    w.line("Tensor " + r.var + " = " + frag + ";  // (MMA, MMA_M, MMA_N)");
    if (acc_descale_.count(a.name) && a.init && a.init->kind == tl::Expr::Kind::Number && a.init->value == 0) {
      r.pending_scale = acc_descale_.at(a.name);  // zero times any factor is zero
    }
  }
  if (a.init) {
    if (a.init->kind == tl::Expr::Kind::Number && a.init->value == 0)
      w.line("clear(" + r.var + ");");
    else
      w.line("fill(" + r.var + ", " + cpp_float(*a.init) + ");");
  }
  if (in_loop_) loop_created_.insert(a.name);
  regs_[a.name] = r;
}

void Lowering::emit_copy(Writer& w, const tl::Stmt& s, bool in_loop, size_t index) {
  const auto& c = s.copy;
  const std::string& n = c.name;
  if (c.from == tl::Space::Global && c.to == tl::Space::Shared) {
    if (in_loop && sched_.pipelined && (n == sched_.x || n == sched_.y)) {
      comment_stmt(w, s, "issued ahead: see the pipeline waits of this loop");
      return;
    }
    comment_stmt(w, s);
    if (in_loop) {
      w.line("__syncthreads();  // every warp is done with s" + n + " before it is overwritten");
      body_unwaited_.insert(n);
    }
    w.line(g2s_call(n, cpp_int(c.coord[0]), "0"));
    w.line("qattn::commit();");
    if (!in_loop) pending_groups_.push_back(n);
    (void)index;
    return;
  }
  if (c.from == tl::Space::Shared && c.to == tl::Space::Register) {
    const bool scheduled = in_loop && sched_.pipelined && (n == sched_.x || n == sched_.y);
    RegTensor* r = reg(n);
    const bool resident = r && r->kind == RegKind::OperandA;
    const bool vt = arch_.fp8 && n == vt_buffer_;
    std::string note = resident ? "" : vt ? "" : "fragments are loaded inside the GEMM that reads " + n;
    comment_stmt(w, s, note);
    if (!scheduled) ensure_ready(w, n);
    if (resident) w.line("qattn::copy_s2r_A<SmemCopyAtom>(tiled_mma, s" + n + ", " + r->var + ", tid);");
    if (vt) {
      w.line("qattn::transpose_v_fp8<kThreads>(" + stage_view(n, in_loop ? "stage" : "0") + ", s" + n + "t, tid);  // keys in the order of the fp8 Reshape");
      w.line("__syncthreads();");
    }
    return;
  }
  emit_store(w, s);
}

void Lowering::emit_prologue(Writer& w) {
  prologue_done_ = true;
  const auto& L = loop_->loop;
  const std::string v = ident(L.var);
  w.line("// TL " + std::to_string(loop_->loc.line) + ": the loop's bounds, needed here by the K/V prefetch");
  w.line("const int lo_" + v + " = " + cpp_int(L.lo) + ", hi_" + v + " = " + cpp_int(L.hi) + ";");
  const bool skip = !emit_skip_lambda(w).empty();
  if (skip)
    w.line("const int first_" + v + " = (lo_" + v + " < hi_" + v + " && !visible_" + v + "(lo_" + v + ")) ? next_" + v + "(lo_" + v +
           ") : lo_" + v + ";");
  const std::string first = skip ? "first_" + v : "lo_" + v;
  if (!sched_.pipelined) return;
  for (const std::string& n : {sched_.x, sched_.y}) {
    const tl::Stmt& cs = L.body[n == sched_.x ? sched_.x_copy : sched_.y_copy];
    const SharedBuf& b = shared_.at(n);
    comment_stmt(w, cs, "as a function of " + v + ", issued ahead of its use");
    w.line("auto load_" + n + " = qattn::tile_loader<" + b.rows_expr + ", " + b.cols_expr + ">(gmem_copy, m" + n +
           ", tid);  // this thread's part of every (" + b.rows_expr + ", " + b.cols_expr + ") tile of " + n);
    w.line("auto copy_" + n + " = [&](int " + v + ", int stage) { load_" + n + "(" + cpp_int(cs.copy.coord[0]) + ", " +
           stage_view(n, "stage") + "); };");
  }
  w.line("// pipeline prologue: the first " + (stages_ == 1 ? sched_.x + " tile" : std::to_string(stages_ - 1) + " K/V stage(s)"));
  if (stages_ == 1) {
    w.line("if (" + first + " < hi_" + v + ") copy_" + sched_.x + "(" + first + ", 0);");
    w.line("qattn::commit();");
    pending_groups_.push_back(sched_.x);
  } else {
    if (skip) w.line("int pf_" + v + " = first_" + v + ";  // the visible tiles the prologue loads");
    for (int st = 0; st < stages_ - 1; ++st) {
      const std::string it = skip ? "pf_" + v : "lo_" + v + " + " + std::to_string(st);
      for (const std::string& n : {sched_.x, sched_.y}) {
        w.line("if (" + it + " < hi_" + v + ") copy_" + n + "(" + it + ", " + std::to_string(st) + ");");
        w.line("qattn::commit();");
        pending_groups_.push_back(n);
      }
      if (skip && st + 1 < stages_ - 1) w.line("if (pf_" + v + " < hi_" + v + ") pf_" + v + " = next_" + v + "(pf_" + v + ");");
    }
  }
}

void Lowering::emit_loop(Writer& w, const tl::Stmt& s) {
  const auto& L = s.loop;
  const std::string v = ident(L.var);
  if (!prologue_done_) emit_prologue(w);
  if (!sched_.pipelined) {
    w.line("// no copy pipelining: " + sched_.why_not);
    if (!pending_groups_.empty()) {
      w.line("qattn::wait<0>();");
      w.line("__syncthreads();");
      pending_groups_.clear();
    }
  }
  if (sched_.pipelined) pending_groups_.clear();  // the loop's first wait covers every older copy
  comment_stmt(w, s);
  const bool skip = !skip_mask_.empty();
  if (skip)
    w.open("for (int " + v + " = first_" + v + ", it_" + v + " = 0; " + v + " < hi_" + v + "; " + v + " = next_" + v + "(" + v +
           "), ++it_" + v + ") {");
  else
    w.open("for (int " + v + " = lo_" + v + "; " + v + " < hi_" + v + "; ++" + v + ") {");
  in_loop_ = true;
  const int S = stages_;
  const std::string x = sched_.x, y = sched_.y;
  const std::string count = skip ? "it_" + v : "(" + v + " - lo_" + v + ")";
  if (sched_.pipelined && S > 1)
    w.line("const int stage = " + count + " % " + stages_expr_ + ";  // the K/V buffers of this iteration");
  else if (sched_.pipelined)
    w.line("constexpr int stage = 0;  // STAGES = 1: one K and one V buffer");
  else
    w.line("constexpr int stage = 0;");
  for (size_t i = 0; i < L.body.size(); ++i) {
    if (sched_.pipelined && i == sched_.a_pos) {
      if (S == 1) {
        w.line("// pipeline: " + x + "(" + v + ") and every older copy have landed; every warp is done with iteration " + v + " - 1");
        w.line("qattn::wait<0>();");
        w.line("__syncthreads();");
        const tl::Stmt& ys = L.body[sched_.y_copy];
        w.line("// TL " + std::to_string(ys.loc.line) + ", issued here so it lands under the GEMM: " + tl::print_stmt(ys, 0));
        w.line("copy_" + y + "(" + v + ", 0);");
        w.line("qattn::commit();");
      } else {
        w.line("// pipeline: " + x + "(" + v + ") has landed; every warp is done with iteration " + v + " - 1, whose buffers are refilled");
        w.line("qattn::wait<" + std::to_string(2 * S - 3) + ">();");
        w.line("__syncthreads();");
        std::string ahead = v + " + " + std::to_string(S - 1);
        std::string ahead_stage = "(" + ahead + " - lo_" + v + ") % " + stages_expr_;
        if (skip) {
          w.line("int ahead_" + v + " = " + v + ";");
          w.line("for (int t = 0; t < " + std::to_string(S - 1) + " && ahead_" + v + " < hi_" + v + "; ++t) ahead_" + v + " = next_" + v +
                 "(ahead_" + v + ");");
          ahead = "ahead_" + v;
          ahead_stage = "(it_" + v + " + " + std::to_string(S - 1) + ") % " + stages_expr_;
        }
        for (const std::string& n : {x, y}) {
          w.line("if (" + ahead + " < hi_" + v + ") copy_" + n + "(" + ahead + ", " + ahead_stage + ");");
          w.line("qattn::commit();");
        }
      }
    }
    if (sched_.pipelined && S > 1 && i == sched_.b_pos) {
      w.line("// pipeline: " + y + "(" + v + ") has landed");
      w.line("qattn::wait<" + std::to_string(2 * S - 2) + ">();");
      w.line("__syncthreads();");
    }
    emit_stmt(w, L.body[i], true, i);
    if (sched_.pipelined && S == 1 && i == sched_.b_pos) {
      w.line("// pipeline: " + y + "(" + v + ") has landed and every warp is done with s" + x + ": prefetch " + x + "(" + v +
             " + 1) under the softmax and the next GEMM");
      w.line("qattn::wait<0>();");
      w.line("__syncthreads();");
      if (skip)
        w.line("{ const int nx = next_" + v + "(" + v + "); if (nx < hi_" + v + ") copy_" + x + "(nx, 0); }");
      else
        w.line("if (" + v + " + 1 < hi_" + v + ") copy_" + x + "(" + v + " + 1, 0);");
      w.line("qattn::commit();");
    }
  }
  in_loop_ = false;
  // loop-scoped register tensors end here
  for (const auto& n : loop_created_) regs_.erase(n);
  loop_created_.clear();
  w.close();
  w.line("qattn::wait<0>();  // no copy is still landing in shared memory the epilogue reuses");
  pending_groups_.clear();
}

}  // namespace qattn::backend::detail
