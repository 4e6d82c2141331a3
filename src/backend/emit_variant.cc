// Stage 2, attention variants: Score / Mask declarations become device lambdas over the element's
// indices (`score_NAME(score, q_idx, kv_idx)`, `mask_NAME(q_idx, kv_idx)`) and tile-clause lambdas
// (`empty_NAME` / `full_NAME` over q_lo, q_hi, kv_lo, kv_hi); auxiliary globals become pointers into
// the ABI's aux[]; `Compute Modify` / `Compute Mask ... with NAME` call qattn::apply_score /
// apply_keep (device/qattn/variant.cuh); the loop's `{skip: NAME}` walks only the key tiles whose
// `empty when` clause is false (emit_kernel.cc uses skip_next()).
// TL integer semantics are kept: int / int is floor division, int % int floor modulo.
#include "backend/lowering.h"
#include "tl/printer.h"
#include "tl/variant.h"

namespace qattn::backend::detail {

void Lowering::emit_aux(Writer& w, const tl::Stmt& s) {
  comment_stmt(w, s, "an auxiliary input of the Score/Mask declarations: p.aux[" + std::to_string(aux_.at(s.alloc.name).slot) + "]");
  const AuxInfo& a = aux_.at(s.alloc.name);
  w.line("const " + std::string(a.is_int ? "int" : "float") + "* __restrict__ aux_" + s.alloc.name + " = static_cast<const " +
         (a.is_int ? "int" : "float") + "*>(p.aux[" + std::to_string(a.slot) + "]);");
}

void Lowering::emit_declaration(Writer& w, const tl::Stmt& s) {
  comment_stmt(w, s);
  const tl::VariantStmt& v = s.variant;
  DeclType t;
  const std::string body = cpp_decl(v.expr, t);
  if (!v.is_mask) {
    w.line("auto score_" + v.name + " = [&](float score, int q_idx, int kv_idx) -> float { return " +
           (t == DeclType::Float ? body : "float(" + body + ")") + "; };");
    return;
  }
  w.line("auto mask_" + v.name + " = [&](int q_idx, int kv_idx) -> bool { return " + body + "; };");
  auto clause = [&](const char* what, const std::optional<tl::Expr>& c) {
    DeclType ct;
    const std::string e = c ? cpp_decl(*c, ct) : "false";
    w.line("auto " + std::string(what) + "_" + v.name + " = [&](int q_lo, int q_hi, int kv_lo, int kv_hi) -> bool { return " +
           e + "; };" + (c ? (v.derived ? "  // derived from the predicate" : "  // declared") : "  // no clause: never"));
  };
  clause("empty", v.empty_when);
  clause("full", v.full_when);
}

void Lowering::emit_modify(Writer& w, const tl::Stmt& s) {
  const auto& c = s.compute;
  const std::string xn = operand_name(c.operands[0]);
  RegTensor* x = xn.empty() ? nullptr : reg(xn);
  if (!x || x->kind != RegKind::Tile || c.at.size() != 2) {
    diags_.error("XL0301", s.loc, "Modify of something that is not a 2-D register score tile",
                 "`Compute Modify S at [m_block, j] with NAME`");
    return;
  }
  comment_stmt(w, s, x->pending_scale.empty() ? "" : "the folded scale is applied first");
  materialize(w, *x);
  w.line("qattn::apply_score<" + tile_m_expr_ + ", " + x->cols_expr + ">(tiled_mma, " + x->var + ", (" + cpp_int(c.at[0]) +
         ") * " + tile_m_expr_ + ", (" + cpp_int(c.at[1]) + ") * " + x->cols_expr + ", score_" + c.mask.name + ", tid);");
}

void Lowering::emit_named_mask(Writer& w, const tl::Stmt& s) {
  const auto& c = s.compute;
  const std::string xn = operand_name(c.operands[0]);
  RegTensor* x = xn.empty() ? nullptr : reg(xn);
  if (!x || x->kind != RegKind::Tile || c.at.size() != 2) {
    diags_.error("XL0301", s.loc, "Mask of something that is not a 2-D register score tile",
                 "`Compute Mask S at [m_block, j] with NAME`");
    return;
  }
  comment_stmt(w, s, "a tile the `full when` clause classifies as full only gets the bounds");
  const std::string r0 = "(" + cpp_int(c.at[0]) + ") * " + tile_m_expr_, c0 = "(" + cpp_int(c.at[1]) + ") * " + x->cols_expr;
  w.line("{");
  w.line("  const int row0 = " + r0 + ", col0 = " + c0 + ";");
  w.line("  const bool full = full_" + c.mask.name + "(row0, row0 + " + tile_m_expr_ + " - 1, col0, col0 + " + x->cols_expr +
         " - 1);");
  w.line("  qattn::apply_keep<" + tile_m_expr_ + ", " + x->cols_expr + ">(tiled_mma, " + x->var +
         ", row0, col0, " + seqlen_k_cpp() + ", full, mask_" + c.mask.name + ", tid);");
  w.line("}");
}

// The `{skip: NAME}` of the main loop: a lambda telling whether key tile `v` is visible (its
// `empty when` clause is false). Empty string when the loop has no skip.
std::string Lowering::emit_skip_lambda(Writer& w) {
  if (skip_mask_.empty()) return {};
  const std::string v = ident(loop_->loop.var);
  w.line("// TL " + std::to_string(loop_->loc.line) + ": {skip: " + skip_mask_ + "}: key tiles whose `empty when` clause holds are not visited");
  w.line("auto visible_" + v + " = [&](int " + v + ") -> bool { const int row0 = (" + skip_row_ + ") * " + tile_m_expr_ +
         ", col0 = (" + skip_col_ + ") * " + skip_cols_ + "; return !empty_" + skip_mask_ + "(row0, row0 + " + tile_m_expr_ +
         " - 1, col0, col0 + " + skip_cols_ + " - 1); };");
  w.line("auto next_" + v + " = [&](int " + v + ") -> int { return qattn::next_visible<4, 1>(" + v + ", hi_" + v +
         ", visible_" + v + "); };  // four tiles' clauses a round");
  return v;
}

}  // namespace qattn::backend::detail
