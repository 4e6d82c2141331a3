// The kernel IR (kir.h) of a lowering. describe_header and describe_scope fill what every kernel
// family shares: the TL header, the work tile's names (Grid, Dims, Consts, Lets, the C ABI's
// tensors, auxiliary inputs, Score / Mask declarations), the loop's mask program. describe() is the
// mma.sync kernel (sm75 / sm80 / sm89) after analyze_mma: the shared-memory plan with offsets, the
// GEMMs and where they read their operands, the cp.async pipeline of the key loop. No diagnostics
// here: the analysis raised them; kir::verify checks what comes out.
#include <algorithm>
#include <functional>

#include "backend/lowering.h"
#include "support/sha256.h"
#include "tl/eval.h"
#include "tl/printer.h"

namespace qattn::backend::detail {

kir::TlRef tl_ref(const tl::Stmt& s) {
  kir::TlRef r;
  r.line = s.loc.line;
  tl::Program one;
  tl::Stmt copy = s;
  if (copy.kind == tl::Stmt::Kind::For) copy.loop.body.clear();
  copy.trailing_comment.clear();
  one.stmts.push_back(copy);
  r.text = tl::print(one);
  // one line: the statement without its trailing newline (a loop prints its `end` too)
  r.text = r.text.substr(0, r.text.find('\n'));
  return r;
}

kir::MaskKind mask_kind(tl::MaskSpec::Kind k) {
  // The same type (include/qattn/kinds.h); a Named mask is Scope::named_masks, not a kind.
  return k == tl::MaskSpec::Kind::Named ? kir::MaskKind::None : k;
}

void Lowering::describe_header(kir::Kernel& k) const {
  k.arch = arch_.name;
  k.target = target_.name;
  k.tl_kernel = tl_kernel_name_;
  k.name = kernel_name_;
  k.tl_hash = support::sha256_hex(tl::print(prog_)).substr(0, 16);
  k.elem = elem_;
  k.out = out_;
  k.d_qk = d_qk_;
  k.d_v = d_v_;
  k.lse = has_lse_;
  k.smem_limit = target_.smem_per_block;
  k.regs_per_sm = target_.regs_per_sm;
  k.nvcc_flags = arch_.gencode;
  for (const auto& fl : common_nvcc_flags()) k.nvcc_flags.push_back(fl);
  k.consts = consts_;
  if (kernel_stmt_) k.header.push_back(tl_ref(*kernel_stmt_));
  if (dim_stmt_) k.header.push_back(tl_ref(*dim_stmt_));
  for (const auto* c : const_stmts_) k.header.push_back(tl_ref(*c));
  if (grid_stmt_) k.launch.grid_tl = tl_ref(*grid_stmt_);
}

std::optional<SkipTile> Lowering::skip_tile(const tl::Stmt& loop, const std::string& name, const CppNames& names) const {
  const tl::Stmt* mask = nullptr;
  for (const auto& b : loop.loop.body)
    if (b.kind == tl::Stmt::Kind::Compute && b.compute.op == "Mask" && b.compute.mask.kind == tl::MaskSpec::Kind::Named &&
        b.compute.mask.name == name && b.compute.at.size() == 2)
      mask = &b;
  auto v = info_.variants.find(name);
  if (!mask || mask->compute.operands.size() != 1 || v == info_.variants.end() || !v->second.empty_when) return std::nullopt;
  for (const auto& b : loop.loop.body) {
    if (b.kind != tl::Stmt::Kind::Compute || b.compute.op != "GEMM" || b.compute.target != mask->compute.operands[0].expr.name ||
        b.compute.operands.size() != 2 || !b.compute.operands[1].transposed)
      continue;
    auto bt = info_.tensors.find(b.compute.operands[1].expr.name);
    if (bt == info_.tensors.end() || !bt->second.in_shared || bt->second.shared_shape.size() != 2) continue;
    tl::Env env;
    env.ints = env_;
    const auto cols = tl::eval_int(bt->second.shared_shape[0], env, nullptr);
    return SkipTile{names.int_expr(mask->compute.at[0]), names.int_expr(mask->compute.at[1]),
                    cols ? std::to_string(*cols) : names.int_expr(bt->second.shared_shape[0])};
  }
  return std::nullopt;
}

std::vector<std::string> Lowering::launch_args() const {
  std::vector<std::string> out;
  for (const char* n : {"window_left", "window_right", "softcap"})
    if (tl::reads_name(prog_, n)) out.push_back(n);
  return out;
}

void Lowering::describe_scope(kir::Kernel& k, CppNames& names) const {
  kir::Scope& sc = k.scope;
  for (const auto& [var, ext] : grid_) {
    sc.grid.push_back({var, names.ident(var), "", {}});
    sc.grid_extents_cpp.push_back(names.int_expr(ext));
  }
  for (const auto& [name, fld] : runtime_dims_)  // ABI 8: splits 0 is one part
    sc.runtime_dims.push_back({name, names.ident(name), fld == "splits" ? "(p.splits > 1 ? p.splits : 1)" : "p." + fld, {}});
  for (const auto& [n, v] : fixed_dims_) sc.fixed.push_back({n, names.ident(n), std::to_string(v), {}});
  for (const auto& [n, v] : consts_) sc.fixed.push_back({n, names.ident(n), std::to_string(v), {}});
  // the C ABI's tensors, and the auxiliary globals (ABI slots in TL order; the declarations read them)
  for (const auto& st : prog_.stmts) {
    if (st.kind != tl::Stmt::Kind::Allocate || st.alloc.space != tl::Space::Global) continue;
    const auto& a = st.alloc;
    if (a.name == "Q" || a.name == "K" || a.name == "V" || a.name == "O" || a.name == "LSE") {
      sc.globals.push_back(tl_ref(st));
      continue;
    }
    kir::Aux x;
    x.name = a.name;
    x.slot = int(sc.aux.size());
    x.is_int = a.dtype && *a.dtype == tl::DType::I32;
    for (const auto& e : a.shape) x.extents_cpp.push_back(names.int_expr(e));
    x.tl = tl_ref(st);
    names.aux_extents[a.name] = x.extents_cpp;
    sc.aux.push_back(x);
  }
  for (const auto& st : prog_.stmts) {
    const bool count_let = st.kind == tl::Stmt::Kind::Let && (st.let.name == "seqlen_k" || st.let.name == "seqlen_q") &&
                           ((st.let.name == "seqlen_k" && !info_.kv_lengths.empty()) ||
                            (st.let.name == "seqlen_q" && !info_.q_lengths.empty()));
    if (count_let) {  // a KV cache's key count, a ragged batch's counts: clamped to the Dim's launch value
      const bool q = st.let.name == "seqlen_q";
      const std::string cpp = "min(max(" + names.int_expr(st.let.value) + ", 0), p." + st.let.name + ")";
      (q ? sc.q_lengths : sc.kv_lengths) = q ? info_.q_lengths : info_.kv_lengths;
      (q ? sc.q_count_cpp : sc.kv_count_cpp) = cpp;
      (q ? sc.q_count_tl : sc.kv_count_tl) = tl_ref(st);
      continue;
    }
    if (st.kind == tl::Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && (st.alloc.name == "Q" || st.alloc.name == "K") &&
        st.alloc.offset.size() == 2)
      for (const auto& at : st.attrs)
        if (at.key == "ragged" && at.value) {
          const bool q = st.alloc.name == "Q";
          (q ? sc.q_ragged : sc.kv_ragged) = at.value->name;
          (q ? sc.q_start_cpp : sc.kv_start_cpp) = "min(max(aux_" + at.value->name + "[" + names.int_expr(st.alloc.offset[0]) +
                                                   "], 0), p." + (q ? "total_q" : "total_k") + ")";
          sc.ragged_tl = tl_ref(st);
        }
    if (st.kind == tl::Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && st.alloc.name == "K")
      for (const auto& at : st.attrs)
        if (at.key == "paged" && at.value) sc.paged = at.value->name, sc.paged_tl = tl_ref(st);
    if (st.kind == tl::Stmt::Kind::Let)
      sc.lets.push_back({st.let.name, names.ident(st.let.name), names.int_expr(st.let.value), tl_ref(st)});
    if (st.kind != tl::Stmt::Kind::Variant) continue;
    const tl::VariantStmt& v = st.variant;
    kir::Decl d;
    d.name = v.name;
    d.is_mask = v.is_mask;
    DeclType t;
    d.body_cpp = names.decl_expr(v.expr, t);
    if (!v.is_mask && t != DeclType::Float) d.body_cpp = "float(" + d.body_cpp + ")";
    DeclType ct;
    d.empty_cpp = v.empty_when ? names.decl_expr(*v.empty_when, ct) : "false";
    d.full_cpp = v.full_when ? names.decl_expr(*v.full_when, ct) : "false";
    d.derived = v.derived;
    d.expr_tl = tl::print_expr(v.expr);
    d.tl = tl_ref(st);
    sc.decls.push_back(d);
  }
  sc.launch_args = launch_args();
  sc.kernel_mask = mask_kind(mask_.kind);
  // a window's bounds are the Kernel statement's (the loop's Mask names the kind)
  const auto window = [&] {
    if (sc.kernel_mask != kir::MaskKind::Window && sc.mask != kir::MaskKind::Window) return;
    sc.window_left_cpp = names.int_expr(mask_.left);
    sc.window_right_cpp = names.int_expr(mask_.right);
    tl::Env env;
    env.ints = env_;
    sc.window_left = tl::eval_int(mask_.left, env, nullptr).value_or(-1);
    sc.window_right = tl::eval_int(mask_.right, env, nullptr).value_or(-1);
  };
  if (!loop_) return window();
  // the loop's Masks: the kernel's (the first) and the named ones, and {skip}
  for (const auto& s : loop_->loop.body) {
    if (s.kind != tl::Stmt::Kind::Compute || s.compute.op != "Mask") continue;
    const tl::MaskSpec& m = s.compute.mask;
    if (m.kind == tl::MaskSpec::Kind::Named) {
      sc.named_masks.push_back(m.name);
      sc.named_masks_tl.push_back(tl_ref(s));
    } else if (!sc.mask_tl.line) {
      sc.mask_tl = tl_ref(s);
      sc.mask = mask_kind(m.kind);
    }
  }
  window();
  for (const auto& a : loop_->attrs) {
    if (a.key != "skip" || !a.value || a.value->kind != tl::Expr::Kind::Name) continue;
    if (auto t = skip_tile(*loop_, a.value->name, names)) {
      sc.skip = a.value->name;
      sc.skip_row_cpp = t->row;
      sc.skip_col_cpp = t->col;
      sc.skip_cols_cpp = t->cols;
    }
  }
}

kir::Kernel Lowering::describe() const {
  kir::Kernel k;
  k.family = "mma";
  describe_header(k);
  CppNames names = this->names();
  describe_scope(k, names);
  k.launch.threads = threads_;
  k.launch.smem_bytes = smem_bytes_;
  kir::Mma& m = k.mma;
  m.atom = arch_.mma_atom;
  m.instr = arch_.mma_instr;
  m.tile_m = tile_m_;
  m.warps = warps_;
  m.stages = stages_;
  m.tile_k = arch_.tile_k;
  m.cp_async = arch_.cp_async;
  m.vt_buffer = vt_buffer_;
  m.resident_a.assign(resident_a_.begin(), resident_a_.end());
  m.epilogue_bytes = smem_stage_bytes_;
  // shared memory: the TL's buffers in order, each rounded up to 128 bytes (qattn::smem_bytes), then
  // fp8's V^T buffer; the epilogue stages O over them
  int64_t at = 0;
  const auto place = [&](kir::SharedBuf b) {
    b.offset = at;
    at += (b.bytes + 127) / 128 * 128;
    k.smem.push_back(b);
  };
  for (const auto& n : shared_order_) {
    const SharedBuf& s = shared_.at(n);
    kir::SharedBuf b;
    b.name = n;
    b.cpp = "s" + n;
    b.rows = s.rows;
    b.cols = b.cols_padded = s.cols;
    b.stages = s.staged ? stages_ : 1;
    b.dtype = s.dtype;
    b.bytes = s.bytes;
    for (const auto& st : prog_.stmts)
      if (st.kind == tl::Stmt::Kind::Allocate && st.alloc.name == n && st.alloc.space == tl::Space::Shared) b.tl = tl_ref(st);
    place(b);
  }
  if (!vt_buffer_.empty()) {
    const SharedBuf& s = shared_.at(vt_buffer_);
    kir::SharedBuf b;
    b.name = vt_buffer_ + "t";
    b.cpp = "s" + vt_buffer_ + "t";
    b.rows = s.cols;
    b.cols = b.cols_padded = s.rows;
    b.dtype = s.dtype;
    b.bytes = int64_t(s.rows) * s.cols * dtype_bytes(s.dtype);
    b.alias_of = "";
    b.tl.text = vt_buffer_ + "^T for the P V GEMM (fp8 operands are K-major only)";
    place(b);
  }
  // the GEMMs in program order
  std::vector<const tl::Stmt*> order;
  std::function<void(const std::vector<tl::Stmt>&)> walk = [&](const std::vector<tl::Stmt>& body) {
    for (const auto& s : body) {
      if (gemms_.count(&s)) order.push_back(&s);
      if (s.kind == tl::Stmt::Kind::For) walk(s.loop.body);
    }
  };
  walk(prog_.stmts);
  for (const tl::Stmt* s : order) {
    const GemmPlan& g = gemms_.at(s);
    kir::MmaGemm x;
    x.tl = tl_ref(*s);
    x.a = g.a_name;
    x.b = g.b_name;
    x.c = g.c_name;
    x.a_source = g.a == GemmPlan::A::Register   ? kir::MmaGemm::ASource::Register
                 : g.a == GemmPlan::A::Resident ? kir::MmaGemm::ASource::Resident
                                                : kir::MmaGemm::ASource::Streamed;
    x.b_kmajor = g.b_kmajor;
    x.accumulate = g.accumulate;
    x.descale_cpp = g.descale;
    m.gemms.push_back(x);
  }
  // the key loop's statements: what each fills and reads in shared memory
  if (loop_) {
    for (const auto& s : loop_->loop.body) {
      kir::MmaStmt x;
      x.tl = tl_ref(s);
      if (s.kind == tl::Stmt::Kind::Copy && s.copy.from == tl::Space::Global && s.copy.to == tl::Space::Shared) x.fills = s.copy.name;
      if (s.kind == tl::Stmt::Kind::Copy && s.copy.from == tl::Space::Shared && s.copy.to == tl::Space::Register)
        x.reads.push_back(s.copy.name);
      auto g = gemms_.find(&s);
      if (g != gemms_.end()) {
        if (g->second.a != GemmPlan::A::Register && g->second.a != GemmPlan::A::Resident) x.reads.push_back(g->second.a_name);
        x.reads.push_back(g->second.b_name);
      }
      m.loop.push_back(x);
    }
  }
  kir::MmaPipeline& p = m.pipeline;
  p.pipelined = sched_.pipelined;
  p.why_not = sched_.why_not;
  if (sched_.pipelined) {
    p.x = sched_.x;
    p.y = sched_.y;
    p.x_copy = int(sched_.x_copy);
    p.y_copy = int(sched_.y_copy);
    p.x_first = int(sched_.a_pos);
    for (size_t i = 0; i < m.loop.size(); ++i) {
      const auto& r = m.loop[i].reads;
      if (std::find(r.begin(), r.end(), p.x) != r.end()) p.x_last = int(i);
      if (std::find(r.begin(), r.end(), p.y) != r.end() && p.y_first < 0) p.y_first = int(i);
    }
    if (sched_.prologue_after >= 0) p.prologue_after = tl_ref(prog_.stmts[size_t(sched_.prologue_after)]);
  }
  return k;
}

}  // namespace qattn::backend::detail
