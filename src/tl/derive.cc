// The derivative of a Score declaration with respect to `score` (tl/variant.h: derive_score), for
// `Compute Derivative` in backward programs (docs/tl.md, "The backward pass"): the sum, product,
// quotient and chain rules over the functions of declarations, simplified as it goes (0 and 1
// absorbed), so that `score - slope[head] * abs(q_idx - kv_idx)` gives 1 and `30.0 * tanh(score /
// 30.0)` gives 30.0 * ((1 - tanh(score / 30.0) * tanh(score / 30.0)) * (1 / 30.0)).
#include "tl/variant.h"

namespace qattn::tl {
namespace {

bool uses_score(const Expr& e) {
  if (e.kind == Expr::Kind::Name && e.name == "score") return true;
  for (const auto& a : e.args)
    if (uses_score(a)) return true;
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

std::optional<Expr> d(const Expr& e, std::string& why) {
  if (!uses_score(e)) return num(0);
  switch (e.kind) {
    case Expr::Kind::Name: return num(1);  // score itself
    case Expr::Kind::Unary: {
      if (e.op != "-") break;
      auto a = d(e.args[0], why);
      if (!a) return std::nullopt;
      return is_num(*a, 0) ? num(0) : Expr::unary("-", std::move(*a));
    }
    case Expr::Kind::Binary: {
      const Expr &u = e.args[0], &v = e.args[1];
      if (e.op == "+" || e.op == "-" || e.op == "*" || e.op == "/") {
        auto du = d(u, why), dv = d(v, why);
        if (!du || !dv) return std::nullopt;
        if (e.op == "+") return add(std::move(*du), std::move(*dv));
        if (e.op == "-") return sub(std::move(*du), std::move(*dv));
        if (e.op == "*") return add(mul(std::move(*du), v), mul(u, std::move(*dv)));
        // (u / v)' = u' / v - u v' / v^2
        return sub(div(std::move(*du), v), div(mul(u, std::move(*dv)), mul(v, v)));
      }
      why = "'" + e.op + "' of the score has no derivative (a comparison or an integer operation)";
      return std::nullopt;
    }
    case Expr::Kind::Call: {
      if (e.args.size() != 1 || !(e.name == "tanh" || e.name == "exp" || e.name == "exp2" || e.name == "log")) break;
      auto du = d(e.args[0], why);
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
    why = e.kind == Expr::Kind::Call ? "'" + e.name + "' of the score has no derivative everywhere (abs, floor, min, max, "
                                                      "clamp, cdiv)"
                                     : "the expression has no derivative in score";
  return std::nullopt;
}

}  // namespace

std::optional<Expr> derive_score(const Expr& e, std::string& why) {
  why.clear();
  return d(e, why);
}

}  // namespace qattn::tl
