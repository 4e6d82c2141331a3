// TL expressions -> C++ expressions (see cpp_expr.h). Integer expressions keep TL's meaning: `/`
// and `%` are floor division and modulo (qattn::floordiv / floormod), cdiv/min/max map to
// qattn::cdiv/imin/imax. Names keep their TL spelling, so the generated code reads like the TL.
#include "backend/cpp_expr.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "tl/variant.h"

namespace qattn::backend {
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
      "wl_", "wr_", "grid0_", "grid1_", "grid2_", "unroll_at_", "unroll_hi_", "unroll_k_", "blockIdx", "threadIdx", "blockDim", "gridDim", "_",
      // the sm90 kernel's own names (src/backend/sm90/emit.cc)
      "v", "tile", "rows", "sched", "leader", "wg", "cw", "kv_iter", "any_kv", "scale_S", "PP", "Params"};
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

std::string CppNames::ident(const std::string& n) const {
  if (reserved().count(n) || n.rfind("__", 0) == 0) return n + "_tl";
  return n;
}

std::string CppNames::int_expr(const tl::Expr& e) const {
  using K = tl::Expr::Kind;
  switch (e.kind) {
    case K::Number: return std::to_string(static_cast<long long>(e.value));
    case K::Name: return scoped.count(e.name) ? scope_prefix + ident(e.name) : ident(e.name);
    case K::Unary: {
      std::string a = int_expr(e.args[0]);
      return prec(e.args[0]) < 3 ? "-(" + a + ")" : "-" + a;
    }
    case K::Binary: {
      if (e.op == "/") return "qattn::floordiv(" + int_expr(e.args[0]) + ", " + int_expr(e.args[1]) + ")";
      if (e.op == "%") return "qattn::floormod(" + int_expr(e.args[0]) + ", " + int_expr(e.args[1]) + ")";
      const int p = prec(e);
      std::string a = int_expr(e.args[0]), b = int_expr(e.args[1]);
      if (prec(e.args[0]) < p) a = "(" + a + ")";
      if (prec(e.args[1]) < p || (prec(e.args[1]) == p && (e.op == "-" || e.op == "*") &&
                                  e.args[1].kind == K::Binary))
        b = "(" + b + ")";
      return a + " " + e.op + " " + b;
    }
    case K::Call: {
      std::string fn = e.name == "cdiv" ? "qattn::cdiv" : e.name == "min" ? "qattn::imin" : "qattn::imax";
      std::string s = fn + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + int_expr(e.args[i]);
      return s + ")";
    }
    case K::Index:  // a Let's read of a 1-D int32 input (`Let seqlen_q = T[b + 1] - T[b]`); else declarations only
      if (e.args.size() == 1) return "aux_" + e.name + "[" + int_expr(e.args[0]) + "]";
      break;
  }
  return "0";
}

std::string CppNames::float_expr(const tl::Expr& e) const {
  using K = tl::Expr::Kind;
  switch (e.kind) {
    case K::Number: return float_literal(e.value);
    case K::Name:
      if (e.name == "softmax_scale" || e.name == "softcap") return scoped.count(e.name) ? scope_prefix + e.name : e.name;
      if (e.name == "log2e") return "qattn::kLog2e";
      if (e.name == "ln2") return "qattn::kLn2";
      if (e.name == "inf") return "INFINITY";
      return "float(" + int_expr(e) + ")";
    case K::Unary: {
      std::string a = float_expr(e.args[0]);
      return prec(e.args[0]) < 3 ? "-(" + a + ")" : "-" + a;
    }
    case K::Binary: {
      if (e.op == "%") return "float(" + int_expr(e) + ")";
      const int p = prec(e);
      std::string a = float_expr(e.args[0]), b = float_expr(e.args[1]);
      if (prec(e.args[0]) < p) a = "(" + a + ")";
      if (prec(e.args[1]) < p || (prec(e.args[1]) == p && e.op != "+" && e.args[1].kind == K::Binary))
        b = "(" + b + ")";
      return a + " " + e.op + " " + b;
    }
    case K::Call: {
      if (e.name == "cdiv") return "float(" + int_expr(e) + ")";
      std::string s = e.name == "min" ? "fminf(" : "fmaxf(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + float_expr(e.args[i]);
      return s + ")";
    }
    case K::Index: break;  // declarations only (decl_expr)
  }
  return "0.0f";
}

std::string CppNames::decl_expr(const tl::Expr& e, DeclType& t) const {
  using K = tl::Expr::Kind;
  auto sub = [&](size_t i, DeclType& ti) { return "(" + decl_expr(e.args[i], ti) + ")"; };
  auto as_float = [](const std::string& s, DeclType ti) { return ti == DeclType::Float ? s : "float" + s; };
  switch (e.kind) {
    case K::Number:
      t = e.is_int ? DeclType::Int : DeclType::Float;
      return e.is_int ? std::to_string(static_cast<long long>(e.value)) : float_expr(e);
    case K::Name:
      for (const char* n : {"q_idx", "kv_idx", "q_lo", "q_hi", "kv_lo", "kv_hi"})
        if (e.name == n) {
          t = DeclType::Int;
          return e.name;
        }
      if (e.name == "score") {
        t = DeclType::Float;
        return "score";
      }
      if (e.name == "softmax_scale" || e.name == "softcap" || e.name == "log2e" || e.name == "ln2" || e.name == "inf") {
        t = DeclType::Float;
        return float_expr(e);
      }
      t = DeclType::Int;
      return ident(e.name);
    case K::Unary: {
      DeclType a;
      std::string s = sub(0, a);
      if (e.op == "not") {
        t = DeclType::Bool;
        return "!" + s;
      }
      t = a;
      return "-" + s;
    }
    case K::Binary: {
      DeclType a, b;
      std::string x = sub(0, a), y = sub(1, b);
      if (e.op == "and" || e.op == "or") {
        t = DeclType::Bool;
        return x + (e.op == "and" ? " && " : " || ") + y;
      }
      const bool ints = a == DeclType::Int && b == DeclType::Int;
      if (tl::is_comparison(e.op)) {
        t = DeclType::Bool;
        return ints ? x + " " + e.op + " " + y : as_float(x, a) + " " + e.op + " " + as_float(y, b);
      }
      t = ints ? DeclType::Int : DeclType::Float;
      if (ints && e.op == "/") return "qattn::floordiv" + std::string("(") + x + ", " + y + ")";
      if (ints && e.op == "%") return "qattn::floormod(" + x + ", " + y + ")";
      if (!ints && e.op == "%") return "qattn::fmodfloor(" + as_float(x, a) + ", " + as_float(y, b) + ")";
      return ints ? x + " " + e.op + " " + y : as_float(x, a) + " " + e.op + " " + as_float(y, b);
    }
    case K::Call: {
      std::vector<std::string> v;
      std::vector<DeclType> ty;
      bool ints = true;
      for (size_t i = 0; i < e.args.size(); ++i) {
        DeclType ti;
        v.push_back(sub(i, ti));
        ty.push_back(ti);
        ints = ints && ti == DeclType::Int;
      }
      auto fl = [&](size_t i) { return as_float(v[i], ty[i]); };
      const std::string& n = e.name;
      t = DeclType::Float;
      if (n == "tanh") return "qattn::fast_tanh(" + fl(0) + ")";
      if (n == "exp") return "__expf(" + fl(0) + ")";
      if (n == "exp2") return "exp2f(" + fl(0) + ")";
      if (n == "log") return "__logf(" + fl(0) + ")";
      if (n == "floor") {
        t = DeclType::Int;
        return ty[0] == DeclType::Int ? v[0] : "int(floorf(" + v[0] + "))";
      }
      if (ints) t = DeclType::Int;
      if (n == "abs") return ints ? "abs(" + v[0] + ")" : "fabsf(" + fl(0) + ")";
      if (n == "min") return ints ? "qattn::imin(" + v[0] + ", " + v[1] + ")" : "fminf(" + fl(0) + ", " + fl(1) + ")";
      if (n == "max") return ints ? "qattn::imax(" + v[0] + ", " + v[1] + ")" : "fmaxf(" + fl(0) + ", " + fl(1) + ")";
      if (n == "cdiv") return "qattn::cdiv(" + v[0] + ", " + v[1] + ")";
      if (n == "clamp")
        return ints ? "qattn::iclamp(" + v[0] + ", " + v[1] + ", " + v[2] + ")"
                    : "qattn::fclamp(" + fl(0) + ", " + fl(1) + ", " + fl(2) + ")";
      return "0.f";
    }
    case K::Index: {
      t = DeclType::Float;
      auto it = aux_extents.find(e.name);
      if (it == aux_extents.end()) return "0.f";
      std::string s = "qattn::aux_at(aux_" + e.name;
      for (const auto& ext : it->second) s += ", " + ext;
      for (size_t i = 0; i < e.args.size(); ++i) {
        DeclType ti;
        s += ", " + decl_expr(e.args[i], ti);
      }
      return s + ")";
    }
  }
  return "0";
}

bool is_positive_scalar(const tl::Expr& e) {
  using K = tl::Expr::Kind;
  switch (e.kind) {
    case K::Number: return e.value > 0 && std::isfinite(e.value);
    case K::Name: return e.name == "softmax_scale" || e.name == "softcap" || e.name == "log2e" || e.name == "ln2";  // softcap > 0 (checked at launch)
    case K::Binary:
      return (e.op == "*" || e.op == "/") && is_positive_scalar(e.args[0]) && is_positive_scalar(e.args[1]);
    default: return false;
  }
}


const char* op_functor(const std::string& op) {
  static const std::pair<const char*, const char*> table[] = {{"Add", "Add"},   {"Subtract", "Sub"}, {"Multiply", "Mul"},
                                                              {"Divide", "Div"}, {"Max", "Max"},      {"Exp", "Exp"},
                                                              {"Exp2", "Exp2"},  {"Log", "Log"},      {"Log2", "Log2"}};
  for (const auto& [tl, fn] : table)
    if (op == tl) return fn;
  return nullptr;
}

}  // namespace qattn::backend
