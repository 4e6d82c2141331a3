// The TL checker's `Merge AXIS ... end` (docs/tl.md, "Merging the parts in the kernel"): a forward
// program that splits the keys over the Grid axis AXIS ends with the merge of its parts, run by the
// block that stores a tile's last part. The body is a combine program's: it is checked by a walker
// of its own in combine mode (a scope that sees the main program's Dims, Consts, Grid variables and
// Lets, none of its buffers), whose global O / LSE / O_part / LSE_part must be the views the main
// program's O and LSE describe. Diagnostics: TL0423 (placement, axis, attributes, the split axis
// read inside), TL0424 (the body's views against the main program's O and LSE); the combine rules
// give the rest (TL0406, TL0414, TL0415).
#include <algorithm>

#include "tl/checker_internal.h"

namespace qattn::tl::detail {
namespace {

constexpr const char* kMergeHint =
    "a Merge ends a forward program that splits the keys (`Grid ..., s = 0: splits`, O and LSE at [b, s, head]): "
    "`Merge s` ... `end` after the stores of O and LSE";

std::string pack_of(const Stmt& s) {
  for (const auto& a : s.attrs)
    if (a.key == "pack" && a.value) return fmt_expr(*a.value);
  return "";
}

std::string join(const std::vector<Expr>& v) {
  std::string out;
  for (const auto& e : v) out += (out.empty() ? "" : ", ") + fmt_expr(e);
  return out;
}

}  // namespace

// Where a Merge may stand: in a forward program (not a backward or combine program, a Phase or
// another Merge), at the top level, once, after every other statement: its block runs when the
// forward's work for the tile is done, and the lowering merges once per tile.
void Walker::merge_stmt(const Stmt& s) {
  const std::string& axis = s.loop.var;
  if (backward() || combine() || phase_) {
    error(s, "TL0423", s.loc,
          "Merge " + axis + " outside a forward program (" +
              (merge_body_ ? "inside another Merge" : backward() ? "in a backward program" : "in a combine program") + ")",
          merge_body_ ? "Merge blocks do not nest: remove this one" : kMergeHint);
    return;
  }
  if (merge_) {
    error(s, "TL0423", s.loc, "a second Merge (the first is at line " + line_of(merge_->loc) + ")",
          "a program merges its parts once: remove this block");
    return;
  }
  merge_ = &s;  // (its body is checked at the end: finish_merge)
  if (!loops_.empty()) {
    error(s, "TL0423", s.loc, "Merge inside a loop", "write the Merge at the top level, as the program's last statement");
    return;
  }
  bool found = false;
  for (const auto& t : prog_.stmts) {
    if (&t == &s) {
      found = true;
    } else if (found && t.kind != Stmt::Kind::Comment && t.kind != Stmt::Kind::Blank) {
      error(s, "TL0423", s.loc, "Merge is not the program's last statement: line " + line_of(t.loc) + " follows its end",
            "the block that stores a tile's last part merges the parts after everything else: move the Merge to the end "
            "of the program");
      return;
    }
  }
}

// `{rows: R}` on the Merge line: the rows of the tile the lowering merges at a time (a schedule fact),
// a positive compile-time integer dividing the tile's rows (the main program's register O rows, BM).
void Walker::merge_attrs(const Stmt& s) {
  bool seen = false;
  for (const auto& a : s.attrs) {
    const SrcLoc at = pick(a.loc, s.loc);
    if (a.key != "rows") {
      rep_.error("TL0423", at, "`" + a.key + "` on the Merge line: a Merge takes only `{rows: R}`",
                 "write `Merge " + s.loop.var + " {rows: R}` (R a constant dividing BM), or no attribute");
      continue;
    }
    if (seen) {
      rep_.error("TL0423", at, "`rows` given twice on the Merge line", "keep one `{rows: R}`");
      continue;
    }
    seen = true;
    Env env;  // the compile-time values: fixed Dims and Consts
    for (const Stmt* h : header_) {
      if (h->kind == Stmt::Kind::Dim)
        for (const auto& it : h->dim.items)
          if (it.value)
            if (auto v = eval_int(*it.value, env)) env.ints[it.name] = *v;
      if (h->kind == Stmt::Kind::Const)
        for (const auto& it : h->cnst.items)
          if (auto v = eval_int(it.value, env)) env.ints[it.name] = *v;
    }
    std::optional<int64_t> r, bm;
    std::string bm_text = "BM";
    if (a.value && check_expr(*a.value, Ctx::Static, s)) r = eval_int(*a.value, env);
    if (auto o = info_.tensors.find("O"); o != info_.tensors.end() && o->second.in_register && !o->second.register_shape.empty()) {
      bm = eval_int(o->second.register_shape[0], env);
      bm_text = fmt_expr(o->second.register_shape[0]);
    }
    if (!r || *r < 1 || (bm && (*r > *bm || *bm % *r != 0))) {
      rep_.error("TL0423", at,
                 !a.value ? "`rows` needs the number of rows merged at a time"
                 : !r     ? "`rows: " + fmt_expr(*a.value) + "` is not a compile-time integer"
                          : "`rows: " + fmt_expr(*a.value) + "` is " + std::to_string(*r) + ", which does not divide the tile's " +
                                bm_text + (bm ? " = " + std::to_string(*bm) : std::string()) + " rows",
                 "write `{rows: R}` with R a positive constant dividing " + bm_text + " (e.g. `{rows: 4}`), or leave it out");
      continue;
    }
    merge_rows_ = static_cast<int>(*r);
  }
}

// The Merge's axis is the split axis (the Grid variable that is the middle index of O's and LSE's
// offsets); its body is then checked as a combine program by a walker of its own (run_merge).
void Walker::finish_merge() {
  if (!merge_) return;
  const Stmt& s = *merge_;
  const std::string& axis = s.loop.var;
  if (!info_.split && !split_outputs_.empty()) return;  // finish_split said why O and LSE are no parts
  const auto sym = syms_.find(axis);
  const bool grid = sym != syms_.end() && sym->second.kind == SymKind::Grid;
  const bool on_axis = info_.split && info_.split_var && info_.split_var->kind == Expr::Kind::Name &&
                       info_.split_var->name == axis && grid;
  if (!on_axis) {
    error(s, "TL0423", s.loc,
          !info_.split ? "Merge " + axis + " in a program that does not split the keys: its O and LSE hold no parts "
                                           "(a split program writes them at [b, s, head], s its Grid axis over the parts)"
                       : "Merge " + axis + " but the parts of O and LSE are indexed by `" + fmt_expr(*info_.split_var) +
                             "`" + (grid ? "" : " (and " + axis + " is no Grid variable)"),
          "name the Grid axis over the parts, the middle index of O's and LSE's offsets: `Merge s` with `Grid ..., s = 0: "
          "splits` and `Allocate O in global (seqlen_q, d) bf16 with offset [b, s, head]`");
    return;
  }
  Program sub;  // the Kernel line of a combine program standing for the Merge line, then the body
  sub.file = prog_.file;
  Stmt k;
  k.kind = Stmt::Kind::Kernel;
  k.loc = s.loc;
  k.kernel.name = kernel_ ? kernel_->kernel.name : std::string("merge");
  k.kernel.combine = true;
  sub.stmts.push_back(std::move(k));
  for (const auto& b : s.loop.body) sub.stmts.push_back(b);
  CheckInfo minfo;
  Walker w(sub, rep_, minfo);
  w.merge_body_ = true;
  w.merge_axis_ = axis;
  for (const auto& t : prog_.stmts) {
    if (t.kind == Stmt::Kind::Let) {  // a Let that reads the split axis means nothing in the merge
      bool reads = expr_reads(t.let.value, axis);
      for (const auto& h : w.merge_hidden_) reads = reads || expr_reads(t.let.value, h);
      if (reads) w.merge_hidden_.insert(t.let.name);
    }
    if (t.kind == Stmt::Kind::Allocate && t.alloc.space == Space::Global && (t.alloc.name == "O" || t.alloc.name == "LSE")) {
      const Stmt*& slot = w.main_out_[t.alloc.name == "LSE"];
      if (!slot) slot = &t;
    }
  }
  w.run_merge(s.loop.body, *this);
  poisoned.insert(w.poisoned.begin(), w.poisoned.end());  // (the range pass skips them)
  minfo.merge_axis = axis;
  minfo.merge_rows = merge_rows_;
  info_.merges.push_back(std::move(minfo));
}

// The body's walker: the main program's Dims, Consts, Grid variables (the split axis aside) and Lets
// (those that read it aside) are its names; the body is walked in place, so that its errors poison
// the statements the range pass visits.
void Walker::run_merge(const std::vector<Stmt>& body, const Walker& outer) {
  frames_.clear();
  frames_.emplace_back();
  stmt(prog_.stmts.front());  // the combine Kernel line
  auto seed = [&](const std::vector<std::string>& names, SymKind kind, std::vector<std::string>& into) {
    for (const auto& n : names) {
      if (n == merge_axis_ || merge_hidden_.count(n) || syms_.count(n)) continue;
      auto it = outer.syms_.find(n);
      if (it == outer.syms_.end() || it->second.kind != kind) continue;
      syms_[n] = Symbol{kind, it->second.decl, 0};
      frames_.back().names.push_back(n);
      into.push_back(n);
    }
  };
  seed(outer.info_.dims, SymKind::Dim, info_.dims);
  seed(outer.info_.consts, SymKind::Const, info_.consts);
  seed(outer.info_.grid_vars, SymKind::Grid, info_.grid_vars);
  seed(outer.info_.lets, SymKind::Let, info_.lets);
  walk_body(body);
  finish();
}

// A global of the Merge's body: O and LSE (the merged result) are the main program's O and LSE
// without the part index ([b, head] for its [b, s, head]); O_part and LSE_part (a part, in the loop
// `for t = 0: splits`) are those views at [b, t, head]. Same dtype, shape and `{pack}` as the main
// ones: they read what the parts stored and write what the main program's callers read.
void Walker::merge_alloc(const Stmt& s) {
  const AllocateStmt& a = s.alloc;
  const bool part = a.name == "O_part" || a.name == "LSE_part";
  const bool lse = a.name == "LSE" || a.name == "LSE_part";
  const Stmt* ref = main_out_[lse ? 1 : 0];
  if (!ref || ref->alloc.offset.size() != 3) return;  // (the main program's checks say what is missing)
  const AllocateStmt& m = ref->alloc;
  const std::string main_name = lse ? "LSE" : "O";
  if (part && loops_.size() != 1) {
    error(s, "TL0424", s.loc,
          a.name + (loops_.empty() ? " outside the loop over the parts" : " in a nested loop") + ": it is the view of one part",
          "allocate it in the loop over the parts, `for t = 0: splits`, with offset [" + fmt_expr(m.offset[0]) + ", t, " +
              fmt_expr(m.offset[2]) + "]");
    return;
  }
  const std::string t = part ? loops_.back().var : std::string();
  std::vector<Expr> want = {m.offset[0], m.offset[2]};
  if (part) want.insert(want.begin() + 1, Expr::ident(t));
  const DType dflt = lse ? DType::F32 : DType::F16;
  const DType got_dt = a.dtype.value_or(dflt), want_dt = m.dtype.value_or(dflt);
  std::string diff;
  auto add = [&](const std::string& d) { diff += (diff.empty() ? "" : "; ") + d; };
  if (part && loops_.back().header != "for " + t + " = 0: splits")
    add("its loop `" + loops_.back().header + "` does not run over the parts (`for " + t + " = 0: splits`)");
  if (got_dt != want_dt) add(std::string("it is ") + to_string(got_dt) + ", not " + to_string(want_dt));
  if (!same_shape(a.shape, m.shape)) add("its shape is " + fmt_shape(a.shape) + ", not " + fmt_shape(m.shape));
  if (a.offset.size() == want.size() && !std::equal(a.offset.begin(), a.offset.end(), want.begin()))
    add("its offset is [" + join(a.offset) + "], not [" + join(want) + "]");
  const std::string pa = pack_of(s), pm = pack_of(*ref);
  if (pa != pm)
    add(pm.empty()   ? "it has `{pack: " + pa + "}` but the main program's " + main_name + " is not packed"
        : pa.empty() ? "it lacks the main program's `{pack: " + pm + "}`"
                     : "it has `{pack: " + pa + "}`, not `{pack: " + pm + "}`");
  if (diff.empty()) return;
  error(s, "TL0424", s.loc,
        a.name + (part ? " reads the parts stored in the main program's " : " receives the merge of the main program's ") +
            main_name + " (line " + line_of(ref->loc) + "), but " + diff,
        "write `Allocate " + a.name + " in global " + fmt_shape(m.shape) + " " + to_string(want_dt) + " with offset [" +
            join(want) + "]" + (pm.empty() ? "" : " {pack: " + pm + "}") + "`" +
            (part ? " in `for " + (t.empty() ? std::string("t") : t) + " = 0: splits`" : ""));
}

}  // namespace qattn::tl::detail
