// TL expressions -> C++ expressions. Integer expressions keep TL's meaning: `/` and `%` are floor
// division and modulo (qattn::floordiv / floormod), cdiv/min/max map to qattn::cdiv/imin/imax.
// Names keep their TL spelling (Dims, Consts, grid and loop variables, Lets are C++ variables of the
// same name), so the generated code reads like the TL it came from.
#include <cmath>
#include <cstdio>

#include "backend/lowering.h"

namespace qattn::backend::detail {
namespace {

// Names the generated code uses itself, and C++ keywords a TL name could spell.
const std::set<std::string>& reserved() {
  static const std::set<std::string> r = {
      "p", "tid", "smem", "tiled_mma", "thr_mma", "gmem_copy", "stage", "softmax_scale", "descale_q",
      "descale_k", "descale_v", "descale_qk", "cute", "qattn", "Tensor", "Element", "ElementO", "kThreads",
      "kSmemBytes", "kTileM", "kRowsPerThread", "TiledMma", "SmemCopyAtom", "SmemCopyAtomT", "GmemCopy", "min", "max",
      "auto", "bool", "break", "case", "char", "class", "const", "constexpr", "continue", "default", "delete",
      "do", "double", "else", "enum", "extern", "false", "float", "for", "goto", "if", "inline", "int", "long",
      "namespace", "new", "operator", "private", "public", "register", "return", "short", "signed", "sizeof",
      "static", "struct", "switch", "template", "this", "true", "typedef", "typename", "union", "unsigned",
      "using", "void", "volatile", "while", "dim3", "Scope", "keep", "modify", "visible", "tile_needs_mask", "sq_", "sk_",
      "wl_", "wr_", "grid0_", "grid1_", "grid2_", "blockIdx", "threadIdx", "blockDim", "gridDim", "_"};
  return r;
}

int prec(const tl::Expr& e) {
  if (e.kind == tl::Expr::Kind::Binary) return (e.op == "+" || e.op == "-") ? 1 : 2;
  if (e.kind == tl::Expr::Kind::Unary) return 3;
  return 4;
}

std::string float_literal(double v) {
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "-INFINITY";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + "f";
}

}  // namespace

std::string Lowering::ident(const std::string& n) const {
  if (reserved().count(n) || n.rfind("__", 0) == 0) return n + "_tl";
  return n;
}

std::string Lowering::cpp_int(const tl::Expr& e) const {
  using K = tl::Expr::Kind;
  switch (e.kind) {
    case K::Number: return std::to_string(static_cast<long long>(e.value));
    case K::Name: return ident(e.name);
    case K::Unary: {
      std::string a = cpp_int(e.args[0]);
      return prec(e.args[0]) < 3 ? "-(" + a + ")" : "-" + a;
    }
    case K::Binary: {
      if (e.op == "/") return "qattn::floordiv(" + cpp_int(e.args[0]) + ", " + cpp_int(e.args[1]) + ")";
      if (e.op == "%") return "qattn::floormod(" + cpp_int(e.args[0]) + ", " + cpp_int(e.args[1]) + ")";
      const int p = prec(e);
      std::string a = cpp_int(e.args[0]), b = cpp_int(e.args[1]);
      if (prec(e.args[0]) < p) a = "(" + a + ")";
      if (prec(e.args[1]) < p || (prec(e.args[1]) == p && (e.op == "-" || e.op == "*") &&
                                  e.args[1].kind == K::Binary))
        b = "(" + b + ")";
      return a + " " + e.op + " " + b;
    }
    case K::Call: {
      std::string fn = e.name == "cdiv" ? "qattn::cdiv" : e.name == "min" ? "qattn::imin" : "qattn::imax";
      std::string s = fn + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + cpp_int(e.args[i]);
      return s + ")";
    }
  }
  return "0";
}

std::string Lowering::cpp_float(const tl::Expr& e) const {
  using K = tl::Expr::Kind;
  switch (e.kind) {
    case K::Number: return float_literal(e.value);
    case K::Name:
      if (e.name == "softmax_scale") return "softmax_scale";
      if (e.name == "log2e") return "qattn::kLog2e";
      if (e.name == "ln2") return "qattn::kLn2";
      if (e.name == "inf") return "INFINITY";
      return "float(" + ident(e.name) + ")";
    case K::Unary: {
      std::string a = cpp_float(e.args[0]);
      return prec(e.args[0]) < 3 ? "-(" + a + ")" : "-" + a;
    }
    case K::Binary: {
      if (e.op == "%") return "float(" + cpp_int(e) + ")";
      const int p = prec(e);
      std::string a = cpp_float(e.args[0]), b = cpp_float(e.args[1]);
      if (prec(e.args[0]) < p) a = "(" + a + ")";
      if (prec(e.args[1]) < p || (prec(e.args[1]) == p && e.op != "+" && e.args[1].kind == K::Binary))
        b = "(" + b + ")";
      return a + " " + e.op + " " + b;
    }
    case K::Call: {
      if (e.name == "cdiv") return "float(" + cpp_int(e) + ")";
      std::string s = e.name == "min" ? "fminf(" : "fmaxf(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + cpp_float(e.args[i]);
      return s + ")";
    }
  }
  return "0.0f";
}

bool Lowering::is_positive_scalar(const tl::Expr& e) const {
  using K = tl::Expr::Kind;
  switch (e.kind) {
    case K::Number: return e.value > 0 && std::isfinite(e.value);
    case K::Name: return e.name == "softmax_scale" || e.name == "log2e" || e.name == "ln2";
    case K::Binary:
      return (e.op == "*" || e.op == "/") && is_positive_scalar(e.args[0]) && is_positive_scalar(e.args[1]);
    default: return false;
  }
}

void Lowering::collect_names(const tl::Expr& e, std::set<std::string>& out) const {
  if (e.kind == tl::Expr::Kind::Name) out.insert(e.name);
  for (const auto& a : e.args) collect_names(a, out);
}

}  // namespace qattn::backend::detail
