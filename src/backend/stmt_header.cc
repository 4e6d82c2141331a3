// Header facts and statement comments of the statement-by-statement lowerings (stmt_header.h).
#include "backend/stmt_header.h"

#include "tl/printer.h"

namespace qattn::backend {

bool read_header_stmt(const tl::Stmt& s, HeaderFacts& h, support::DiagSink& diags, const std::string& constant_hint) {
  auto constant = [&](const tl::Expr& e, support::SrcLoc at, const char* what, const std::string& name) -> bool {
    support::DiagSink quiet(diags.file());
    auto v = tl::eval_int(e, h.env, &quiet);
    if (!v) {
      diags.error("XL0201", at, std::string(what) + " " + name + " `" + tl::print_expr(e) + "` is not a compile-time constant",
                  constant_hint);
      return false;
    }
    h.env.ints[name] = *v;
    h.fixed.push_back({name, *v});
    return true;
  };
  switch (s.kind) {
    case tl::Stmt::Kind::Kernel: h.kernel = &s; return true;
    case tl::Stmt::Kind::Dim:
      for (const auto& it : s.dim.items) {
        if (!it.value) h.runtime.push_back(it.name);
        else if (!constant(*it.value, it.loc, "Dim", it.name)) return false;
      }
      return true;
    case tl::Stmt::Kind::Const:
      for (const auto& it : s.cnst.items)
        if (!constant(it.value, it.loc, "Const", it.name)) return false;
      return true;
    case tl::Stmt::Kind::Grid:
      h.grid = &s;
      if (s.grid.items.size() > 3) {
        diags.error("XL0203", s.loc, "a Grid of " + std::to_string(s.grid.items.size()) + " axes cannot be launched",
                    "CUDA grids have 3 axes");
        return false;
      }
      return true;
    default: return true;
  }
}

std::string tl_ref(const tl::Stmt& s) {
  std::string text = s.kind == tl::Stmt::Kind::For
                         ? "for " + s.loop.var + " = " + tl::print_expr(s.loop.lo) + ": " + tl::print_expr(s.loop.hi)
                         : tl::print_stmt(s);
  if (auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return "// TL " + std::to_string(s.loc.line) + ": " + text;
}

}  // namespace qattn::backend
