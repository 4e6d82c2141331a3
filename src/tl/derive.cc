// The derivative of a Score declaration with respect to `score` (tl/variant.h: derive_score), for
// `Compute Derivative` in backward programs (docs/tl.md, "The backward pass"): the sum, product,
// quotient and chain rules over the functions of declarations, simplified as it goes (0 and 1
// absorbed), so that `score - slope[head] * abs(q_idx - kv_idx)` gives 1 and `30.0 * tanh(score /
// 30.0)` gives 30.0 * ((1 - tanh(score / 30.0) * tanh(score / 30.0)) * (1 / 30.0)).
#include "tl/variant.h"

namespace qattn::tl {
namespace {

// The variable of a derivative: `score` (tensor empty), or every read `tensor[...]` of an auxiliary
// tensor (`index` keeps the first read's index; a read at another index is no derivative here).
struct Var {
  std::string tensor;
  std::optional<std::vector<Expr>>* index = nullptr;
  bool is(const Expr& e) const {
    return tensor.empty() ? e.kind == Expr::Kind::Name && e.name == "score" : e.kind == Expr::Kind::Index && e.name == tensor;
  }
};

bool uses_var(const Expr& e, const Var& v) {
  if (v.is(e)) return true;
  for (const auto& a : e.args)
    if (uses_var(a, v)) return true;
  return false;
}

bool is_num(const Expr& e, double v) { return e.kind == Expr::Kind::Number && e.value == v; }
Expr num(double v) { return Expr::number(v, false); }

Expr add(Expr a, Expr b) {
  if (is_num(a, 0)) return b;
  if (is_num(b, 0)) return a;
  return Expr::binary("+", std::move(a), std::move(b));
}
Expr sub(Expr a, Expr b) {
  if (is_num(b, 0)) return a;
  if (is_num(a, 0)) return Expr::unary("-", std::move(b));
  return Expr::binary("-", std::move(a), std::move(b));
}
Expr mul(Expr a, Expr b) {
  if (is_num(a, 0) || is_num(b, 0)) return num(0);
  if (is_num(a, 1)) return b;
  if (is_num(b, 1)) return a;
  return Expr::binary("*", std::move(a), std::move(b));
}
Expr div(Expr a, Expr b) {
  if (is_num(a, 0)) return num(0);
  if (is_num(b, 1)) return a;
  return Expr::binary("/", std::move(a), std::move(b));
}

std::optional<Expr> d(const Expr& e, const Var& var, std::string& why) {
  if (!uses_var(e, var)) return num(0);
  if (var.is(e) && !var.tensor.empty()) {  // a read of the auxiliary tensor
    for (const auto& a : e.args)
      if (uses_var(a, var)) {
        why = "'" + var.tensor + "' is read inside its own index";
        return std::nullopt;
      }
    if (!*var.index) {
      *var.index = e.args;
    } else if (**var.index != e.args) {
      why = "'" + var.tensor + "' is read at two different indices";
      return std::nullopt;
    }
    return num(1);
  }
  const char* what = var.tensor.empty() ? "the score" : "the auxiliary tensor";
  switch (e.kind) {
    case Expr::Kind::Name: return num(1);  // score itself
    case Expr::Kind::Unary: {
      if (e.op != "-") break;
      auto a = d(e.args[0], var, why);
      if (!a) return std::nullopt;
      return is_num(*a, 0) ? num(0) : Expr::unary("-", std::move(*a));
    }
    case Expr::Kind::Binary: {
      const Expr &u = e.args[0], &v = e.args[1];
      if (e.op == "+" || e.op == "-" || e.op == "*" || e.op == "/") {
        auto du = d(u, var, why), dv = d(v, var, why);
        if (!du || !dv) return std::nullopt;
        if (e.op == "+") return add(std::move(*du), std::move(*dv));
        if (e.op == "-") return sub(std::move(*du), std::move(*dv));
        if (e.op == "*") return add(mul(std::move(*du), v), mul(u, std::move(*dv)));
        // (u / v)' = u' / v - u v' / v^2
        return sub(div(std::move(*du), v), div(mul(u, std::move(*dv)), mul(v, v)));
      }
      why = "'" + e.op + "' of " + what + " has no derivative (a comparison or an integer operation)";
      return std::nullopt;
    }
    case Expr::Kind::Call: {
      if (e.args.size() != 1 || !(e.name == "tanh" || e.name == "exp" || e.name == "exp2" || e.name == "log")) break;
      auto du = d(e.args[0], var, why);
      if (!du) return std::nullopt;
      const Expr& u = e.args[0];
      Expr outer;
      if (e.name == "tanh") outer = sub(num(1), mul(e, e));        // 1 - tanh(u)^2
      else if (e.name == "exp") outer = e;                          // exp(u)
      else if (e.name == "exp2") outer = mul(e, Expr::ident("ln2")); // exp2(u) ln 2
      else outer = div(num(1), u);                                  // 1 / u
      return mul(std::move(outer), std::move(*du));
    }
    default: break;
  }
  if (why.empty())
    why = e.kind == Expr::Kind::Call ? "'" + e.name + "' of " + what + " has no derivative everywhere (abs, floor, min, max, "
                                                      "clamp, cdiv)"
                                     : std::string("the expression has no derivative in ") + what;
  return std::nullopt;
}

}  // namespace

std::optional<Expr> derive_score(const Expr& e, std::string& why) {
  why.clear();
  return d(e, Var{}, why);
}

std::optional<AuxDerivative> derive_aux(const Expr& e, const std::string& tensor, std::string& why) {
  why.clear();
  std::optional<std::vector<Expr>> index;
  auto de = d(e, Var{tensor, &index}, why);
  if (!de) return std::nullopt;
  if (!index) {
    why = "the declaration does not read '" + tensor + "'";
    return std::nullopt;
  }
  return AuxDerivative{std::move(*de), std::move(*index)};
}

}  // namespace qattn::tl
