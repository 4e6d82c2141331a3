#include "tl/ast.h"

namespace qattn::tl {

Expr Expr::number(double v, bool is_int, SrcLoc l) {
  Expr e;
  e.kind = Kind::Number;
  e.value = v;
  e.is_int = is_int;
  e.loc = l;
  return e;
}
Expr Expr::ident(std::string n, SrcLoc l) {
  Expr e;
  e.kind = Kind::Name;
  e.name = std::move(n);
  e.loc = l;
  return e;
}
Expr Expr::unary(std::string op, Expr a, SrcLoc l) {
  Expr e;
  e.kind = Kind::Unary;
  e.op = std::move(op);
  e.args.push_back(std::move(a));
  e.loc = l;
  return e;
}
Expr Expr::binary(std::string op, Expr a, Expr b, SrcLoc l) {
  Expr e;
  e.kind = Kind::Binary;
  e.op = std::move(op);
  e.args.push_back(std::move(a));
  e.args.push_back(std::move(b));
  e.loc = l;
  return e;
}
Expr Expr::call(std::string fn, std::vector<Expr> args, SrcLoc l) {
  Expr e;
  e.kind = Kind::Call;
  e.name = std::move(fn);
  e.args = std::move(args);
  e.loc = l;
  return e;
}

Expr Expr::index(std::string tensor, std::vector<Expr> idx, SrcLoc l) {
  Expr e;
  e.kind = Kind::Index;
  e.name = std::move(tensor);
  e.args = std::move(idx);
  e.loc = l;
  return e;
}

bool operator==(const Expr& a, const Expr& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Expr::Kind::Number: return a.value == b.value && a.is_int == b.is_int;
    case Expr::Kind::Name: return a.name == b.name;
    case Expr::Kind::Unary:
    case Expr::Kind::Binary:
      if (a.op != b.op) return false;
      break;
    case Expr::Kind::Call:
    case Expr::Kind::Index:
      if (a.name != b.name) return false;
      break;
  }
  return a.args == b.args;
}

const char* to_string(Space s) {
  switch (s) {
    case Space::Global: return "global";
    case Space::Shared: return "shared";
    case Space::Register: return "register";
  }
  return "?";
}

std::optional<Space> parse_space(const std::string& s) {
  if (s == "global") return Space::Global;
  if (s == "shared") return Space::Shared;
  if (s == "register") return Space::Register;
  return std::nullopt;
}

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "fp32") return DType::F32;
  if (s == "fp16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (s == "fp8_e4m3") return DType::F8E4M3;
  if (s == "fp8_e5m2") return DType::F8E5M2;
  if (s == "int32") return DType::I32;
  return std::nullopt;
}

bool expr_reads(const Expr& e, const std::string& n) {
  if ((e.kind == Expr::Kind::Name && e.name == n)) return true;
  for (const auto& a : e.args)
    if (expr_reads(a, n)) return true;
  return false;
}

namespace {

bool stmt_reads(const Stmt& s, const std::string& n) {
  auto any = [&](const std::vector<Expr>& v) {
    for (const auto& e : v)
      if (expr_reads(e, n)) return true;
    return false;
  };
  auto opt = [&](const std::optional<Expr>& e) { return e && expr_reads(*e, n); };
  auto mask = [&](const MaskSpec& m) { return m.kind == MaskSpec::Kind::Window && (expr_reads(m.left, n) || expr_reads(m.right, n)); };
  for (const auto& a : s.attrs)
    if (opt(a.value)) return true;
  switch (s.kind) {
    case Stmt::Kind::Kernel: return mask(s.kernel.mask);
    case Stmt::Kind::Dim:
      for (const auto& it : s.dim.items)
        if (opt(it.value)) return true;
      return false;
    case Stmt::Kind::Const:
      for (const auto& it : s.cnst.items)
        if (expr_reads(it.value, n)) return true;
      return false;
    case Stmt::Kind::Grid:
      for (const auto& it : s.grid.items)
        if (expr_reads(it.extent, n)) return true;
      return false;
    case Stmt::Kind::Let: return expr_reads(s.let.value, n);
    case Stmt::Kind::Allocate: return any(s.alloc.shape) || any(s.alloc.offset) || opt(s.alloc.init);
    case Stmt::Kind::Copy: return any(s.copy.tile) || any(s.copy.coord);
    case Stmt::Kind::Compute:
      for (const auto& o : s.compute.operands)
        if (expr_reads(o.expr, n)) return true;
      return any(s.compute.at) || mask(s.compute.mask);
    case Stmt::Kind::Variant: return expr_reads(s.variant.expr, n) || opt(s.variant.empty_when) || opt(s.variant.full_when);
    case Stmt::Kind::Phase:
    case Stmt::Kind::Merge:
      for (const auto& b : s.loop.body)
        if (stmt_reads(b, n)) return true;
      return false;
    case Stmt::Kind::For:
      if (expr_reads(s.loop.lo, n) || expr_reads(s.loop.hi, n)) return true;
      for (const auto& b : s.loop.body)
        if (stmt_reads(b, n)) return true;
      return false;
    case Stmt::Kind::Role: return expr_reads(s.role.warpgroups, n) || expr_reads(s.role.registers, n);
    default: return false;
  }
}

}  // namespace

bool reads_name(const Program& p, const std::string& name) {
  for (const auto& s : p.stmts)
    if (stmt_reads(s, name)) return true;
  return false;
}

}  // namespace qattn::tl
