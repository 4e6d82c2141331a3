// The TL printer (see printer.h for the canonical form).
#include "tl/printer.h"

#include <charconv>
#include <cmath>

namespace qattn::tl {
namespace {

std::string number(double v, bool is_int) {
  char buf[512];
  if (is_int && std::isfinite(v) && v == std::trunc(v)) {
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    if (r.ec == std::errc()) return std::string(buf, r.ptr);
  }
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  if (r.ec != std::errc()) return "0.0";  // cannot happen: 512 bytes hold any double
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // keep a real a real
  return s;
}

// Precedence: -3 or, -2 and, -1 not, 0 comparisons, 1 additive, 2 multiplicative, 3 unary minus
// (and negative literals), 4 atoms.
int prec(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Number: return std::signbit(e.value) ? 3 : 4;
    case Expr::Kind::Name:
    case Expr::Kind::Call:
    case Expr::Kind::Index: return 4;
    case Expr::Kind::Unary: return e.op == "not" ? -1 : 3;
    case Expr::Kind::Binary:
      if (e.op == "or") return -3;
      if (e.op == "and") return -2;
      if (e.op == "+" || e.op == "-") return 1;
      if (e.op == "*" || e.op == "/" || e.op == "%") return 2;
      return 0;  // comparisons (not associative)
  }
  return 4;
}

void emit(const Expr& e, std::string& out);

void emit_paren(const Expr& e, bool paren, std::string& out) {
  if (paren) out += '(';
  emit(e, out);
  if (paren) out += ')';
}

void emit(const Expr& e, std::string& out) {
  static const Expr kMissing = Expr::ident("?");
  auto arg = [&](size_t i) -> const Expr& { return i < e.args.size() ? e.args[i] : kMissing; };
  switch (e.kind) {
    case Expr::Kind::Number: out += number(e.value, e.is_int); return;
    case Expr::Kind::Name: out += e.name; return;
    case Expr::Kind::Call:
      out += e.name;
      out += '(';
      for (size_t i = 0; i < e.args.size(); ++i) {
        if (i) out += ", ";
        emit(e.args[i], out);
      }
      out += ')';
      return;
    case Expr::Kind::Index:
      out += e.name;
      out += '[';
      for (size_t i = 0; i < e.args.size(); ++i) {
        if (i) out += ", ";
        emit(e.args[i], out);
      }
      out += ']';
      return;
    case Expr::Kind::Unary:
      if (e.op == "not") {
        out += "not ";
        emit_paren(arg(0), prec(arg(0)) < -1, out);
        return;
      }
      out += e.op;
      emit_paren(arg(0), prec(arg(0)) < 4, out);
      return;
    case Expr::Kind::Binary: {
      int p = prec(e);
      emit_paren(arg(0), prec(arg(0)) < p || (p == 0 && prec(arg(0)) == 0), out);
      out += ' ';
      out += e.op;
      out += ' ';
      emit_paren(arg(1), prec(arg(1)) <= p, out);
      return;
    }
  }
}

std::string join(const std::vector<Expr>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    emit(v[i], out);
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += v[i];
  }
  return out;
}

std::string mask(const MaskSpec& m) {
  std::string out = to_string(m.kind);
  if (m.kind == MaskSpec::Kind::Named) return m.name;
  if (m.kind == MaskSpec::Kind::Window) out += "(" + print_expr(m.left) + ", " + print_expr(m.right) + ")";
  return out;
}

std::string comment(const std::string& text) { return text.empty() ? "#" : "# " + text; }

// The statement's own line, without indentation, attributes and comment.
std::string head(const Stmt& s) {
  std::string out;
  switch (s.kind) {
    case Stmt::Kind::Kernel:
      if (s.kernel.combine && s.kernel.mask.kind == MaskSpec::Kind::None)  // a merge has no mask
        return "Kernel " + s.kernel.name + " combine";
      return "Kernel " + s.kernel.name + (s.kernel.backward ? " backward" : s.kernel.combine ? " combine" : "") + " with mask " + mask(s.kernel.mask);
    case Stmt::Kind::Dim:
      out = "Dim ";
      for (size_t i = 0; i < s.dim.items.size(); ++i) {
        if (i) out += ", ";
        out += s.dim.items[i].name;
        if (s.dim.items[i].value) out += " = " + print_expr(*s.dim.items[i].value);
      }
      return out;
    case Stmt::Kind::Const:
      out = "Const ";
      for (size_t i = 0; i < s.cnst.items.size(); ++i) {
        if (i) out += ", ";
        out += s.cnst.items[i].name + " = " + print_expr(s.cnst.items[i].value);
      }
      return out;
    case Stmt::Kind::Grid:
      out = "Grid ";
      for (size_t i = 0; i < s.grid.items.size(); ++i) {
        if (i) out += ", ";
        out += s.grid.items[i].var + " = 0: " + print_expr(s.grid.items[i].extent);
      }
      return out;
    case Stmt::Kind::Let: return "Let " + s.let.name + " = " + print_expr(s.let.value);
    case Stmt::Kind::Role:
      return std::string("Role ") + (s.role.producer ? "producer" : "consumer") + " warpgroups " +
             print_expr(s.role.warpgroups) + " registers " + print_expr(s.role.registers) +
             (s.role.pingpong ? " pingpong" : "") + (s.role.split_columns ? " split columns" : "");
    case Stmt::Kind::Allocate: {
      const auto& a = s.alloc;
      out = "Allocate " + a.name + " in " + to_string(a.space) + " (" + join(a.shape) + ")";
      if (a.dtype) out += std::string(" ") + to_string(*a.dtype);
      else if (a.space == Space::Register) out += " fp32";
      if (!a.offset.empty()) out += " with offset [" + join(a.offset) + "]";
      if (a.init) out += " init " + print_expr(*a.init);
      return out;
    }
    case Stmt::Kind::Copy: {
      const auto& c = s.copy;
      out = "Copy " + c.name;
      if (!c.tile.empty()) out += " (" + join(c.tile) + ") in coordinate [" + join(c.coord) + "]";
      return out + " from " + to_string(c.from) + " to " + to_string(c.to) + (c.accumulate ? " and accumulate" : "");
    }
    case Stmt::Kind::Compute: {
      const auto& c = s.compute;
      out = "Compute " + c.op;
      for (size_t i = 0; i < c.operands.size(); ++i) {
        out += i ? ", " : " ";
        emit(c.operands[i].expr, out);
        if (c.operands[i].transposed) out += "^T";
      }
      if (c.result == ComputeStmt::Result::Get) {
        out += " and get " + c.target;
        if (c.target_dtype) out += std::string(" ") + to_string(*c.target_dtype);
      } else if (c.result == ComputeStmt::Result::Accumulate) {
        out += " and accumulate " + c.target;
      }
      if (!c.at.empty()) out += " at [" + join(c.at) + "]";
      if (c.op == "Mask" || c.mask.kind != MaskSpec::Kind::None) out += " with " + mask(c.mask);
      return out;
    }
    case Stmt::Kind::Reshape:
      return "Reshape " + s.reshape.name + " from (" + join(s.reshape.from) + ") to (" + join(s.reshape.to) + ")";
    case Stmt::Kind::For:
      return "for " + s.loop.var + " = " + print_expr(s.loop.lo) + ": " + print_expr(s.loop.hi);
    case Stmt::Kind::Phase: return "Phase " + s.loop.var;
    case Stmt::Kind::Merge: return "Merge " + s.loop.var;
    case Stmt::Kind::Comment: return comment(s.comment.text);
    case Stmt::Kind::Blank: return "";
    case Stmt::Kind::Variant: {
      const auto& v = s.variant;
      out = std::string(v.is_mask ? "Mask " : "Score ") + v.name + " = " + print_expr(v.expr);
      if (!v.derived && v.empty_when) out += " empty when " + print_expr(*v.empty_when);
      if (!v.derived && v.full_when) out += " full when " + print_expr(*v.full_when);
      return out;
    }
  }
  return "";
}

std::string attrs(const std::vector<Attr>& as) {
  if (as.empty()) return "";
  std::string out = " {";
  for (size_t i = 0; i < as.size(); ++i) {
    if (i) out += ", ";
    out += as[i].key;
    if (as[i].value) out += ": " + print_expr(*as[i].value);
  }
  return out + "}";
}

// Appends the lines of `body` (each followed by '\n'), dropping leading, trailing and repeated
// blank statements.
void print_body(const std::vector<Stmt>& body, int indent, std::string& out) {
  bool printed = false, pending_blank = false;
  for (const auto& s : body) {
    if (s.kind == Stmt::Kind::Blank) {
      pending_blank = printed;
      continue;
    }
    if (pending_blank) out += '\n';
    pending_blank = false;
    printed = true;
    out += print_stmt(s, indent);
    out += '\n';
  }
}

}  // namespace

std::string print_expr(const Expr& e) {
  std::string out;
  emit(e, out);
  return out;
}

std::string print_stmt(const Stmt& s, int indent) {
  if (s.kind == Stmt::Kind::Blank) return "";
  std::string pad(indent > 0 ? static_cast<size_t>(indent) : 0, ' ');
  std::string out = pad + head(s) + attrs(s.attrs);
  if (s.kind != Stmt::Kind::Comment && !s.trailing_comment.empty()) out += "  " + comment(s.trailing_comment);
  if (s.kind != Stmt::Kind::For && s.kind != Stmt::Kind::Phase && s.kind != Stmt::Kind::Merge) return out;
  out += '\n';
  print_body(s.loop.body, indent + 2, out);
  out += pad + "end";
  if (!s.loop.end_comment.empty()) out += "  " + comment(s.loop.end_comment);
  return out;
}

std::string print(const Program& p) {
  std::string out;
  print_body(p.stmts, 0, out);
  return out;
}

}  // namespace qattn::tl
