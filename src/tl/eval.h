// Evaluation of TL expressions against an environment of integer names (dims, consts, grid, loop
// and let variables) and scalar builtins. Shared by the checker's range analysis and the
// interpreter. Never throws: failures are reported as TL0603 with the expression's location.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::tl {

struct Env {
  std::map<std::string, int64_t> ints;     // dims, consts, grid/loop/let variables
  std::map<std::string, double> scalars;   // softmax_scale, log2e, ln2, inf, ...
};

// Integer evaluation (index / dimension / loop-bound expressions). Floor division and modulo,
// cdiv/min/max. A name not in env.ints is an error (TL0603) reported to diags when given.
std::optional<int64_t> eval_int(const Expr& e, const Env& env, support::DiagSink* diags = nullptr);

// Scalar evaluation in double (scalar operands of Compute, init values). Integer names are
// promoted; '/' is true division here.
std::optional<double> eval_scalar(const Expr& e, const Env& env, support::DiagSink* diags = nullptr);

// The builtin scalar names (softmax_scale excluded: it depends on the problem).
const std::map<std::string, double>& builtin_scalars();

// Builtins bound at launch from the C ABI (docs/tl.md, "Names and scopes"): the floats
// softmax_scale and softcap, and the integers window_left and window_right (the sliding window;
// the ABI's -1, unbounded, arrives as seqlen_q + seqlen_k, which hides no key).
bool is_launch_scalar(const std::string& n);  // softmax_scale, softcap
bool is_launch_int(const std::string& n);     // window_left, window_right

}  // namespace qattn::tl
