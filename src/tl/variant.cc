// Score / Mask declarations: element evaluation and tile-clause derivation (see variant.h).
#include "tl/variant.h"

#include <cmath>
#include <cstring>

namespace qattn::tl {
namespace {

void fail(support::DiagSink* d, const Expr& e, const std::string& msg, const std::string& hint) {
  if (d) d->error("TL0603", e.loc, msg, hint);
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

constexpr double kIntLimit = 9.0e15;  // integers stay exact in a double below this

}  // namespace

const VariantFn* find_variant_fn(const std::string& name) {
  for (const auto& f : kVariantFns)
    if (name == f.name) return &f;
  return nullptr;
}

bool is_comparison(const std::string& op) {
  const size_t n = op.size();
  if (n == 1) return op[0] == '<' || op[0] == '>';
  return n == 2 && op[1] == '=' && (op[0] == '<' || op[0] == '>' || op[0] == '=' || op[0] == '!');
}

void VLocals::set(std::string_view name, VValue v) {
  for (int i = 0; i < n_; ++i)
    if (std::string_view(items_[i].name, items_[i].len) == name) {
      items_[i].v = v;
      return;
    }
  if (n_ < 4 && name.size() < sizeof(items_[0].name)) {
    Item& it = items_[n_++];
    std::copy(name.begin(), name.end(), it.name);
    it.len = name.size();
    it.v = v;
    return;
  }
  more_[std::string(name)] = v;
}

const VValue* VLocals::find(std::string_view name) const {
  for (int i = 0; i < n_; ++i)
    if (items_[i].len == name.size() && std::string_view(items_[i].name, items_[i].len) == name) return &items_[i].v;
  if (more_.empty()) return nullptr;
  auto it = more_.find(name);
  return it == more_.end() ? nullptr : &it->second;
}

std::optional<VValue> evaluate(const Expr& e, const VariantEnv& env, support::DiagSink* diags) {
  auto sub = [&](size_t i) -> std::optional<VValue> {
    if (i >= e.args.size()) return std::nullopt;
    return evaluate(e.args[i], env, diags);
  };
  switch (e.kind) {
    case Expr::Kind::Number: return VValue{e.value, e.is_int};
    case Expr::Kind::Name: {
      if (const VValue* l = env.locals.find(e.name)) return *l;
      if (env.env) {
        if (auto it = env.env->ints.find(e.name); it != env.env->ints.end()) return VValue{double(it->second), true};
        if (auto it = env.env->scalars.find(e.name); it != env.env->scalars.end()) return VValue{it->second, false};
      }
      if (auto it = builtin_scalars().find(e.name); it != builtin_scalars().end()) return VValue{it->second, false};
      fail(diags, e, "'" + e.name + "' has no value in this declaration",
           "declarations use score, q_idx, kv_idx (q_lo, q_hi, kv_lo, kv_hi in clauses), Dims, Consts, Grid variables and Lets");
      return std::nullopt;
    }
    case Expr::Kind::Unary: {
      auto a = sub(0);
      if (!a) return std::nullopt;
      if (e.op == "not") return VValue{a->v == 0 ? 1.0 : 0.0, true};
      return VValue{-a->v, a->is_int};
    }
    case Expr::Kind::Binary: {
      auto a = sub(0), b = sub(1);
      if (!a || !b) return std::nullopt;
      const std::string& op = e.op;
      const char c0 = op.empty() ? '\0' : op[0];
      const bool two = op.size() == 2;
      // (characters, not string compares: this runs per score element)
      if (op.size() == 3 && c0 == 'a' && op[1] == 'n' && op[2] == 'd') return VValue{(a->v != 0 && b->v != 0) ? 1.0 : 0.0, true};
      if (two && c0 == 'o' && op[1] == 'r') return VValue{(a->v != 0 || b->v != 0) ? 1.0 : 0.0, true};
      if (is_comparison(op)) {
        const bool eq = two;  // <=, >=, ==, !=
        bool r = c0 == '<' ? (eq ? a->v <= b->v : a->v < b->v)
               : c0 == '>' ? (eq ? a->v >= b->v : a->v > b->v)
               : c0 == '=' ? a->v == b->v : a->v != b->v;
        return VValue{r ? 1.0 : 0.0, true};
      }
      const bool ints = a->is_int && b->is_int;
      if (ints && (std::fabs(a->v) > kIntLimit || std::fabs(b->v) > kIntLimit)) {
        fail(diags, e, "integer out of range in a declaration", "keep index arithmetic below 9e15");
        return std::nullopt;
      }
      const bool one = op.size() == 1;
      if (one && c0 == '+') return VValue{a->v + b->v, ints};
      if (one && c0 == '-') return VValue{a->v - b->v, ints};
      if (one && c0 == '*') return VValue{a->v * b->v, ints && std::fabs(a->v * b->v) <= kIntLimit};
      if (one && (c0 == '/' || c0 == '%')) {
        if (ints) {
          if (b->v == 0) {
            fail(diags, e, "integer division by zero", "the divisor of an integer '/' or '%' must not be 0");
            return std::nullopt;
          }
          int64_t x = int64_t(a->v), y = int64_t(b->v), q = floor_div(x, y);
          return VValue{double(c0 == '/' ? q : x - q * y), true};
        }
        if (c0 == '/') return VValue{a->v / b->v, false};
        return VValue{a->v - std::floor(a->v / b->v) * b->v, false};
      }
      fail(diags, e, "unknown operator '" + op + "'", "");
      return std::nullopt;
    }
    case Expr::Kind::Call: {
      const VariantFn* f = find_variant_fn(e.name);
      if (!f || int(e.args.size()) != f->args) {
        fail(diags, e, "'" + e.name + "' is not a function of declarations (or has the wrong argument count)",
             "functions: tanh exp exp2 log abs floor (1 argument), min max cdiv (2), clamp (3)");
        return std::nullopt;
      }
      std::vector<VValue> v;
      bool ints = true;
      for (size_t i = 0; i < e.args.size(); ++i) {
        auto a = sub(i);
        if (!a) return std::nullopt;
        ints = ints && a->is_int;
        v.push_back(*a);
      }
      const std::string& n = e.name;
      if (n == "tanh") return VValue{std::tanh(v[0].v), false};
      if (n == "exp") return VValue{std::exp(v[0].v), false};
      if (n == "exp2") return VValue{std::exp2(v[0].v), false};
      if (n == "log") return VValue{std::log(v[0].v), false};
      if (n == "abs") return VValue{std::fabs(v[0].v), ints};
      if (n == "floor") return VValue{std::floor(v[0].v), true};
      if (n == "min") return VValue{std::fmin(v[0].v, v[1].v), ints};
      if (n == "max") return VValue{std::fmax(v[0].v, v[1].v), ints};
      if (n == "clamp") return VValue{std::fmin(std::fmax(v[0].v, v[1].v), v[2].v), ints};
      if (n == "cdiv") {
        if (!ints || v[1].v == 0) {
          fail(diags, e, "cdiv takes integers and a non-zero divisor", "");
          return std::nullopt;
        }
        return VValue{double(-floor_div(-int64_t(v[0].v), int64_t(v[1].v))), true};
      }
      return std::nullopt;
    }
    case Expr::Kind::Index: {
      int64_t idx[4];  // auxiliary tensors are 1-D or 2-D: no allocation per element
      if (e.args.size() > 4) {
        fail(diags, e, "'" + e.name + "' is not an auxiliary tensor with " + std::to_string(e.args.size()) + " indices",
             "auxiliary tensors have one or two indices");
        return std::nullopt;
      }
      for (size_t i = 0; i < e.args.size(); ++i) {
        auto a = sub(i);
        if (!a) return std::nullopt;
        if (!a->is_int) {
          fail(diags, e.args[i], "an index of '" + e.name + "' is not an integer", "index auxiliary tensors with integer expressions");
          return std::nullopt;
        }
        idx[i] = int64_t(a->v);
      }
      std::optional<double> r = env.aux ? env.aux(e.name, idx, e.args.size()) : std::nullopt;
      if (!r) {
        fail(diags, e, "'" + e.name + "' is not an auxiliary tensor with " + std::to_string(e.args.size()) + " indices",
             "declare it with `Allocate " + e.name + " in global (...) fp32` (or int32) before the declaration");
        return std::nullopt;
      }
      return VValue{*r, false};
    }
  }
  return std::nullopt;
}

Expr bind_names(const Expr& e, const Env& env) {
  if (e.kind == Expr::Kind::Name) {
    for (const char* n : {"score", "q_idx", "kv_idx", "q_lo", "q_hi", "kv_lo", "kv_hi"})
      if (e.name == n) return e;
    Expr v = e;  // keeps the location (diagnostics) of the name it replaces
    if (auto it = env.ints.find(e.name); it != env.ints.end()) {
      v.kind = Expr::Kind::Number;
      v.value = double(it->second);
      v.is_int = true;
    } else if (auto sc = env.scalars.find(e.name); sc != env.scalars.end()) {
      v.kind = Expr::Kind::Number;
      v.value = sc->second;
      v.is_int = false;
    } else if (auto b = builtin_scalars().find(e.name); b != builtin_scalars().end()) {
      v.kind = Expr::Kind::Number;
      v.value = b->second;
      v.is_int = false;
    }
    return v;
  }
  Expr out = e;
  for (auto& a : out.args) a = bind_names(a, env);
  return out;
}

// ---- clause derivation -------------------------------------------------------------------------
namespace {

struct Bound {
  Expr lo, hi;
  bool dep = false;  // depends on q_idx / kv_idx
};

Expr num(double v) { return Expr::number(v, true); }
Expr bin(const char* op, Expr a, Expr b) { return Expr::binary(op, std::move(a), std::move(b)); }
Expr fn(const char* f, std::vector<Expr> args) { return Expr::call(f, std::move(args)); }

std::optional<Bound> bounds(const Expr& e);

bool depends(const Expr& e) {
  if (e.kind == Expr::Kind::Name) return e.name == "q_idx" || e.name == "kv_idx" || e.name == "score";
  for (const auto& a : e.args)
    if (depends(a)) return true;
  return false;
}

std::optional<Bound> bounds(const Expr& e) {
  if (!depends(e)) {
    if (e.kind == Expr::Kind::Binary && (is_comparison(e.op) || e.op == "and" || e.op == "or")) return std::nullopt;
    return Bound{e, e, false};
  }
  switch (e.kind) {
    case Expr::Kind::Name:
      if (e.name == "q_idx") return Bound{Expr::ident("q_lo"), Expr::ident("q_hi"), true};
      if (e.name == "kv_idx") return Bound{Expr::ident("kv_lo"), Expr::ident("kv_hi"), true};
      return std::nullopt;  // score: not a mask quantity
    case Expr::Kind::Unary: {
      if (e.op != "-") return std::nullopt;
      auto a = bounds(e.args[0]);
      if (!a) return std::nullopt;
      return Bound{Expr::unary("-", a->hi), Expr::unary("-", a->lo), true};
    }
    case Expr::Kind::Binary: {
      auto a = bounds(e.args[0]), b = bounds(e.args[1]);
      if (!a || !b) return std::nullopt;
      if (e.op == "+") return Bound{bin("+", a->lo, b->lo), bin("+", a->hi, b->hi), true};
      if (e.op == "-") return Bound{bin("-", a->lo, b->hi), bin("-", a->hi, b->lo), true};
      if (e.op == "*" || e.op == "/") {
        // monotone only in a dependent factor times (or over) a literal of known sign
        const Expr& c = e.args[1];
        const bool lit = c.kind == Expr::Kind::Number && !b->dep;
        if (e.op == "*" && !lit && e.args[0].kind == Expr::Kind::Number && !a->dep) {
          return bounds(bin("*", e.args[1], e.args[0]));
        }
        if (!lit || c.value == 0) return std::nullopt;
        if (c.value > 0) return Bound{bin(e.op.c_str(), a->lo, c), bin(e.op.c_str(), a->hi, c), true};
        return Bound{bin(e.op.c_str(), a->hi, c), bin(e.op.c_str(), a->lo, c), true};
      }
      return std::nullopt;
    }
    case Expr::Kind::Call: {
      std::vector<Bound> v;
      for (const auto& x : e.args) {
        auto b = bounds(x);
        if (!b) return std::nullopt;
        v.push_back(*b);
      }
      if ((e.name == "min" || e.name == "max") && v.size() == 2)
        return Bound{fn(e.name.c_str(), {v[0].lo, v[1].lo}), fn(e.name.c_str(), {v[0].hi, v[1].hi}), true};
      if (e.name == "clamp" && v.size() == 3)
        return Bound{fn("clamp", {v[0].lo, v[1].lo, v[2].lo}), fn("clamp", {v[0].hi, v[1].hi, v[2].hi}), true};
      if (e.name == "abs" && v.size() == 1)
        return Bound{fn("max", {num(0), fn("max", {v[0].lo, Expr::unary("-", v[0].hi)})}),
                     fn("max", {fn("abs", {v[0].lo}), fn("abs", {v[0].hi})}), true};
      return std::nullopt;  // tanh, exp, ... of an index, or cdiv / floor
    }
    default: return std::nullopt;  // an auxiliary read at a per-element index
  }
}

}  // namespace

std::optional<std::pair<Expr, Expr>> index_bounds(const Expr& e) {
  auto b = bounds(e);
  if (!b) return std::nullopt;
  return std::make_pair(b->lo, b->hi);
}

namespace {

// (full, empty) of a predicate.
std::optional<std::pair<Expr, Expr>> classify(const Expr& e) {
  if (e.kind == Expr::Kind::Unary && e.op == "not") {
    auto a = classify(e.args[0]);
    if (!a) return std::nullopt;
    return std::make_pair(a->second, a->first);
  }
  if (e.kind != Expr::Kind::Binary) return std::nullopt;
  if (e.op == "and" || e.op == "or") {
    auto a = classify(e.args[0]), b = classify(e.args[1]);
    if (!a || !b) return std::nullopt;
    if (e.op == "and") return std::make_pair(bin("and", a->first, b->first), bin("or", a->second, b->second));
    return std::make_pair(bin("or", a->first, b->first), bin("and", a->second, b->second));
  }
  if (!is_comparison(e.op)) return std::nullopt;
  auto a = bounds(e.args[0]), b = bounds(e.args[1]);
  if (!a || !b) return std::nullopt;
  const std::string& op = e.op;
  // x < y for every element: max x < min y; for none: min x >= max y.
  if (op == "<") return std::make_pair(bin("<", a->hi, b->lo), bin(">=", a->lo, b->hi));
  if (op == "<=") return std::make_pair(bin("<=", a->hi, b->lo), bin(">", a->lo, b->hi));
  if (op == ">") return std::make_pair(bin(">", a->lo, b->hi), bin("<=", a->hi, b->lo));
  if (op == ">=") return std::make_pair(bin(">=", a->lo, b->hi), bin("<", a->hi, b->lo));
  Expr all_equal = bin("and", bin("<=", a->hi, b->lo), bin(">=", a->lo, b->hi));
  Expr disjoint = bin("or", bin("<", a->hi, b->lo), bin(">", a->lo, b->hi));
  if (op == "==") return std::make_pair(all_equal, disjoint);
  return std::make_pair(disjoint, all_equal);  // !=
}

}  // namespace

std::optional<Clauses> derive_clauses(const Expr& predicate) {
  auto c = classify(predicate);
  if (!c) return std::nullopt;
  return Clauses{c->second, c->first};
}

namespace {
void complete_body(std::vector<Stmt>& body) {
  for (auto& s : body) {
    if (s.kind == Stmt::Kind::For) complete_body(s.loop.body);
    if (s.kind != Stmt::Kind::Variant || !s.variant.is_mask) continue;
    VariantStmt& v = s.variant;
    if (v.empty_when || v.full_when) continue;
    if (auto c = derive_clauses(v.expr)) {
      v.empty_when = c->empty_when;
      v.full_when = c->full_when;
      v.derived = true;
    }
  }
}
}  // namespace

void complete_clauses(Program& p) { complete_body(p.stmts); }

}  // namespace qattn::tl
