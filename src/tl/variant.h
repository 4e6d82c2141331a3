// Score and Mask declarations (attention variants): evaluation of their expressions and the
// derivation of a mask's tile clauses. Shared by the checker, the interpreter, the planner and the
// translator. The meaning of the declarations is in docs/tl.md ("Score and Mask declarations").
//
// evaluate(): one element (or one tile pair, for clauses) of a declaration's expression, in double
// with TL's integer rules (int / int is floor division). Never throws; failures return nullopt with
// a TL0603 diagnostic when a sink is given.
// derive_clauses(): for a Mask predicate over q_idx / kv_idx and scalars (no auxiliary reads that
// depend on the indices), `empty when` / `full when` predicates over q_lo, q_hi, kv_lo, kv_hi that
// are sound: interval bounds of every sub-expression, composed through + - * / min max abs clamp
// and comparisons, `and`, `or`, `not`. nullopt when the predicate is outside that fragment.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/diag.h"
#include "tl/ast.h"
#include "tl/eval.h"

namespace qattn::tl {

// Names the expressions of a declaration may use besides Dims, Consts, Grid variables and Lets.
inline constexpr const char* kScoreBuiltins[] = {"score", "q_idx", "kv_idx"};
inline constexpr const char* kMaskBuiltins[] = {"q_idx", "kv_idx"};
inline constexpr const char* kClauseBuiltins[] = {"q_lo", "q_hi", "kv_lo", "kv_hi"};

// Element functions of declarations and their argument counts.
struct VariantFn {
  const char* name;
  int args;
};
inline constexpr VariantFn kVariantFns[] = {{"tanh", 1}, {"exp", 1},  {"exp2", 1}, {"log", 1},  {"abs", 1},
                                            {"floor", 1}, {"min", 2}, {"max", 2},  {"cdiv", 2}, {"clamp", 3}};
const VariantFn* find_variant_fn(const std::string& name);

bool is_comparison(const std::string& op);  // < <= > >= == !=

struct VValue {
  double v = 0;
  bool is_int = false;  // integral (index arithmetic); int / int floors
};

// The element names of one evaluation (score, q_idx, kv_idx; q_lo, q_hi, kv_lo, kv_hi in clauses):
// a few short names held inline, so that evaluating an element allocates nothing (the interpreter
// evaluates declarations per score element). Longer names or more than four go to `more`.
class VLocals {
 public:
  VLocals() = default;
  VLocals(std::initializer_list<std::pair<std::string_view, VValue>> l) {
    for (const auto& [k, v] : l) set(k, v);
  }
  VLocals(const std::map<std::string, VValue>& m) {  // NOLINT: implicit, as the map it replaces
    for (const auto& [k, v] : m) set(k, v);
  }
  void set(std::string_view name, VValue v);
  const VValue* find(std::string_view name) const;

 private:
  struct Item {
    char name[8];
    size_t len;
    VValue v;
  };
  Item items_[4] = {};
  int n_ = 0;
  std::map<std::string, VValue, std::less<>> more_;
};

struct VariantEnv {
  const Env* env = nullptr;                      // integer names and scalars
  VLocals locals;                                // score, q_idx, kv_idx, q_lo, ...
  // An auxiliary tensor element at the given (already clamped by the callee) indices (n of them);
  // nullopt when the tensor is unknown or the index count is wrong.
  std::function<std::optional<double>(const std::string&, const int64_t* idx, size_t n)> aux;
};

// Booleans evaluate to 1 / 0 (is_int = true).
std::optional<VValue> evaluate(const Expr& e, const VariantEnv& env, support::DiagSink* diags = nullptr);

// `e` with every name that `env` (or the builtin scalars) gives a value replaced by that value, but
// the element names (score, q_idx, kv_idx, q_lo, q_hi, kv_lo, kv_hi), which stay: what evaluate()
// gives for it with any locals and this env, without a lookup of the env's names per element (the
// interpreter specialises a declaration once per tile and evaluates it per element).
Expr bind_names(const Expr& e, const Env& env);

struct Clauses {
  Expr empty_when, full_when;
};
std::optional<Clauses> derive_clauses(const Expr& predicate);

// Fills the `empty when` / `full when` clauses of every Mask declaration that has none and whose
// predicate allows derivation (marked derived, so the printer keeps the program as written).
void complete_clauses(Program& p);

// The derivative of a Score declaration's expression with respect to `score` (src/tl/derive.cc):
// sum, product, quotient and chain rules over + - * / tanh exp exp2 log, simplified (0 and 1
// absorbed); parts without `score` (q_idx, kv_idx, auxiliary reads, scalars) are constants.
// nullopt, with `why`, when `score` reaches a function without a derivative everywhere (abs, floor,
// min, max, clamp, cdiv) or a comparison. Used by `Compute Derivative` (docs/tl.md, "The backward pass").
std::optional<Expr> derive_score(const Expr& e, std::string& why);

// The derivative of a Score declaration's expression with respect to its reads of the auxiliary
// tensor `tensor` (`Compute Gradient`, docs/tl.md "The backward pass"): every read is one variable,
// so they must all have one index (`index`, e.g. [head] for ALiBi's slopes); the same rules as
// derive_score, with `score` a constant. nullopt, with `why`, when the declaration does not read the
// tensor, reads it at two indices or inside an index, or through a function without a derivative.
// Sound bounds (lo, hi) of an integer expression of q_idx / kv_idx over a tile pair, as expressions of
// q_lo, q_hi, kv_lo, kv_hi (the interval arithmetic of the tile clauses: + - * / by literals, min, max,
// abs, clamp); nullopt where the expression is outside that language. Used by the lowering of
// `Compute Gradient` to find the tiles whose elements all read one entry.
std::optional<std::pair<Expr, Expr>> index_bounds(const Expr& e);

struct AuxDerivative {
  Expr derivative;
  std::vector<Expr> index;
};
std::optional<AuxDerivative> derive_aux(const Expr& e, const std::string& tensor, std::string& why);

}  // namespace qattn::tl
