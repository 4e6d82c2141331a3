// Stage 2 emitter: Compute and Reshape statements, and the stores of the epilogue. Each TL Compute
// lowers to one call of the device runtime (device/qattn/*.cuh) on this thread's fragments:
//   2-D register tile  -> accumulator fragment tXrY (MMA, MMA_M, MMA_N)
//   row vector         -> rY, one value per tile row this thread holds
// A positive scalar `Compute Multiply S, c` on a tile that is not loop-carried is folded into the
// consumers of S (pending scale): RowMax scales the row maxima, the row-broadcast Subtract becomes
// one FFMA per element (S * c - m), any other consumer applies it first. Values are unchanged
// (max(c x) = c max(x) for c > 0); the kernel saves one multiply per score.
#include "backend/lowering.h"
#include "tl/printer.h"

namespace qattn::backend::detail {
namespace {

std::string with_scale(const RegTensor& t) { return t.pending_scale.empty() ? "" : ", " + t.pending_scale; }

}  // namespace

RegTensor* Lowering::reg(const std::string& name) {
  auto it = regs_.find(name);
  return it == regs_.end() ? nullptr : &it->second;
}

std::string Lowering::operand_name(const tl::Operand& o) const {
  if (o.expr.kind == tl::Expr::Kind::Name && regs_.count(o.expr.name)) return o.expr.name;
  return "";
}

void Lowering::materialize(Writer& w, RegTensor& t) {
  if (t.pending_scale.empty()) return;
  w.line("qattn::rescale_scalar(" + t.var + ", " + t.pending_scale + ");  // apply the pending factor");
  t.pending_scale.clear();
}

// The result tensor of a Compute: the first operand (in place), an existing register tensor
// (`and get` an allocated name) or a new one shaped like `like`.
RegTensor& Lowering::target_of(Writer& w, const tl::ComputeStmt& c, const RegTensor& like, tl::DType dt) {
  if (c.result == tl::ComputeStmt::Result::InPlace) return regs_[c.operands[0].expr.name];
  if (RegTensor* t = reg(c.target)) return *t;
  RegTensor r;
  r.kind = like.kind == RegKind::Rows ? RegKind::Rows : RegKind::Tile;
  r.family = like.family;
  r.rows = like.rows;
  r.cols_expr = like.cols_expr;
  r.dtype = dt;
  r.var = r.kind == RegKind::Rows ? "r" + c.target : "t" + like.family + "r" + c.target;
  w.line("Tensor " + r.var + " = make_fragment_like<" + cute_type(dt) + ">(" + like.var + ");  // " +
         (r.kind == RegKind::Rows ? "(ROWS)" : "(MMA, MMA_M, MMA_N)"));
  if (in_loop_) loop_created_.insert(c.target);
  return regs_[c.target] = r;
}

void Lowering::ensure_ready(Writer& w, const std::string& tensor) {
  if (in_loop_ && sched_.pipelined && (tensor == sched_.x || tensor == sched_.y)) return;
  if (body_unwaited_.count(tensor)) {
    w.line("qattn::wait<0>();");
    w.line("__syncthreads();");
    body_unwaited_.clear();
    return;
  }
  emit_wait_for(w, tensor);
}

void Lowering::emit_compute(Writer& w, const tl::Stmt& s) {
  const auto& c = s.compute;
  if (c.op == "GEMM") return emit_gemm(w, s);
  if (c.op == "Mask" && c.mask.kind == tl::MaskSpec::Kind::Named) return emit_named_mask(w, s);
  if (c.op == "Mask") return emit_mask(w, s);
  if (c.op == "Modify") return emit_modify(w, s);
  auto unsupported = [&](const std::string& why) {
    diags_.error("XL0301", s.loc, "`" + tl::print_stmt(s, 0) + "` is not lowered: " + why,
                 "element-wise ops take register tiles, row vectors and scalars; see docs/translation.md");
  };
  const std::string xn = operand_name(c.operands[0]);
  RegTensor* xp = xn.empty() ? nullptr : reg(xn);
  if (!xp || (xp->kind != RegKind::Tile && xp->kind != RegKind::Rows)) {
    return unsupported("its first operand is not a register tile or row vector in this kernel");
  }
  RegTensor& x = *xp;
  const char* base = op_functor(c.op);
  const std::string fn = base ? std::string("qattn::op::") + base : "";
  const tl::DType dt = c.target_dtype.value_or(tl::DType::F32);

  if (c.op == "Add" || c.op == "Subtract" || c.op == "Multiply" || c.op == "Divide" || c.op == "Max") {
    const std::string yn = operand_name(c.operands[1]);
    RegTensor* y = yn.empty() ? nullptr : reg(yn);
    if (!y && c.operands[1].expr.kind == tl::Expr::Kind::Name && info_.tensors.count(c.operands[1].expr.name))
      return unsupported("its second operand is not a register tensor here");
    const bool fold = c.op == "Multiply" && c.result == tl::ComputeStmt::Result::InPlace && !y && x.kind == RegKind::Tile &&
                      is_positive_scalar(c.operands[1].expr) && !info_.tensors.at(xn).loop_carried;
    if (fold) {
      const std::string var = "scale_" + xn + (tmp_counter_++ ? std::to_string(tmp_counter_) : "");
      comment_stmt(w, s, "folded into the consumers of " + xn);
      w.line("const float " + var + " = " + (x.pending_scale.empty() ? "" : x.pending_scale + " * ") + "(" +
             cpp_float(c.operands[1].expr) + ");");
      x.pending_scale = var;
      return;
    }
    comment_stmt(w, s);
    if (y) materialize(w, *y);
    RegTensor xcopy = x;
    RegTensor& z = target_of(w, c, x, dt);
    const std::string sc = with_scale(xcopy);
    if (!y) {
      w.line("qattn::ew_scalar<" + fn + ">(" + xcopy.var + ", " + cpp_float(c.operands[1].expr) + ", " + z.var + sc + ");");
    } else if (y->kind == xcopy.kind) {
      w.line("qattn::ew<" + fn + ">(" + xcopy.var + ", " + y->var + ", " + z.var + sc + ");");
    } else if (xcopy.kind == RegKind::Tile && y->kind == RegKind::Rows) {
      w.line("qattn::ew_rows<" + fn + ">(" + xcopy.var + ", " + y->var + ", " + z.var + sc + ");" +
             (c.op == "Subtract" && !sc.empty() ? "  // one FFMA per element: x * scale - row" : ""));
    } else {
      return unsupported("a row vector combined with a tile");
    }
    if (&z == &x || z.var == xcopy.var) reg(xn)->pending_scale.clear();
    z.pending_scale.clear();
    return;
  }
  if (c.op == "Exp" || c.op == "Exp2" || c.op == "Log" || c.op == "Log2") {
    comment_stmt(w, s);
    RegTensor xcopy = x;
    RegTensor& z = target_of(w, c, x, dt);
    w.line("qattn::map<" + fn + ">(" + xcopy.var + ", " + z.var + with_scale(xcopy) + ");");
    if (RegTensor* xr = reg(xn); xr && xr->var == z.var) xr->pending_scale.clear();
    z.pending_scale.clear();
    return;
  }
  if (c.op == "Convert") {
    comment_stmt(w, s);
    const std::string call = "qattn::convert<" + std::string(cute_type(dt)) + ">(" + x.var + with_scale(x) + ")";
    if (RegTensor* z = reg(c.target)) {
      w.line("cute::copy(" + call + ", " + z->var + ");");
      z->pending_scale.clear();
      return;
    }
    RegTensor r = x;
    r.dtype = dt;
    r.pending_scale.clear();
    r.var = x.kind == RegKind::Rows ? "r" + c.target : "t" + x.family + "r" + c.target;
    w.line("Tensor " + r.var + " = " + call + ";  // " + (x.kind == RegKind::Rows ? "(ROWS)" : "(MMA, MMA_M, MMA_N)"));
    if (in_loop_) loop_created_.insert(c.target);
    regs_[c.target] = r;
    return;
  }
  if (c.op == "RowMax" || c.op == "RowSum") {
    if (x.kind != RegKind::Tile) return unsupported("a row reduction of a row vector");
    comment_stmt(w, s);
    const bool acc = c.result == tl::ComputeStmt::Result::Accumulate;
    RegTensor* z = reg(c.target);
    if (!z) {
      RegTensor r;
      r.kind = RegKind::Rows;
      r.var = "r" + c.target;
      r.rows = tile_m_;
      w.line("Tensor " + r.var + " = make_tensor<float>(Shape<Int<kRowsPerThread>>{});  // (ROWS)");
      if (in_loop_) loop_created_.insert(c.target);
      z = &(regs_[c.target] = r);
    }
    w.line(std::string("qattn::") + (c.op == "RowMax" ? "row_max<" : "row_sum<") + (acc ? "true" : "false") + ">(" + x.var +
           ", " + z->var + with_scale(x) + ");" + (x.pending_scale.empty() || c.op != "RowMax" ? "" : "  // max(c s) = c max(s)"));
    return;
  }
  if (c.op == "Rescale") {
    comment_stmt(w, s);
    const std::string an = operand_name(c.operands[1]);
    if (RegTensor* a = an.empty() ? nullptr : reg(an)) {
      if (a->kind != RegKind::Rows) return unsupported("Rescale by a tile");
      materialize(w, *a);
      w.line("qattn::rescale(" + x.var + ", " + a->var + ");");
    } else {
      w.line("qattn::rescale_scalar(" + x.var + ", " + cpp_float(c.operands[1].expr) + ");");
    }
    return;
  }
  if (c.op == "Normalize") {
    const std::string ln = operand_name(c.operands[1]);
    RegTensor* l = ln.empty() ? nullptr : reg(ln);
    if (x.kind != RegKind::Tile || !l || l->kind != RegKind::Rows) return unsupported("Normalize takes a tile and a row vector");
    comment_stmt(w, s, x.pending_scale.empty() ? "" : "with the pending factor " + x.pending_scale);
    w.line("qattn::normalize(" + x.var + ", " + l->var + with_scale(x) + ");");
    x.pending_scale.clear();
    return;
  }
  unsupported("unknown op");
}

void Lowering::emit_gemm(Writer& w, const tl::Stmt& s) {
  const auto& c = s.compute;
  const GemmPlan& g = gemms_.at(&s);
  comment_stmt(w, s);
  const std::string stage = in_loop_ ? "stage" : "0";
  // B: K-major (B^T stated) through ldmatrix, else the V^T view (ldmatrix.trans; fp8: the
  // transposed shared copy)
  std::string b_view, b_atom;
  const SharedBuf& bs = shared_.at(g.b_name);
  std::string n_expr;
  if (g.b_kmajor) {
    b_view = stage_view(g.b_name, stage);
    b_atom = "SmemCopyAtom";
    n_expr = bs.rows_expr;
  } else if (arch_.fp8) {
    b_view = "s" + g.b_name + "t";
    b_atom = "SmemCopyAtom";
    n_expr = bs.cols_expr;
  } else {
    b_view = bs.staged ? "s" + g.b_name + "t(_, _, " + stage + ")" : "s" + g.b_name + "t";
    b_atom = "SmemCopyAtomT";
    n_expr = bs.cols_expr;
  }
  ensure_ready(w, g.b_name);
  RegTensor* acc = reg(g.c_name);
  if (!g.accumulate) {
    if (!acc) {
      RegTensor r;
      r.kind = RegKind::Tile;
      r.family = g.c_name;
      r.var = "t" + g.c_name + "r" + g.c_name;
      r.rows = tile_m_;
      r.cols_expr = n_expr;
      w.line("Tensor " + r.var + " = partition_fragment_C(tiled_mma, Shape<Int<" + tile_m_expr_ + ">, Int<" + n_expr +
             ">>{});  // (MMA, MMA_M, MMA_N)");
      if (in_loop_) loop_created_.insert(g.c_name);
      acc = &(regs_[g.c_name] = r);
    }
    w.line("clear(" + acc->var + ");");
    acc->pending_scale = g.descale;
  } else {
    if (!acc || acc->kind != RegKind::Tile) {
      diags_.error("XL0301", c.target_loc, "GEMM accumulator " + g.c_name + " is not a register tile here", "");
      return;
    }
    if (acc->pending_scale != g.descale) {
      if (!g.descale.empty()) {
        diags_.error("XL0301", s.loc, "fp8 GEMM accumulates into " + g.c_name + ", which is not zero-initialised with the same descale",
                     "accumulate the P V products into a tile allocated with `init 0`");
        return;
      }
      materialize(w, *acc);
    }
  }
  if (g.a == GemmPlan::A::Streamed) {
    ensure_ready(w, g.a_name);
    w.line("qattn::gemm_ss<SmemCopyAtom, " + b_atom + ">(tiled_mma, " + acc->var + ", " + stage_view(g.a_name, stage) + ", " +
           b_view + ", tid);  // A and B fragments streamed from shared memory");
  } else {
    RegTensor* a = reg(g.a_name);
    if (!a || a->kind != RegKind::OperandA) {
      diags_.error("XL0303", c.operands[0].loc, "A operand " + g.a_name + " is not in the MMA_A layout here",
                   "Reshape it from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K) first");
      return;
    }
    w.line("qattn::gemm_rs<" + b_atom + ">(tiled_mma, " + acc->var + ", " + a->var + ", " + b_view +
           ", tid);  // A in registers, B fragments streamed from shared memory");
  }
}

void Lowering::emit_reshape(Writer& w, const tl::Stmt& s) {
  const auto& r = s.reshape;
  RegTensor* src = reg(r.name);
  if (!src || src->kind != RegKind::Tile) {
    diags_.error("XL0301", s.loc, "Reshape of " + r.name + ", which is not a register tile here", "");
    return;
  }
  const char* how = arch_.sm == 75 ? "identity: the m16n8k8 accumulator layout is the A layout"
                    : arch_.fp8    ? "4 accumulator tiles form one 16x32 A block, keys in a permuted order that V^T repeats; bytes packed per A register"
                                   : "2 accumulator tiles (16x8) form one 16x16 A block; registers regrouped, no data moves";
  comment_stmt(w, s, how);
  materialize(w, *src);
  const std::string family = reshape_family_.at(r.name);
  std::string var = "t" + family + "r" + r.name;
  if (var == src->var) var += "_a";
  if (arch_.fp8)
    w.line("Tensor " + var + " = " + arch_.reshape_fn + "_regs(" + src->var + ");  // (MMA, MMA_M, MMA_K)");
  else
    w.line("Tensor " + var + " = make_tensor(" + src->var + ".data(), " + arch_.reshape_fn + "(" + src->var +
           ".layout()));  // (MMA, MMA_M, MMA_K)");
  src->kind = RegKind::OperandA;
  src->var = var;
  src->family = family;
}

void Lowering::emit_mask(Writer& w, const tl::Stmt& s) {
  const auto& c = s.compute;
  comment_stmt(w, s, "only tiles the mask cuts are touched");
  const std::string xn = operand_name(c.operands[0]);
  RegTensor* x = xn.empty() ? nullptr : reg(xn);
  if (!x || x->kind != RegKind::Tile || c.at.size() != 2) {
    diags_.error("XL0301", s.loc, "Mask of something that is not a 2-D register score tile", "`Compute Mask S at [m_block, j] with causal`");
    return;
  }
  std::string kind = "Bounds", extra;
  switch (c.mask.kind) {
    case tl::MaskSpec::Kind::Causal: kind = "Causal"; break;
    case tl::MaskSpec::Kind::CausalTopLeft: kind = "CausalTopLeft"; break;
    case tl::MaskSpec::Kind::Window:
      kind = "Window";
      extra = ", " + cpp_int(c.mask.left) + ", " + cpp_int(c.mask.right);
      break;
    default: break;
  }
  auto mul = [](const std::string& a, const std::string& b) {
    auto wrap = [](const std::string& e) { return e.find_first_of(" +-") == std::string::npos ? e : "(" + e + ")"; };
    return wrap(a) + " * " + wrap(b);
  };
  w.line("qattn::apply_mask<qattn::MaskKind::" + kind + ", " + tile_m_expr_ + ", " + x->cols_expr + ">(tiled_mma, " + x->var +
         ", " + mul(cpp_int(c.at[0]), tile_m_expr_) + ", " + mul(cpp_int(c.at[1]), x->cols_expr) +
         ", qattn::MaskArgs{" + seqlen_q_cpp() + ", " + seqlen_k_cpp() + extra + "}, tid);");
}

void Lowering::emit_store(Writer& w, const tl::Stmt& s) {
  const auto& c = s.copy;
  RegTensor* x = reg(c.name);
  if (c.name == "O") {
    if (!x || x->kind != RegKind::Tile) {
      diags_.error("XL0301", s.loc, "O is not a register tile here", "");
      return;
    }
    comment_stmt(w, s, "staged through shared memory, 16-byte stores, rows past seqlen_q skipped");
    materialize(w, *x);
    w.line("qattn::store_tile<kThreads, " + tile_m_expr_ + ", " + v_cols_expr_ + ">(tiled_mma, " + x->var + ", mO, " +
           cpp_int(c.coord[0]) + ", smem, tid);");
    return;
  }
  if (!x || x->kind != RegKind::Rows || x->dtype != tl::DType::F32) {
    diags_.error("XL0301", s.loc, "LSE is not an fp32 register row vector here", "");
    return;
  }
  comment_stmt(w, s, "skipped when the caller passes no LSE buffer");
  w.line("if (p.lse != nullptr) qattn::store_rows<" + tile_m_expr_ + ">(tiled_mma, " + x->var + ", mLSE, " +
         cpp_int(c.coord[0]) + ", tid);");
}

}  // namespace qattn::backend::detail
