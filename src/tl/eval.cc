#include "tl/eval.h"

#include <cmath>
#include <limits>

namespace qattn::tl {

const std::map<std::string, double>& builtin_scalars() {
  static const std::map<std::string, double> kBuiltins = {
      {"log2e", 1.4426950408889634074},
      {"ln2", 0.69314718055994530942},
      {"inf", std::numeric_limits<double>::infinity()},
  };
  return kBuiltins;
}

bool is_launch_scalar(const std::string& n) { return n == "softmax_scale" || n == "softcap"; }
bool is_launch_int(const std::string& n) { return n == "window_left" || n == "window_right"; }

namespace {

void fail(support::DiagSink* diags, const Expr& e, const std::string& msg, const std::string& hint) {
  if (diags) diags->error("TL0603", e.loc, msg, hint);
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

std::optional<int64_t> eval_int(const Expr& e, const Env& env, support::DiagSink* diags) {
  switch (e.kind) {
    case Expr::Kind::Number:
      if (!e.is_int || std::fabs(e.value) > 9.0e15) {
        fail(diags, e, "expected an integer, found a real number", "index and shape expressions are integers");
        return std::nullopt;
      }
      return static_cast<int64_t>(e.value);
    case Expr::Kind::Name: {
      auto it = env.ints.find(e.name);
      if (it == env.ints.end()) {
        fail(diags, e, "'" + e.name + "' has no integer value here",
             "give every Dim a value (e.g. --dims " + e.name + "=64) or declare it");
        return std::nullopt;
      }
      return it->second;
    }
    case Expr::Kind::Unary: {
      if (e.args.size() != 1) return std::nullopt;
      auto a = eval_int(e.args[0], env, diags);
      if (!a) return std::nullopt;
      if (*a == std::numeric_limits<int64_t>::min()) {
        fail(diags, e, "integer overflow", "index and shape expressions must stay within 64-bit integers");
        return std::nullopt;
      }
      return -*a;
    }
    case Expr::Kind::Binary: {
      if (e.args.size() != 2) return std::nullopt;
      auto a = eval_int(e.args[0], env, diags);
      auto b = eval_int(e.args[1], env, diags);
      if (!a || !b) return std::nullopt;
      int64_t r = 0;
      bool overflow = false;
      if (e.op == "+") overflow = __builtin_add_overflow(*a, *b, &r);
      if (e.op == "-") overflow = __builtin_sub_overflow(*a, *b, &r);
      if (e.op == "*") overflow = __builtin_mul_overflow(*a, *b, &r);
      if (overflow) {
        fail(diags, e, "integer overflow", "index and shape expressions must stay within 64-bit integers");
        return std::nullopt;
      }
      if (e.op == "+" || e.op == "-" || e.op == "*") return r;
      if (e.op == "/" || e.op == "%") {
        if (*b == 0) {
          fail(diags, e, "division by zero", "check the divisor (e.g. heads_q / heads_kv needs heads_kv >= 1)");
          return std::nullopt;
        }
        if (*a == std::numeric_limits<int64_t>::min() && *b == -1) {
          fail(diags, e, "integer overflow", "index and shape expressions must stay within 64-bit integers");
          return std::nullopt;
        }
        if (e.op == "/") return floor_div(*a, *b);
        return *a - floor_div(*a, *b) * *b;
      }
      fail(diags, e, "unknown operator '" + e.op + "'", "");
      return std::nullopt;
    }
    case Expr::Kind::Call: {
      std::vector<int64_t> v;
      for (const auto& a : e.args) {
        auto x = eval_int(a, env, diags);
        if (!x) return std::nullopt;
        v.push_back(*x);
      }
      if (e.name == "cdiv") {
        if (v.size() != 2) {
          fail(diags, e, "cdiv takes 2 arguments", "write cdiv(a, b)");
          return std::nullopt;
        }
        if (v[1] == 0) {
          fail(diags, e, "division by zero in cdiv", "");
          return std::nullopt;
        }
        if (v[0] == std::numeric_limits<int64_t>::min() || (v[1] == -1 && v[0] == std::numeric_limits<int64_t>::max())) {
          fail(diags, e, "integer overflow in cdiv", "");
          return std::nullopt;
        }
        return -floor_div(-v[0], v[1]);
      }
      if (e.name == "min" || e.name == "max") {
        if (v.empty()) {
          fail(diags, e, e.name + " needs at least one argument", "");
          return std::nullopt;
        }
        int64_t r = v[0];
        for (auto x : v) r = e.name == "min" ? std::min(r, x) : std::max(r, x);
        return r;
      }
      fail(diags, e, "unknown function '" + e.name + "'", "functions are cdiv, min, max");
      return std::nullopt;
    }
    case Expr::Kind::Index:  // a tensor read (cache_seqlens[b], a Score's table[...]) has no constant value: the
      return std::nullopt;   // interpreter reads those per block or per element
  }
  return std::nullopt;
}

std::optional<double> eval_scalar(const Expr& e, const Env& env, support::DiagSink* diags) {
  switch (e.kind) {
    case Expr::Kind::Number: return e.value;
    case Expr::Kind::Name: {
      if (auto it = env.scalars.find(e.name); it != env.scalars.end()) return it->second;
      if (auto it = builtin_scalars().find(e.name); it != builtin_scalars().end()) return it->second;
      if (auto it = env.ints.find(e.name); it != env.ints.end()) return static_cast<double>(it->second);
      fail(diags, e, "'" + e.name + "' has no scalar value here", "scalars are numbers, builtins (softmax_scale, softcap, log2e, ln2, inf) and integer names");
      return std::nullopt;
    }
    case Expr::Kind::Unary: {
      if (e.args.size() != 1) return std::nullopt;
      auto a = eval_scalar(e.args[0], env, diags);
      if (!a) return std::nullopt;
      return -*a;
    }
    case Expr::Kind::Binary: {
      if (e.args.size() != 2) return std::nullopt;
      auto a = eval_scalar(e.args[0], env, diags);
      auto b = eval_scalar(e.args[1], env, diags);
      if (!a || !b) return std::nullopt;
      if (e.op == "+") return *a + *b;
      if (e.op == "-") return *a - *b;
      if (e.op == "*") return *a * *b;
      if (e.op == "/") return *a / *b;
      if (e.op == "%") return std::fmod(*a, *b);
      return std::nullopt;
    }
    case Expr::Kind::Call: {
      std::vector<double> v;
      for (const auto& a : e.args) {
        auto x = eval_scalar(a, env, diags);
        if (!x) return std::nullopt;
        v.push_back(*x);
      }
      if (e.name == "cdiv" && v.size() == 2 && v[1] != 0) return std::ceil(v[0] / v[1]);
      if ((e.name == "min" || e.name == "max") && !v.empty()) {
        double r = v[0];
        for (auto x : v) r = e.name == "min" ? std::min(r, x) : std::max(r, x);
        return r;
      }
      fail(diags, e, "cannot evaluate call to '" + e.name + "'", "functions are cdiv(a, b), min, max");
      return std::nullopt;
    }
    case Expr::Kind::Index: return std::nullopt;  // a tensor read: as in eval_int
  }
  return std::nullopt;
}

}  // namespace qattn::tl
