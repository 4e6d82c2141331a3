// The TL checker's Compute and Reshape rules: operand counts and result forms (TL0408), operand
// memory levels (TL0403), symbolic shapes of GEMM (TL0401/TL0402) and element-wise / reduction /
// row ops (TL0405), GEMM operand dtypes (TL0407), masks (TL0409) and register layouts
// (TL0501/TL0502). Shapes are compared structurally as written (`BN` and `d` differ even when
// numerically equal). Input: one statement plus the walker's symbol/tensor state; output:
// diagnostics and the updated tensor state (results declared, layouts, data flow).
#include <optional>

#include "tl/checker_internal.h"
#include "tl/variant.h"

namespace qattn::tl::detail {

struct Walker::Opnd {
  bool is_tensor = false;
  std::string name;
  Space space = Space::Register;
  std::vector<Expr> shape;
  bool transposed = false;
  SrcLoc loc;
  Layout layout = Layout::Unknown;
  std::optional<DType> dtype;
};

namespace {

enum class OpClass { Gemm, Binary, Unary, Convert, Reduce, RowOp, Mask, Derivative, Gradient };

struct OpSpec {
  const char* name;
  OpClass cls;
  size_t operands;
};

const OpSpec kOps[] = {
    {"GEMM", OpClass::Gemm, 2},     {"Add", OpClass::Binary, 2},    {"Subtract", OpClass::Binary, 2},
    {"Multiply", OpClass::Binary, 2}, {"Divide", OpClass::Binary, 2}, {"Max", OpClass::Binary, 2},
    {"Exp", OpClass::Unary, 1},     {"Exp2", OpClass::Unary, 1},    {"Log", OpClass::Unary, 1},
    {"Log2", OpClass::Unary, 1},    {"Convert", OpClass::Convert, 1}, {"RowMax", OpClass::Reduce, 1},
    {"RowSum", OpClass::Reduce, 1}, {"Rescale", OpClass::RowOp, 2}, {"Normalize", OpClass::RowOp, 2},
    {"Mask", OpClass::Mask, 1},     {"Modify", OpClass::Mask, 1},   {"Derivative", OpClass::Derivative, 2},
    {"Gradient", OpClass::Gradient, 2},
};

const OpSpec* find_op(const std::string& n) {
  for (const auto& o : kOps) {
    if (n == o.name) return &o;
  }
  return nullptr;
}

std::vector<Expr> eff(const std::vector<Expr>& s, bool t) {
  if (s.size() != 2) return s;
  return t ? std::vector<Expr>{s[1], s[0]} : s;
}

std::string opnd_text(const std::string& n, bool t) { return n + (t ? "^T" : ""); }

const char* kReshapeHint = "(MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)";

}  // namespace

bool Walker::resolve_tensor_operand(const Operand& o, const Stmt& s, bool gemm, Opnd& out) {
  SrcLoc at = pick(o.loc, pick(o.expr.loc, s.loc));
  const std::string& op = s.compute.op;
  if (o.expr.kind != Expr::Kind::Name) {
    error(s, "TL0306", at, "'" + fmt_expr(o.expr) + "' is not a tensor; " + op + " needs a tensor here",
          gemm ? "GEMM operands are tensor names, e.g. `Compute GEMM Q, K^T and get S`"
               : "write the tensor first: `Compute " + op + " S, " + fmt_expr(o.expr) + "`");
    return false;
  }
  const std::string& n = o.expr.name;
  auto sym = syms_.find(n);
  if (sym == syms_.end()) {
    if (is_builtin_scalar(n) || is_launch_int(n)) {
      error(s, "TL0306", at, "'" + n + "' is a scalar; " + op + " needs a tensor here",
            "write the tensor first: `Compute " + op + " S, " + n + "`");
    } else {
      report_undeclared(n, at, s, "tensor");
    }
    return false;
  }
  if (sym->second.kind != SymKind::Tensor) {
    error(s, "TL0306", at, "'" + n + "' is " + sym_kind_name(sym->second.kind) + ", not a tensor",
          gemm ? "GEMM multiplies two tensors" : "write the tensor first: `Compute " + op + " S, " + n + "`");
    return false;
  }
  Buffer* b = buffer(n, Space::Register);
  if (!b && gemm) b = buffer(n, Space::Shared);
  if (!b && (explain_gone_buffer(n, Space::Register, at, s) || (gemm && explain_gone_buffer(n, Space::Shared, at, s)))) {
    return false;
  }
  if (!b) {
    bool has_shared = buffer(n, Space::Shared) != nullptr;
    error(s, "TL0403", at,
          "'" + n + "' has no " + (gemm ? "register or shared" : "register") + " buffer; " + op + " reads " +
              (gemm ? "its operands from registers (or shared memory)" : "register tensors only"),
          has_shared ? "copy it to registers first: `Copy " + n + " from shared to register` (with `Allocate " + n +
                           " in register ...`)"
                     : "load it first: `Copy " + n + " (...) in coordinate [...] from global to shared`" +
                           std::string(gemm ? "" : ", then `Copy " + n + " from shared to register`"));
    return false;
  }
  out.is_tensor = true;
  out.name = n;
  out.space = buffer(n, Space::Register) ? Space::Register : Space::Shared;
  out.shape = b->shape;
  out.transposed = o.transposed;
  out.loc = at;
  out.layout = out.space == Space::Shared ? Layout::Operand : b->layout;
  out.dtype = b->dtype;
  return true;
}

bool Walker::resolve_operand(const Operand& o, const Stmt& s, Opnd& out) {
  if (o.expr.kind == Expr::Kind::Name) {
    auto sym = syms_.find(o.expr.name);
    if (sym != syms_.end() && sym->second.kind == SymKind::Tensor) return resolve_tensor_operand(o, s, false, out);
  }
  out.is_tensor = false;
  out.loc = pick(o.loc, pick(o.expr.loc, s.loc));
  return check_expr(o.expr, Ctx::Scalar, s);
}

void Walker::put_result(const Stmt& s, const std::vector<Expr>& shape, Layout layout, const char* code,
                        std::optional<DType> default_dtype) {
  const ComputeStmt& c = s.compute;
  SrcLoc at = pick(c.target_loc, s.loc);
  const std::string& t = c.target;
  auto sym = syms_.find(t);
  if (sym != syms_.end() && sym->second.kind != SymKind::Tensor) {
    error(s, "TL0306", at, "'" + t + "' is " + sym_kind_name(sym->second.kind) + ", not a tensor",
          "choose another name for the result");
    return;
  }
  Buffer* b = buffer(t, Space::Register);
  if (c.result == ComputeStmt::Result::Accumulate) {
    if (!b) {
      if (explain_gone_buffer(t, Space::Register, at, s)) {
        return;
      } else if (sym == syms_.end()) {
        report_undeclared(t, at, s, "tensor",
                          "`and accumulate` adds into an existing register tensor: allocate it before the loop (`Allocate " + t +
                              " in register " + fmt_shape(shape) + " fp32 init 0`), or use the existing accumulator");
      } else {
        error(s, "TL0403", at, "'" + t + "' has no register buffer; `and accumulate` needs a register tensor",
              "add `Allocate " + t + " in register " + fmt_shape(shape) + " fp32 init 0` before the loop");
      }
      return;
    }
    if (!shape.empty() && !same_shape(shape, b->shape)) {
      error(s, code, at, "the result is " + fmt_shape(shape) + " but the accumulator '" + t + "' is " + fmt_shape(b->shape),
            "accumulate into a register tensor of shape " + fmt_shape(shape));
    }
    read(t, Space::Register, at, s);
    write_full(t, Space::Register);
    if (Buffer* r = buffer(t, Space::Register); r && layout != Layout::Unknown) r->layout = layout;
    return;
  }
  // and get
  if (b) {
    if (!shape.empty() && !same_shape(shape, b->shape)) {
      error(s, code, at, "the result is " + fmt_shape(shape) + " but '" + t + "' is " + fmt_shape(b->shape),
            "use a new name (`and get " + t + "2`), or give '" + t + "' the shape " + fmt_shape(shape));
    }
    if (c.target_dtype && b->dtype && *c.target_dtype != *b->dtype) {
      error(s, "TL0407", at,
            "'" + t + "' is " + to_string(*b->dtype) + " but this result asks for " + to_string(*c.target_dtype),
            "use a new name for the " + std::string(to_string(*c.target_dtype)) + " result");
    }
    write_full(t, Space::Register);
    b->layout = layout;
    return;
  }
  if (t.empty()) return;
  Buffer& nb = declare_buffer(t, Space::Register, at, false);
  nb.shape = shape;
  nb.dtype = c.target_dtype ? c.target_dtype : default_dtype;
  nb.layout = layout;
  write_full(t, Space::Register);
  TensorInfo& ti = info_.tensors[t];
  ti.in_register = true;
  ti.register_shape = shape;
  ti.register_dtype = nb.dtype.value_or(DType::F32);
}

void Walker::gemm(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  Opnd a, b;
  bool ok = resolve_tensor_operand(c.operands[0], s, true, a);
  ok = resolve_tensor_operand(c.operands[1], s, true, b) && ok;
  if (!ok) return;
  if (a.transposed && a.space == Space::Register) {
    // A transposed A operand is read from shared memory (ldmatrix.trans on sm80, a K-major view for
    // wgmma): a register tile (P, dS in the backward) is staged there by a Copy first.
    if (buffer(a.name, Space::Shared)) {
      a.space = Space::Shared;
      a.layout = Layout::Operand;
      a.shape = buffer(a.name, Space::Shared)->shape;
    } else {
      error(s, "TL0403", a.loc,
            "'" + a.name + "^T' is a transposed A operand, read from shared memory, and '" + a.name + "' has no shared buffer",
            "stage it: `Allocate " + a.name + " in shared " + fmt_shape(a.shape) + "` before the loop and `Copy " + a.name +
                " from register to shared` before this GEMM");
      poisoned.insert(&s);
      return;
    }
  } else if (a.space == Space::Register && a.layout == Layout::MmaC && split_columns_) {
    // `Role consumer ... split columns`: a GEMM accumulator tile staged whole in shared memory since
    // its last write (`Copy Pc from register to shared`, same dtype) is read from there, in operand
    // layout: the consumers' P, whose rows no warpgroup holds whole in its registers. Else (and in
    // any other program) it needs a Reshape.
    const Buffer* sh = buffer(a.name, Space::Shared);
    const Buffer* rg = buffer(a.name, Space::Register);
    if (sh && rg && sh->staged == rg->version && sh->dtype == rg->dtype && same_shape(sh->shape, rg->shape)) {
      a.space = Space::Shared;
      a.layout = Layout::Operand;
    }
  }
  read(a.name, a.space, a.loc, s);
  read(b.name, b.space, b.loc, s);
  for (const Opnd* o : {&a, &b}) {
    if (o->shape.size() != 2) {
      error(s, "TL0401", o->loc, "GEMM operands are 2-D tiles; '" + o->name + "' is " + fmt_shape(o->shape),
            "multiply 2-D tiles; use Rescale / Multiply for row vectors");
      ok = false;
    }
  }
  if (!ok) return;
  // Layouts: a GEMM accumulator must be re-laid out before it is the A operand of another GEMM.
  if (a.layout == Layout::MmaC) {
    error(s, "TL0501", a.loc,
          "missing Reshape: '" + a.name + "' holds a GEMM accumulator (layout MMA_C) and is used as the A operand",
          split_columns_ ? "the split-columns consumers read it from shared memory: `Allocate " + a.name + " in shared " +
                               fmt_shape(a.shape) + "` and `Copy " + a.name + " from register to shared` after its last write, "
                               "before this GEMM"
                         : "insert `Reshape " + a.name + " from " + kReshapeHint + "` before this GEMM");
  }
  if (b.layout == Layout::MmaC) {
    error(s, "TL0501", b.loc,
          "'" + b.name + "' holds a GEMM accumulator (layout MMA_C) and is used as the B operand",
          "accumulator registers cannot feed the B operand: make '" + b.name +
              "' the A operand (compute the transposed product), or stage it through a shared buffer of a tensor without a register buffer");
  } else if (b.layout == Layout::MmaA) {
    error(s, "TL0502", b.loc, "'" + b.name + "' is in layout MMA_A (after a Reshape) and is used as the B operand",
          "only the A operand takes MMA_A; remove the Reshape of '" + b.name + "' or swap the operands");
  }
  if (a.dtype && b.dtype && *a.dtype != *b.dtype) {
    const Opnd& wide = *a.dtype == DType::F32 ? a : b;
    const Opnd& other = &wide == &a ? b : a;
    error(s, "TL0407", s.loc,
          "GEMM operands have different dtypes: '" + a.name + "' is " + to_string(*a.dtype) + ", '" + b.name + "' is " +
              to_string(*b.dtype),
          "convert first: `Compute Convert " + wide.name + " and get " + wide.name + "16 " + to_string(*other.dtype) +
              "` and multiply " + wide.name + "16");
  }
  std::optional<std::vector<Expr>> target;
  if (c.result == ComputeStmt::Result::Accumulate ||
      (c.result == ComputeStmt::Result::Get && buffer(c.target, Space::Register))) {
    if (Buffer* t = buffer(c.target, Space::Register)) target = t->shape;
  }
  auto inner_ok = [&](bool ta, bool tb) { return eff(a.shape, ta)[1] == eff(b.shape, tb)[0]; };
  auto result = [&](bool ta, bool tb) { return std::vector<Expr>{eff(a.shape, ta)[0], eff(b.shape, tb)[1]}; };
  auto fits = [&](bool ta, bool tb) { return inner_ok(ta, tb) && (!target || same_shape(result(ta, tb), *target)); };
  bool ta = a.transposed, tb = b.transposed;
  std::vector<Expr> res = result(ta, tb);
  if (!fits(ta, tb)) {
    // Toggling B is always a candidate; toggling A only when the written `^T` on A is dropped or
    // the accumulator's shape confirms the toggled product (else the evidence is too weak).
    const std::pair<bool, bool> tries[] = {{ta, !tb}, {!ta, tb}, {!ta, !tb}};
    bool fixed = false;
    for (auto [xa, xb] : tries) {
      if (xa != ta && !ta && !target) continue;
      if (!fits(xa, xb)) continue;
      fixed = true;
      std::string what, fix;
      auto explain = [&](const Opnd& o, bool now, const char* role) {
        if (!what.empty()) what += "; ";
        what += "'" + o.name + "' is laid out " + fmt_shape(o.shape) + " (its " + to_string(o.space) + " buffer)";
        if (!fix.empty()) fix += " and ";
        fix += std::string("as the ") + role + " operand write `" + opnd_text(o.name, now) + "`";
      };
      if (xa != ta) explain(a, xa, "A");
      if (xb != tb) explain(b, xb, "B");
      error(s, "TL0402", xb != tb ? b.loc : a.loc,
            "transpose confusion in " + opnd_text(a.name, ta) + " * " + opnd_text(b.name, tb) + ": " + what,
            fix + " (every transpose is written in the TL; buffers keep the global row-major layout)");
      res = result(xa, xb);
      break;
    }
    if (!fixed) {
      auto ea = eff(a.shape, ta), eb = eff(b.shape, tb);
      if (!inner_ok(ta, tb)) {
        error(s, "TL0401", s.loc,
              "GEMM shapes disagree: " + opnd_text(a.name, ta) + " is " + fmt_shape(ea) + ", " + opnd_text(b.name, tb) +
                  " is " + fmt_shape(eb) + "; the inner dimensions " + fmt_expr(ea[1]) + " and " + fmt_expr(eb[0]) + " differ",
              "A must be (M, K) and B (K, N): use operands whose shapes chain (e.g. Q (BM, d) * K^T with K (BN, d) gives (BM, BN))");
      } else {
        error(s, "TL0401", pick(c.target_loc, s.loc),
              "the product " + opnd_text(a.name, ta) + " * " + opnd_text(b.name, tb) + " is " + fmt_shape(res) + " but '" +
                  c.target + "' is " + fmt_shape(*target),
              "accumulate into a " + fmt_shape(res) + " register tensor (e.g. `Allocate " + c.target + " in register " +
                  fmt_shape(res) + " fp32 init 0`)");
      }
      poisoned.insert(&s);
      // Keep going with the shape the written operands imply (M of A, N of B), or the existing
      // target, so that later statements are still checked without cascading errors.
      if (target) res = *target;
    }
  }
  put_result(s, res, Layout::MmaC, "TL0401", DType::F32);
}

void Walker::elementwise(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  Opnd x, y;
  bool ok = resolve_tensor_operand(c.operands[0], s, false, x);
  ok = resolve_operand(c.operands[1], s, y) && ok;
  if (!ok) {
    if (x.is_tensor && c.result == ComputeStmt::Result::Get) put_result(s, x.shape, x.layout, "TL0405", DType::F32);
    return;
  }
  read(x.name, Space::Register, x.loc, s);
  if (y.is_tensor) {
    read(y.name, Space::Register, y.loc, s);
    if (c.operands[1].transposed) {
      // a vector read down the columns: one value per column of the 2-D first operand
      if (x.shape.size() != 2 || y.shape.size() != 1 || !(y.shape[0] == x.shape[1])) {
        error(s, "TL0405", y.loc,
              c.op + " " + x.name + ", " + y.name + "^T: '" + y.name + "^T' is a column vector (one value per column) of a 2-D tile, "
                  "but '" + x.name + "' is " + fmt_shape(x.shape) + " and '" + y.name + "' is " + fmt_shape(y.shape),
              x.shape.size() == 2 ? "use a (" + fmt_expr(x.shape[1]) + ") vector, or drop the ^T for one value per row"
                                  : "apply it to a (rows, cols) tile");
      }
      if (c.result == ComputeStmt::Result::Get) put_result(s, x.shape, x.layout, "TL0405", DType::F32);
      else write_full(x.name, Space::Register);
      return;
    }
    bool same = same_shape(x.shape, y.shape);
    bool bcast = x.shape.size() == 2 && y.shape.size() == 1 && y.shape[0] == x.shape[0];
    if (!same && !bcast) {
      std::string hint = "the second operand must have " + x.name + "'s shape " + fmt_shape(x.shape) +
                         (x.shape.size() == 2 ? ", be a row vector (" + fmt_expr(x.shape[0]) + ")" : "") +
                         ", or be a scalar";
      if (x.shape.size() == 1 && y.shape.size() == 2) {
        hint = "the 2-D tile comes first: `Compute " + c.op + " " + y.name + ", " + x.name + "` (row vectors broadcast along the rows)";
      } else if (x.shape.size() == 2 && y.shape.size() == 1 && y.shape[0] == x.shape[1]) {
        hint = "row vectors hold one value per row (" + fmt_expr(x.shape[0]) + " values); '" + y.name + "' has one per column";
      }
      error(s, "TL0405", y.loc,
            c.op + " shapes disagree: '" + x.name + "' is " + fmt_shape(x.shape) + ", '" + y.name + "' is " + fmt_shape(y.shape),
            hint);
    }
  }
  if (c.result == ComputeStmt::Result::Get) {
    put_result(s, x.shape, x.layout, "TL0405", DType::F32);
  } else {
    write_full(x.name, Space::Register);
  }
}

void Walker::unary(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  Opnd x;
  if (!resolve_tensor_operand(c.operands[0], s, false, x)) return;
  read(x.name, Space::Register, x.loc, s);
  if (c.op == "Convert") {
    Buffer* t = buffer(c.target, Space::Register);
    if (!c.target_dtype && !(t && t->dtype)) {
      error(s, "TL0408", pick(c.target_loc, s.loc), "Convert needs the dtype of its result",
            "write `Compute Convert " + x.name + " and get " + (c.target.empty() ? x.name + "16" : c.target) + " fp16`");
    }
  }
  if (c.result == ComputeStmt::Result::Get) {
    put_result(s, x.shape, x.layout, "TL0405", DType::F32);
  } else {
    write_full(x.name, Space::Register);
  }
}

void Walker::reduce(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  Opnd x;
  if (!resolve_tensor_operand(c.operands[0], s, false, x)) return;
  read(x.name, Space::Register, x.loc, s);
  std::vector<Expr> out;
  if (x.shape.size() != 2) {
    error(s, "TL0405", x.loc, c.op + " reduces a 2-D tile to a row vector; '" + x.name + "' is " + fmt_shape(x.shape),
          "apply " + c.op + " to a (rows, cols) tile such as S");
  } else {
    out = {x.shape[0]};
  }
  put_result(s, out, Layout::Unknown, "TL0405", DType::F32);
}

void Walker::rowop(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  Opnd x, v;
  bool ok = resolve_tensor_operand(c.operands[0], s, false, x);
  if (ok) read(x.name, Space::Register, x.loc, s);
  const Operand& o = c.operands[1];
  bool vt = o.expr.kind == Expr::Kind::Name && syms_.count(o.expr.name) &&
            syms_[o.expr.name].kind == SymKind::Tensor;
  if (!vt) {
    if (o.expr.kind == Expr::Kind::Name && !syms_.count(o.expr.name) && !is_builtin_scalar(o.expr.name) &&
        !is_launch_int(o.expr.name)) {
      report_undeclared(o.expr.name, pick(o.loc, s.loc), s, "tensor");
    } else {
      error(s, "TL0405", pick(o.loc, s.loc),
            c.op + " takes a row vector (one value per row), found '" + fmt_expr(o.expr) + "'",
            "for a scalar factor use `Compute Multiply " + (x.is_tensor ? x.name : std::string("X")) + ", " + fmt_expr(o.expr) + "`");
    }
    return;
  }
  if (!resolve_tensor_operand(o, s, false, v) || !ok) return;
  read(v.name, Space::Register, v.loc, s);
  if (x.shape.empty() || x.shape.size() > 2 || v.shape.size() != 1 || !(v.shape[0] == x.shape[0])) {
    error(s, "TL0405", v.loc,
          c.op + " " + x.name + ", " + v.name + ": '" + x.name + "' is " + fmt_shape(x.shape) + ", '" + v.name + "' is " +
              fmt_shape(v.shape) + "; the second operand is a row vector with one value per row of the first",
          x.shape.empty() ? "apply it to a (rows, cols) tile or a (rows) vector"
                          : "use a (" + fmt_expr(x.shape[0]) + ") row vector, e.g. the result of `Compute RowSum P and get l`");
  }
  if (c.result == ComputeStmt::Result::Get) {
    put_result(s, x.shape, x.layout, "TL0405", DType::F32);
  } else {
    write_full(x.name, Space::Register);
  }
}

void Walker::mask(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  const bool modify = c.op == "Modify";
  if (!check_named(s, modify)) return;
  if (modify && modified_.insert(c.mask.name).second) modify_order_.push_back(c.mask.name);
  if (!modify) masks_.push_back(&s);
  if (c.mask.kind == MaskSpec::Kind::None) {
    error(s, "TL0409", pick(c.mask.loc, s.loc), "Compute Mask with mask none does nothing",
          "write the mask to apply (`with bounds`, `with causal`, ...) or remove the statement");
  }
  if (c.mask.kind == MaskSpec::Kind::Window) {
    check_expr(c.mask.left, Ctx::Window, s);
    check_expr(c.mask.right, Ctx::Window, s);
  }
  if (c.at.size() != 2) {
    error(s, "TL0408", s.loc, "Compute " + c.op + " needs the score tile's coordinate: `at [r, c]` with 2 indices",
          "write `Compute " + c.op + " S at [m_block, j] with ...`");
  }
  for (const auto& e : c.at) check_expr(e, Ctx::Index, s);
  Opnd x;
  if (!resolve_tensor_operand(c.operands[0], s, false, x)) return;
  if (x.shape.size() != 2) {
    error(s, "TL0405", x.loc, c.op + " applies to a 2-D score tile; '" + x.name + "' is " + fmt_shape(x.shape),
          "mask the (BM, BN) score tile S");
  }
  read(x.name, Space::Register, x.loc, s);
  write_full(x.name, Space::Register);
}

void Walker::compute_stmt(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  if (backward()) flow_compute(s);
  const OpSpec* op = find_op(c.op);
  if (!op) {
    error(s, "TL0408", s.loc, "unknown Compute op '" + c.op + "'",
          "ops are GEMM Add Subtract Multiply Divide Max Exp Exp2 Log Log2 Convert RowMax RowSum Rescale Normalize Mask");
    return;
  }
  if (combine() && (op->cls == OpClass::Gemm || c.op == "Mask" || c.op == "Modify" || c.op == "Derivative" ||
                    c.op == "Gradient")) {
    error(s, "TL0414", s.loc,
          "Compute " + c.op + " in " + combine_name() + ": it merges rows of partial results, with element-wise and row operations",
          "weight each part by exp(LSE_part - m) (Max, Subtract, Exp, Rescale, Add) and finish with Normalize and Log "
          "(docs/tl.md, \"Combining partial results\")");
    return;
  }
  bool ok = true;
  if (c.operands.size() != op->operands) {
    error(s, "TL0408", s.loc,
          c.op + " takes " + std::to_string(op->operands) + " operand" + (op->operands == 1 ? "" : "s") + ", found " +
              std::to_string(c.operands.size()),
          op->operands == 1 ? "write `Compute " + c.op + " X ...`" : "write `Compute " + c.op + " X, Y ...`");
    ok = false;
  }
  if (op->cls != OpClass::Gemm) {
    for (size_t i = 0; i < c.operands.size(); ++i) {
      const Operand& o = c.operands[i];
      // `^T` beyond GEMMs: a row vector read down the columns (`Compute Subtract St, LSE^T`), and the
      // score tile of Mask / Modify / Derivative held transposed (keys along its rows: `St^T`).
      const bool tile_t = op->cls == OpClass::Mask || op->cls == OpClass::Derivative || op->cls == OpClass::Gradient;
      if (o.transposed && ((op->cls == OpClass::Binary && i == 1) || tile_t)) continue;
      if (o.transposed) {
        error(s, "TL0408", pick(o.loc, s.loc), "`^T` on an operand of " + c.op + "; only GEMM operands are transposed",
              "remove the `^T`");
        ok = false;
      }
    }
  }
  bool has_target = c.result != ComputeStmt::Result::InPlace;
  if (has_target && c.target.empty()) {
    error(s, "TL0408", s.loc, "`and get` / `and accumulate` without a name", "write `and get NAME`");
    ok = false;
  }
  if (c.result == ComputeStmt::Result::Accumulate && op->cls != OpClass::Gemm && op->cls != OpClass::Reduce &&
      op->cls != OpClass::Gradient) {
    error(s, "TL0408", pick(c.target_loc, s.loc), "`and accumulate` is only for GEMM, RowMax and RowSum",
          "write the update in place (`Compute " + c.op + " " + c.target + ", ...`) or use `and get`");
    ok = false;
  }
  if (c.result == ComputeStmt::Result::InPlace &&
      (op->cls == OpClass::Gemm || op->cls == OpClass::Reduce || op->cls == OpClass::Convert)) {
    std::string eg = op->cls == OpClass::Gemm ? "`Compute GEMM Q, K^T and get S` or `... and accumulate O`"
                     : op->cls == OpClass::Reduce ? "`Compute " + c.op + " S and get m_tile`"
                                                  : "`Compute Convert P and get P16 fp16`";
    error(s, "TL0408", s.loc, c.op + " needs a result: `and get NAME`" + std::string(op->cls == OpClass::Convert ? "" : " or `and accumulate NAME`"),
          "write " + eg);
    ok = false;
  }
  const bool tile_op = op->cls == OpClass::Mask || op->cls == OpClass::Derivative ||
                       op->cls == OpClass::Gradient;  // `at [..] with NAME`
  if (op->cls == OpClass::Gradient && c.result != ComputeStmt::Result::Accumulate) {
    error(s, "TL0408", s.loc, "Compute Gradient adds to the gradient of an auxiliary input: `and accumulate dT`",
          "write `Compute Gradient dS, S0 and accumulate dT at [i, n_block] with NAME` (T the input NAME reads)");
    ok = false;
  } else if (tile_op && has_target && op->cls != OpClass::Gradient) {
    error(s, "TL0408", s.loc, c.op + " works in place; it has no result", "remove `and ...`");
    ok = false;
  }
  if (!tile_op && !c.at.empty()) {
    error(s, "TL0408", s.loc, "`at [...]` is only for Compute Mask, Modify, Derivative and Gradient", "remove `at [...]`");
    ok = false;
  }
  if (!tile_op && c.mask.kind != MaskSpec::Kind::None) {
    error(s, "TL0408", s.loc, "`with MASK` is only for Compute Mask, Modify, Derivative and Gradient", "remove `with ...`");
    ok = false;
  }
  if (!ok) {
    poisoned.insert(&s);
    return;
  }
  switch (op->cls) {
    case OpClass::Gemm: gemm(s); break;
    case OpClass::Binary: elementwise(s); break;
    case OpClass::Unary:
    case OpClass::Convert: unary(s); break;
    case OpClass::Reduce: reduce(s); break;
    case OpClass::RowOp: rowop(s); break;
    case OpClass::Mask: mask(s); break;
    case OpClass::Derivative: derivative(s); break;
    case OpClass::Gradient: gradient(s); break;
  }
}

// `Compute Derivative dS, S0 at [r, c] with NAME` (backward programs): dS *= d NAME / d score at
// score = S0, element by element over the score tile at [r, c]. NAME a Score whose expression has a
// derivative in score (derive_score); dS and S0 register tiles of one shape. TL0413.
void Walker::derivative(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  if (!backward()) {
    error(s, "TL0413", s.loc, "Compute Derivative belongs to a backward program (`Kernel NAME backward`)",
          "a forward program applies the Score with `Compute Modify S at [..] with NAME`");
    return;
  }
  if (!check_named(s, true)) return;
  if (c.at.size() != 2) {
    error(s, "TL0408", s.loc, "Compute Derivative needs the score tile's coordinate: `at [r, c]` with 2 indices",
          "write `Compute Derivative dS, S0 at [i, n_block] with " + c.mask.name + "`");
  }
  for (const auto& e : c.at) check_expr(e, Ctx::Index, s);
  std::string why;
  if (!derive_score(info_.variants.at(c.mask.name).expr, why)) {
    error(s, "TL0413", pick(c.mask.loc, s.loc), "Score '" + c.mask.name + "' cannot be differentiated: " + why,
          "write the Score with + - * / tanh exp exp2 log of score (other names are constants)");
    return;
  }
  derived_.insert(c.mask.name);
  derived_here_.insert(c.mask.name);
  if (c.operands.size() == 2 && c.operands[0].transposed != c.operands[1].transposed) {
    error(s, "TL0405", s.loc, "Compute Derivative transposes one of its tiles only: the gradient and the scores are laid out alike",
          "write ^T on both (`Compute Derivative dSt^T, St0^T ...`) or on neither");
    return;
  }
  Opnd x, y;
  if (!resolve_tensor_operand(c.operands[0], s, false, x) || !resolve_tensor_operand(c.operands[1], s, false, y)) return;
  if (x.shape.size() != 2 || !same_shape(x.shape, y.shape)) {
    error(s, "TL0405", s.loc,
          "Compute Derivative multiplies the gradient tile '" + x.name + "' " + fmt_shape(x.shape) + " by the Score's derivative at '" +
              y.name + "' " + fmt_shape(y.shape) + ": two score tiles of one shape",
          "keep the scores before the Modify (`Compute Convert S and get S0 fp32`) and pass them: `Compute Derivative dS, S0 at "
          "[i, n_block] with " + c.mask.name + "`");
    return;
  }
  read(x.name, Space::Register, x.loc, s);
  read(y.name, Space::Register, y.loc, s);
  write_full(x.name, Space::Register);
}

// `Compute Gradient dS, S0 and accumulate dT at [r, c] with NAME` (backward programs): dT[idx] +=
// dS * d NAME / d T[idx] at score = S0, element by element over the score tile at [r, c], T the
// auxiliary input whose gradient dT is (aux_grad_alloc), idx the index NAME reads it at. dS is the
// gradient of NAME's output, so the statement comes before `Compute Derivative ... with NAME` and
// dS must carry the whole gradient (P, dP, D: the data flow of dQ). TL0413.
void Walker::gradient(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  if (!backward()) {
    error(s, "TL0413", s.loc, "Compute Gradient belongs to a backward program (`Kernel NAME backward`)",
          "the forward reads the auxiliary input in its Score; its gradient is the backward's");
    return;
  }
  if (!check_named(s, true)) return;
  if (c.at.size() != 2) {
    error(s, "TL0408", s.loc, "Compute Gradient needs the score tile's coordinate: `at [r, c]` with 2 indices",
          "write `Compute Gradient dS, S0 and accumulate " + c.target + " at [i, n_block] with " + c.mask.name + "`");
  }
  for (const auto& e : c.at) check_expr(e, Ctx::Index, s);
  if (std::find(info_.aux_grads.begin(), info_.aux_grads.end(), c.target) == info_.aux_grads.end()) {
    error(s, "TL0413", pick(c.target_loc, s.loc),
          "'" + c.target + "' is not the gradient of an auxiliary input: Compute Gradient adds to dT, an fp32 global of "
          "the shape of the fp32 auxiliary input T",
          "declare `Allocate d" + std::string("T in global (shape of T) fp32`") + " after T, and accumulate into it");
    return;
  }
  const std::string t = c.target.substr(1);
  std::string why;
  if (!derive_aux(info_.variants.at(c.mask.name).expr, t, why)) {
    error(s, "TL0413", pick(c.mask.loc, s.loc), "Score '" + c.mask.name + "' has no derivative in " + t + ": " + why,
          "accumulate into the gradient of the input the Score reads, which it reads at one index, through + - * / "
          "tanh exp exp2 log");
    return;
  }
  if (derived_here_.count(c.mask.name)) {
    error(s, "TL0413", s.loc,
          "Compute Gradient with " + c.mask.name + " after its `Compute Derivative`: the gradient tile is then that of " +
              c.mask.name + "'s input, not of its output",
          "move the Gradient above `Compute Derivative ... with " + c.mask.name + "`");
    return;
  }
  // dS must be the gradient of NAME's output: every Score applied after NAME already differentiated
  const auto at = std::find(modify_order_.begin(), modify_order_.end(), c.mask.name);
  for (auto later = at == modify_order_.end() ? at : at + 1; later != modify_order_.end(); ++later)
    if (!derived_here_.count(*later)) {
      error(s, "TL0413", s.loc,
            "Compute Gradient with " + c.mask.name + " before the `Compute Derivative` of " + *later + ", which modifies the "
            "scores after " + c.mask.name + ": the gradient tile is not yet that of " + c.mask.name + "'s output",
            "move the Gradient below `Compute Derivative ... with " + *later + "`");
      return;
    }
  if (c.operands.size() == 2 && c.operands[0].transposed != c.operands[1].transposed) {
    error(s, "TL0405", s.loc, "Compute Gradient transposes one of its tiles only: the gradient and the scores are laid out alike",
          "write ^T on both (`Compute Gradient dSt^T, St0^T ...`) or on neither");
    return;
  }
  Opnd x, y;
  if (!resolve_tensor_operand(c.operands[0], s, false, x) || !resolve_tensor_operand(c.operands[1], s, false, y)) return;
  if (x.shape.size() != 2 || !same_shape(x.shape, y.shape)) {
    error(s, "TL0405", s.loc,
          "Compute Gradient weighs the gradient tile '" + x.name + "' " + fmt_shape(x.shape) + " by the Score's derivative at '" +
              y.name + "' " + fmt_shape(y.shape) + ": two score tiles of one shape",
          "pass the scores the Modify took (`Compute Convert S and get S0 fp32` before it)");
    return;
  }
  read(x.name, Space::Register, x.loc, s);
  read(y.name, Space::Register, y.loc, s);
  // the data flow: dS carries P (Q, K, LSE), dP (dO, V) and the D term (O), as dQ does
  if (const std::string missing = missing_grad_inputs(x.name); !missing.empty()) {
    error(s, "TL0413", s.loc,
          "the gradient tile '" + x.name + "' does not depend on " + missing + ": " + c.target +
              " needs dS = P * (dP - D), P from Q, K and LSE, dP = dO V^T and D = rowsum(dO * O)",
          "pass the gradient of the scores after `Compute Multiply dS, P`");
    return;
  }
  grads_accumulated_.insert(c.target);
}

void Walker::reshape_stmt(const Stmt& s) {
  const ReshapeStmt& r = s.reshape;
  auto sym = syms_.find(r.name);
  if (sym == syms_.end()) {
    report_undeclared(r.name, s.loc, s, "tensor");
    return;
  }
  if (sym->second.kind != SymKind::Tensor) {
    error(s, "TL0306", s.loc, "'" + r.name + "' is " + sym_kind_name(sym->second.kind) + ", not a tensor",
          "Reshape re-lays a register tensor");
    return;
  }
  Buffer* b = buffer(r.name, Space::Register);
  if (!b && explain_gone_buffer(r.name, Space::Register, s.loc, s)) return;
  if (!b) {
    error(s, "TL0403", s.loc, "Reshape re-lays a register tile; '" + r.name + "' has no register buffer",
          "reshape the register result of a GEMM (e.g. P16 after `Compute Convert P and get P16 fp16`)");
    return;
  }
  auto tuple = [](const std::vector<std::string>& t) -> Layout {
    if (t == std::vector<std::string>{"MMA_C", "MMA_M", "MMA_N"}) return Layout::MmaC;
    if (t == std::vector<std::string>{"MMA_A", "MMA_M", "MMA_K"}) return Layout::MmaA;
    return Layout::Unknown;
  };
  auto text = [](const std::vector<std::string>& t) {
    std::string o = "(";
    for (size_t i = 0; i < t.size(); ++i) o += (i ? ", " : "") + t[i];
    return o + ")";
  };
  Layout from = tuple(r.from), to = tuple(r.to);
  if (from == Layout::Unknown || to == Layout::Unknown || from == to) {
    error(s, "TL0502", s.loc, "unsupported Reshape from " + text(r.from) + " to " + text(r.to),
          "the supported Reshape is `Reshape " + r.name + " from " + kReshapeHint + "`");
    return;
  }
  if (b->shape.size() != 2) {
    error(s, "TL0405", s.loc, "Reshape re-lays a 2-D tile; '" + r.name + "' is " + fmt_shape(b->shape),
          "reshape the (BM, BN) probability tile");
  }
  read(r.name, Space::Register, s.loc, s);
  b = buffer(r.name, Space::Register);
  if (b->layout != Layout::Unknown && b->layout != from) {
    std::string why = b->layout == Layout::Operand ? "it was copied from shared memory and is already in operand layout"
                      : b->layout == Layout::MmaA  ? "it is already in MMA_A layout (reshaped before)"
                                                   : "it holds a GEMM accumulator";
    std::string hint = b->layout == Layout::MmaC
                           ? "write `Reshape " + r.name + " from " + kReshapeHint + "`"
                           : "remove this Reshape";
    error(s, "TL0502", s.loc,
          "Reshape " + r.name + " from " + text(r.from) + ", but '" + r.name + "' is in layout " + layout_name(b->layout) +
              ": " + why,
          hint);
  }
  b->layout = to;
}

}  // namespace qattn::tl::detail
