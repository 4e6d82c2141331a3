// TL expressions -> C++ expressions, shared by every kernel family's lowering and emitter.
//   CppNames::int_expr    integer index / shape expressions (TL floor `/` and `%`, cdiv, min, max)
//   CppNames::float_expr  scalar float expressions (softmax_scale, log2e, ln2, inf, literals)
//   CppNames::decl_expr   Score / Mask declaration bodies (score, q_idx, kv_idx, comparisons, the
//                         functions TL has, auxiliary reads through qattn::aux_at)
//   CppNames::ident       a TL name as a C++ identifier (TL names that spell a C++ keyword or a
//                         name of the generated code get a `_tl` suffix)
// Pure functions of the expression; never fail (a malformed tree prints as 0).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tl/ast.h"

namespace qattn::backend {

enum class DeclType { Int, Float, Bool };

struct CppNames {
  std::map<std::string, std::vector<std::string>> aux_extents;  // auxiliary tensor -> C++ extents
  // Names that live in a struct (the sm90 kernel's work-tile Scope `v`): printed as prefix + name.
  std::set<std::string> scoped;
  std::string scope_prefix;
  std::string ident(const std::string& tl_name) const;
  std::string int_expr(const tl::Expr& e) const;
  std::string float_expr(const tl::Expr& e) const;
  std::string decl_expr(const tl::Expr& e, DeclType& t) const;
};

// The device functor (device/qattn/ops.cuh, qattn::op::NAME) of an element-wise TL Compute: "Add",
// "Sub", "Mul", "Div", "Max", "Exp", "Exp2", "Log", "Log2"; nullptr for any other op.
const char* op_functor(const std::string& tl_op);

// A product/quotient of positive literals and the positive builtins (softmax_scale, log2e, ln2):
// a factor that commutes with a row max and with a mask's -inf.
bool is_positive_scalar(const tl::Expr& e);

}  // namespace qattn::backend
