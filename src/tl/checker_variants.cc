// TL checker, attention variants: Score / Mask declarations (TL0410), auxiliary global tensors
// (TL0406), `Compute Modify` and `Compute Mask ... with NAME` (TL0409), and the loop attribute
// `{skip: NAME}` (TL0411). Input: one statement; output: diagnostics and CheckInfo::variants/aux.
#include <set>

#include "tl/checker_internal.h"
#include "tl/variant.h"

namespace qattn::tl::detail {
namespace {

}  // namespace

bool Walker::is_aux(const std::string& name) const {
  for (const auto& a : info_.aux)
    if (a == name) return true;
  return false;
}

// The type of a declaration expression; reports what is wrong. `locals` are the builtins in scope.
VType_ Walker::vexpr(const Expr& e, const Stmt& s, const std::vector<std::string>& locals, int depth) {
  const SrcLoc at = pick(e.loc, s.loc);
  auto bad = [&](const std::string& msg, const std::string& hint) {
    error(s, "TL0410", at, msg, hint);
    return VType_::Bad;
  };
  if (depth > 200) return bad("declaration nested too deeply", "simplify the expression");
  switch (e.kind) {
    case Expr::Kind::Number: return VType_::Num;
    case Expr::Kind::Name: {
      for (const auto& l : locals)
        if (e.name == l) return VType_::Num;
      if (is_builtin_scalar(e.name) || is_launch_int(e.name)) return VType_::Num;
      auto it = syms_.find(e.name);
      if (it == syms_.end()) {
        std::string scope;
        for (const auto& l : locals) scope += (scope.empty() ? "" : ", ") + l;
        return bad("'" + e.name + "' is not defined in this declaration",
                   "declarations use " + scope + ", Dims, Consts, Grid variables, Lets and builtin scalars");
      }
      if (it->second.kind == SymKind::Tensor)
        return bad("'" + e.name + "' is a tensor", "read an element of an auxiliary tensor with " + e.name + "[i, ...]");
      if (it->second.kind == SymKind::LoopVar)
        return bad("'" + e.name + "' is a loop index", "declarations are evaluated per element: use q_idx / kv_idx");
      return VType_::Num;
    }
    case Expr::Kind::Unary: {
      if (e.args.size() != 1) return bad("malformed unary expression", "");
      VType_ a = vexpr(e.args[0], s, locals, depth + 1);
      if (a == VType_::Bad) return a;
      if (e.op == "not") return a == VType_::Bool ? VType_::Bool : bad("`not` applies to a predicate", "write `not (a < b)`");
      return a == VType_::Num ? VType_::Num : bad("'-' applies to a number, not a predicate", "");
    }
    case Expr::Kind::Binary: {
      if (e.args.size() != 2) return bad("malformed binary expression", "");
      VType_ a = vexpr(e.args[0], s, locals, depth + 1), b = vexpr(e.args[1], s, locals, depth + 1);
      if (a == VType_::Bad || b == VType_::Bad) return VType_::Bad;
      if (e.op == "and" || e.op == "or") {
        if (a != VType_::Bool || b != VType_::Bool)
          return bad("`" + e.op + "` joins predicates", "compare numbers first: `q_idx < 64 " + e.op + " ...`");
        return VType_::Bool;
      }
      if (a != VType_::Num || b != VType_::Num)
        return bad("'" + e.op + "' takes numbers, not predicates", "combine predicates with and / or / not");
      return is_comparison(e.op) ? VType_::Bool : VType_::Num;
    }
    case Expr::Kind::Call: {
      const VariantFn* f = find_variant_fn(e.name);
      if (!f) return bad("unknown function '" + e.name + "'", "functions: tanh exp exp2 log abs floor min max cdiv clamp");
      if (int(e.args.size()) != f->args)
        return bad(e.name + " takes " + std::to_string(f->args) + " argument" + (f->args == 1 ? "" : "s") + ", found " +
                       std::to_string(e.args.size()),
                   "");
      for (const auto& x : e.args) {
        VType_ t = vexpr(x, s, locals, depth + 1);
        if (t == VType_::Bad) return t;
        if (t != VType_::Num) return bad(e.name + " takes numbers", "");
      }
      return VType_::Num;
    }
    case Expr::Kind::Index: {
      if (!is_aux(e.name))
        return bad("'" + e.name + "' is not an auxiliary tensor",
                   "declare it before this line: `Allocate " + e.name + " in global (...) fp32` (or int32)");
      const auto& ti = info_.tensors.at(e.name);
      if (ti.global_shape.size() != e.args.size())
        return bad("'" + e.name + "' has " + std::to_string(ti.global_shape.size()) + " dimension(s); found " +
                       std::to_string(e.args.size()) + " index(es)",
                   "write " + e.name + fmt_shape(ti.global_shape));
      for (const auto& x : e.args) {
        VType_ t = vexpr(x, s, locals, depth + 1);
        if (t == VType_::Bad) return t;
        if (t != VType_::Num) return bad("an index is a number, not a predicate", "");
      }
      return VType_::Num;
    }
  }
  return VType_::Bad;
}

void Walker::variant_stmt(const Stmt& s) {
  const VariantStmt& v = s.variant;
  const char* what = v.is_mask ? "Mask" : "Score";
  if (!loops_.empty()) {
    error(s, "TL0410", s.loc, std::string(what) + " declaration inside a loop body",
          "declare Score and Mask at the top level, before the loop that applies them");
    return;
  }
  if (info_.variants.count(v.name) || syms_.count(v.name)) {
    error(s, "TL0410", s.loc, "'" + v.name + "' is already declared",
          "give the " + std::string(what) + " a name of its own");
    return;
  }
  auto names = [](const char* const* b, const char* const* e) { return std::vector<std::string>(b, e); };
  const std::vector<std::string> elem = v.is_mask ? names(std::begin(kMaskBuiltins), std::end(kMaskBuiltins))
                                                  : names(std::begin(kScoreBuiltins), std::end(kScoreBuiltins));
  VType_ t = vexpr(v.expr, s, elem, 0);
  if (t == VType_::Bad) return;
  if (v.is_mask && t != VType_::Bool) {
    error(s, "TL0410", pick(v.expr.loc, s.loc), "a Mask is a predicate (which keys stay visible); found a number",
          "write a comparison, e.g. `Mask m = kv_idx <= q_idx + seqlen_k - seqlen_q`");
    return;
  }
  if (!v.is_mask && t != VType_::Num) {
    error(s, "TL0410", pick(v.expr.loc, s.loc), "a Score is a number (the modified score); found a predicate",
          "hide keys with a Mask declaration; a Score computes a value from `score`");
    return;
  }
  const std::vector<std::string> tile = names(std::begin(kClauseBuiltins), std::end(kClauseBuiltins));
  for (const auto* c : {&v.empty_when, &v.full_when}) {
    if (!*c || v.derived) continue;
    VType_ ct = vexpr(**c, s, tile, 0);
    if (ct == VType_::Num)
      error(s, "TL0410", pick((*c)->loc, s.loc), "a tile clause is a predicate over q_lo, q_hi, kv_lo, kv_hi",
            "e.g. `empty when kv_lo > q_hi`");
    if (ct != VType_::Bool) return;
  }
  info_.variants[v.name] = v;
}

// `Compute Modify S at [r, c] with NAME` and `Compute Mask S at [r, c] with NAME`: NAME is declared,
// of the right kind (a Score for Modify, a Mask for Mask).
bool Walker::check_named(const Stmt& s, bool modify) {
  const ComputeStmt& c = s.compute;
  if (c.mask.kind != MaskSpec::Kind::Named) {
    if (!modify) return true;
    error(s, "TL0409", pick(c.mask.loc, s.loc), "Compute Modify needs the Score to apply: `with NAME`",
          "declare `Score NAME = ...` and write `Compute Modify S at [m_block, j] with NAME`");
    return false;
  }
  auto it = info_.variants.find(c.mask.name);
  if (it == info_.variants.end()) {
    error(s, "TL0409", pick(c.mask.loc, s.loc),
          "'" + c.mask.name + "' is not a declared " + (modify ? "Score" : "Mask") + (modify ? "" : " nor a built-in mask"),
          modify ? "declare `Score " + c.mask.name + " = ...` before the loop"
                 : "built-in masks: bounds, causal, causal_top_left, window(L, R); or declare `Mask " + c.mask.name + " = ...`");
    return false;
  }
  if (it->second.is_mask == modify) {
    error(s, "TL0409", pick(c.mask.loc, s.loc),
          "'" + c.mask.name + "' is a " + (it->second.is_mask ? "Mask" : "Score") + "; Compute " + c.op + " applies a " +
              (modify ? "Score" : "Mask"),
          modify ? "hide keys with `Compute Mask S at [..] with " + c.mask.name + "`"
                 : "modify scores with `Compute Modify S at [..] with " + c.mask.name + "`");
    return false;
  }
  return true;
}

void Walker::modify(const Stmt& s) { mask(s); }

// `{skip: NAME}` on a loop: NAME is a Mask with an `empty when` clause (declared or derived) that a
// `Compute Mask ... with NAME` of this loop's body applies.
void Walker::check_skip(const Stmt& s, const Attr& a) {
  const SrcLoc at = pick(a.loc, s.loc);
  if (s.kind != Stmt::Kind::For || !a.value || a.value->kind != Expr::Kind::Name) {
    rep_.error("TL0411", at, "`skip` is an attribute of a loop, naming a Mask: `for j = LO: HI {skip: NAME}`",
               "move it to the loop over key tiles");
    return;
  }
  const std::string& n = a.value->name;
  auto it = info_.variants.find(n);
  if (it == info_.variants.end() || !it->second.is_mask) {
    rep_.error("TL0411", at, "`skip: " + n + "` does not name a declared Mask", "declare `Mask " + n + " = ...` before the loop");
    return;
  }
  if (!it->second.empty_when) {
    rep_.error("TL0411", at, "Mask '" + n + "' has no `empty when` clause, so no tile can be skipped",
               "declare one (`Mask " + n + " = ... empty when ...`); it is derived only for predicates over q_idx / kv_idx "
               "without auxiliary reads");
    return;
  }
  bool applied = false;
  for (const auto& b : s.loop.body)
    applied = applied || (b.kind == Stmt::Kind::Compute && b.compute.op == "Mask" &&
                          b.compute.mask.kind == MaskSpec::Kind::Named && b.compute.mask.name == n);
  if (!applied)
    rep_.error("TL0411", at, "the loop skips tiles by Mask '" + n + "' but its body never applies it",
               "add `Compute Mask S at [m_block, " + s.loop.var + "] with " + n + "` to the loop body");
}

}  // namespace qattn::tl::detail
