// Small utilities of the TL checker: expression and shape formatting for messages, symbolic shape
// comparison, names of layouts/spaces/kinds, edit distance for "did you mean", example global
// Allocate lines for hints, and the deduplicating Reporter. No diagnostics of its own.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tl/checker_internal.h"
#include "tl/eval.h"

namespace qattn::tl::detail {
namespace {

int prec(const Expr& e) {
  if (e.kind == Expr::Kind::Binary) {
    if (e.op == "or") return -3;
    if (e.op == "and") return -2;
    if (e.op == "+" || e.op == "-") return 1;
    if (e.op == "*" || e.op == "/" || e.op == "%") return 2;
    return 0;
  }
  if (e.kind == Expr::Kind::Unary) return e.op == "not" ? -1 : 3;
  return 4;
}

void fmt_into(const Expr& e, std::string& out, int depth) {
  if (depth > 100) {
    out += "...";
    return;
  }
  switch (e.kind) {
    case Expr::Kind::Number: {
      if (e.is_int && std::fabs(e.value) < 9.0e15) {
        out += std::to_string(static_cast<long long>(e.value));
      } else {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", e.value);
        out += buf;
      }
      return;
    }
    case Expr::Kind::Name: out += e.name; return;
    case Expr::Kind::Unary:
      out += e.op.empty() ? "-" : e.op == "not" ? "not " : e.op;
      if (!e.args.empty()) {
        bool par = prec(e.args[0]) < 3;
        if (par) out += "(";
        fmt_into(e.args[0], out, depth + 1);
        if (par) out += ")";
      }
      return;
    case Expr::Kind::Binary: {
      if (e.args.size() != 2) {
        out += "?";
        return;
      }
      int p = prec(e);
      bool lpar = prec(e.args[0]) < p;
      bool rpar = prec(e.args[1]) <= p;
      if (lpar) out += "(";
      fmt_into(e.args[0], out, depth + 1);
      if (lpar) out += ")";
      out += " " + e.op + " ";
      if (rpar) out += "(";
      fmt_into(e.args[1], out, depth + 1);
      if (rpar) out += ")";
      return;
    }
    case Expr::Kind::Call:
    case Expr::Kind::Index:
      out += e.name + (e.kind == Expr::Kind::Call ? "(" : "[");
      for (size_t i = 0; i < e.args.size(); ++i) {
        if (i) out += ", ";
        fmt_into(e.args[i], out, depth + 1);
      }
      out += e.kind == Expr::Kind::Call ? ")" : "]";
      return;
  }
}

}  // namespace

bool is_builtin_scalar(const std::string& n) {
  return is_launch_scalar(n) || builtin_scalars().count(n) > 0;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string line_of(SrcLoc l) { return std::to_string(l.line); }

std::string example_global(const std::string& n) {
  if (n == "Q") return "Allocate Q in global (seqlen_q, d) fp16 with offset [b, head]";
  if (n == "K") return "Allocate K in global (seqlen_k, d) fp16 with offset [b, kv_head]";
  if (n == "V") return "Allocate V in global (seqlen_k, d) fp16 with offset [b, kv_head]";
  if (n == "O") return "Allocate O in global (seqlen_q, d) fp16 with offset [b, head]";
  if (n == "dO") return "Allocate dO in global (seqlen_q, d) fp16 with offset [b, head]";
  if (n == "dQ") return "Allocate dQ in global (seqlen_q, d) fp32 with offset [b, head]";
  if (n == "dK") return "Allocate dK in global (seqlen_k, d) fp32 with offset [b, kv_head]";
  if (n == "dV") return "Allocate dV in global (seqlen_k, d) fp32 with offset [b, kv_head]";
  if (n == "O_part") return "Allocate O_part in global (seqlen_q, d) bf16 with offset [b, s, head]";
  if (n == "LSE_part") return "Allocate LSE_part in global (seqlen_q) fp32 with offset [b, s, head]";
  return "Allocate LSE in global (seqlen_q) fp32 with offset [b, head]";
}

std::string fmt_expr(const Expr& e) {
  std::string s;
  fmt_into(e, s, 0);
  return s;
}

std::string fmt_shape(const std::vector<Expr>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += fmt_expr(s[i]);
  }
  return out + ")";
}

bool same_shape(const std::vector<Expr>& a, const std::vector<Expr>& b) { return a == b; }

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::MmaC: return "MMA_C";
    case Layout::MmaA: return "MMA_A";
    case Layout::Operand: return "operand";
    case Layout::Unknown: return "unknown";
  }
  return "unknown";
}

int space_index(Space s) {
  switch (s) {
    case Space::Global: return 0;
    case Space::Shared: return 1;
    case Space::Register: return 2;
  }
  return 2;
}

SrcLoc pick(SrcLoc a, SrcLoc b) { return a.line > 0 ? a : b; }

const char* sym_kind_name(SymKind k) {
  switch (k) {
    case SymKind::Dim: return "a dimension (Dim)";
    case SymKind::Const: return "a tile parameter (Const)";
    case SymKind::Grid: return "a grid index";
    case SymKind::Let: return "an index binding (Let)";
    case SymKind::LoopVar: return "a loop index";
    case SymKind::Tensor: return "a tensor";
  }
  return "a name";
}

void Reporter::error(const std::string& code, SrcLoc loc, const std::string& msg, const std::string& hint,
                     bool by_location) {
  if (!seen_.insert({code, loc.line, loc.col, by_location ? std::string() : msg}).second) return;
  ++count_;
  d_.error(code, loc, msg, hint);
}

}  // namespace qattn::tl::detail
