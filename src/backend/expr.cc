// The mma.sync lowering's view of the shared TL -> C++ expression printer (cpp_expr.h).
#include "backend/lowering.h"

namespace qattn::backend::detail {
CppNames Lowering::names() const {
  CppNames n;
  for (const auto& [name, a] : aux_) n.aux_extents[name] = a.extents;
  return n;
}
std::string Lowering::ident(const std::string& n) const { return names().ident(n); }
std::string Lowering::cpp_int(const tl::Expr& e) const { return names().int_expr(e); }
std::string Lowering::cpp_float(const tl::Expr& e) const { return names().float_expr(e); }
std::string Lowering::cpp_decl(const tl::Expr& e, DeclType& t) const { return names().decl_expr(e, t); }
bool Lowering::is_positive_scalar(const tl::Expr& e) const { return backend::is_positive_scalar(e); }

void Lowering::collect_names(const tl::Expr& e, std::set<std::string>& out) const {
  if (e.kind == tl::Expr::Kind::Name) out.insert(e.name);
  for (const auto& a : e.args) collect_names(a, out);
}

}  // namespace qattn::backend::detail
