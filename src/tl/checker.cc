// The TL checker's driver: the public entry points, scopes and names (TL0301/TL0302/TL0306-TL0308),
// the data flow over straight-line code and loops (TL0304/TL0305), header statements, unknown
// schedule attributes (TL0701) and the whole-program facts checked at the end (Kernel header,
// required global tensors, O stored, Kernel mask applied: TL0307/TL0406/TL0409). Allocate and Copy
// are in checker_memory.cc, Compute and Reshape in checker_shapes.cc, the Hopper schedule (Role and
// its attributes) in checker_schedule.cc, the range analysis in checker_ranges.cc, formatting
// helpers in checker_util.cc.
// Input: a Program (any AST, even a malformed one). Output: diagnostics; never throws.
#include "tl/checker.h"

#include "tl/checker_internal.h"
#include "tl/eval.h"

namespace qattn::tl {
namespace detail {

// ---- walker: scopes and names ----------------------------------------------------------------

void Walker::error(const Stmt& s, const std::string& code, SrcLoc loc, const std::string& msg,
                   const std::string& hint) {
  poisoned.insert(&s);
  rep_.error(code, pick(loc, s.loc), msg, hint);
}

void Walker::push_frame() { frames_.emplace_back(); }

void Walker::pop_frame() {
  if (frames_.size() <= 1) return;
  Frame f = std::move(frames_.back());
  frames_.pop_back();
  for (const auto& [name, lv] : f.bufs) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) continue;
    Buffer& b = it->second.lv[lv];
    if (!b.exists) continue;
    gone_[name] = Gone{b.decl, b.loop_header, b.carried_reported, lv};
    b = Buffer{};
    if (!it->second.any()) {
      tensors_.erase(it);
      auto s = syms_.find(name);
      if (s != syms_.end() && s->second.kind == SymKind::Tensor) syms_.erase(s);
    }
  }
  for (const auto& name : f.names) {
    auto s = syms_.find(name);
    if (s == syms_.end()) continue;
    gone_[name] = Gone{s->second.decl, loops_.empty() ? std::string() : loops_.back().header, false, -1};
    syms_.erase(s);
  }
}

std::string Walker::suggest(const std::string& name) const {
  std::string best;
  size_t best_d = 3;
  auto consider = [&](const std::string& cand) {
    if (cand == name) return;
    size_t d = edit_distance(name, cand);
    if (d < best_d && d <= std::max<size_t>(1, name.size() / 2)) {
      best_d = d;
      best = cand;
    }
  };
  for (const auto& [n, s] : syms_) consider(n);
  for (const char* n : {"softmax_scale", "softcap", "window_left", "window_right"}) consider(n);
  for (const auto& [n, v] : builtin_scalars()) consider(n);
  return best;
}

void Walker::report_undeclared(const std::string& name, SrcLoc loc, const Stmt& s, const std::string& what,
                               const std::string& hint_override) {
  if (merge_body_ && (name == merge_axis_ || merge_hidden_.count(name))) {  // (a Merge's body: checker_merge.cc)
    error(s, "TL0423", loc,
          name == merge_axis_ ? "the split axis " + name + " is not visible in the Merge block: the block merges every part of its tile"
                              : "the Let " + name + " reads the split axis " + merge_axis_ + ", which is not visible in the Merge block",
          "loop over the parts (`for t = 0: splits`) and index O_part / LSE_part with the loop variable");
    return;
  }
  auto g = gone_.find(name);
  if (g != gone_.end()) {
    if (g->second.carried_reported) {  // the TL0304 at its Allocate already says how to fix this
      poisoned.insert(&s);
      return;
    }
    error(s, "TL0301", loc,
          "'" + name + "' is not visible here: it was declared at line " + line_of(g->second.decl) +
              " inside a loop body, and its scope ended at that loop's `end`",
          "declare it before `" + (g->second.loop_header.empty() ? std::string("for ...") : g->second.loop_header) +
              "` so that it outlives the loop");
    return;
  }
  std::string hint;
  std::string near = suggest(name);
  if (!near.empty()) hint = "did you mean '" + near + "'? ";
  if (!hint_override.empty()) {
    hint += hint_override;
  } else if (what == "tensor") {
    hint += "declare it before this line: `Allocate " + name + " in register (...) fp32` / `Allocate " + name +
            " in shared (...) fp16`, or produce it with `Compute ... and get " + name + "`";
  } else {
    hint += "declare it before this line (`Dim " + name + "`, `Const " + name + " = ...`, `Let " + name +
            " = ...`), or use one of the declared names";
  }
  error(s, "TL0301", loc, "'" + name + "' is not declared", hint);
}

bool Walker::explain_gone_buffer(const std::string& name, Space sp, SrcLoc at, const Stmt& s) {
  auto g = gone_.find(name);
  if (g == gone_.end() || g->second.level != space_index(sp)) return false;
  if (g->second.carried_reported) {
    poisoned.insert(&s);
    return true;
  }
  error(s, "TL0301", at,
        "the " + std::string(to_string(sp)) + " buffer of '" + name + "' is not visible here: it was allocated at line " +
            line_of(g->second.decl) + " inside a loop body, and its scope ended at that loop's `end`",
        "allocate it before `" + (g->second.loop_header.empty() ? std::string("for ...") : g->second.loop_header) +
            "` so that it outlives the loop");
  return true;
}

bool Walker::declare_name(const std::string& name, SymKind kind, SrcLoc loc, const Stmt& s) {
  if (name.empty()) {
    error(s, "TL0306", loc, "a declaration without a name", "write a name: [A-Za-z_][A-Za-z0-9_]*");
    return false;
  }
  if (is_builtin_scalar(name) || is_launch_int(name) || name == "cdiv" || name == "min" || name == "max") {
    error(s, "TL0302", loc, "'" + name + "' is a builtin and cannot be redeclared", "choose another name");
    return false;
  }
  auto it = syms_.find(name);
  if (it != syms_.end()) {
    error(s, "TL0302", loc,
          "'" + name + "' is already declared as " + sym_kind_name(it->second.kind) + " at line " +
              line_of(it->second.decl),
          "choose another name for this " + std::string(sym_kind_name(kind)) + ", or remove one declaration");
    return false;
  }
  syms_[name] = Symbol{kind, loc, static_cast<int>(frames_.size()) - 1};
  frames_.back().names.push_back(name);
  gone_.erase(name);
  return true;
}

bool Walker::check_expr(const Expr& e, Ctx ctx, const Stmt& s, int depth) {
  SrcLoc at = pick(e.loc, s.loc);
  if (depth > 200) {
    error(s, "TL0306", at, "expression nested too deeply", "simplify the expression");
    return false;
  }
  switch (e.kind) {
    case Expr::Kind::Number:
      if (ctx != Ctx::Scalar && !e.is_int) {
        error(s, "TL0306", at, "'" + fmt_expr(e) + "' is not an integer; indices, shapes and bounds are integers",
              "write an integer expression");
        return false;
      }
      return true;
    case Expr::Kind::Name: {
      if (is_launch_int(e.name)) {  // window_left / window_right: integers known at launch
        if (ctx != Ctx::Static) return true;
        error(s, "TL0306", at, "'" + e.name + "' is a launch argument; shapes, Const/Dim values, Grid extents and Role sizes may not use it",
              "use it in the window mask, loop bounds, coordinates, Lets and declarations");
        return false;
      }
      if (is_builtin_scalar(e.name)) {
        if (ctx == Ctx::Scalar) return true;
        error(s, "TL0306", at, "'" + e.name + "' is a scalar builtin; an integer is expected here",
              "indices, shapes and bounds use Dims, Consts, grid, Let and loop indices");
        return false;
      }
      auto it = syms_.find(e.name);
      if (it == syms_.end()) {
        report_undeclared(e.name, at, s, "name");
        return false;
      }
      SymKind k = it->second.kind;
      if (k == SymKind::Tensor) {
        error(s, "TL0306", at,
              "'" + e.name + "' is a tensor; " +
                  (ctx == Ctx::Scalar ? "a scalar expression cannot contain tensors" : "an integer expression is expected here"),
              ctx == Ctx::Scalar ? "use the tensor as a whole operand (`Compute Multiply S, " + e.name + "`)"
                                 : "use Dims, Consts, grid, Let or loop indices here");
        return false;
      }
      if ((ctx == Ctx::Static || ctx == Ctx::Window) && k != SymKind::Dim && k != SymKind::Const) {
        error(s, "TL0306", at,
              "'" + e.name + "' is " + sym_kind_name(k) + "; shapes, Const/Dim values, Grid extents and masks may only use Dims and Consts",
              "use Dims and Consts here (e.g. `(BM, d)`); block and loop indices belong in coordinates");
        return false;
      }
      return true;
    }
    case Expr::Kind::Unary:
      if (e.args.size() != 1 || (e.op != "-" && !e.op.empty())) {
        error(s, "TL0306", at, "malformed unary expression", "write `-x`");
        return false;
      }
      return check_expr(e.args[0], ctx, s, depth + 1);
    case Expr::Kind::Binary: {
      static const std::set<std::string> ops = {"+", "-", "*", "/", "%"};
      if (e.args.size() != 2 || !ops.count(e.op)) {
        error(s, "TL0306", at, "malformed binary expression", "operators are + - * / %");
        return false;
      }
      bool a = check_expr(e.args[0], ctx, s, depth + 1);
      bool b = check_expr(e.args[1], ctx, s, depth + 1);
      return a && b;
    }
    case Expr::Kind::Index:
      error(s, "TL0306", at, "'" + e.name + "[...]' reads an auxiliary tensor; only Score and Mask declarations may",
            "move the read into a `Score` or `Mask` declaration");
      return false;
    case Expr::Kind::Call: {
      bool ok = true;
      if (e.name == "cdiv") {
        if (e.args.size() != 2) {
          error(s, "TL0306", at, "cdiv takes 2 arguments, found " + std::to_string(e.args.size()), "write cdiv(a, b)");
          ok = false;
        }
      } else if (e.name == "min" || e.name == "max") {
        if (e.args.empty()) {
          error(s, "TL0306", at, e.name + " needs at least one argument", "write " + e.name + "(a, b)");
          ok = false;
        }
      } else {
        error(s, "TL0306", at, "unknown function '" + e.name + "'", "functions are cdiv(a, b), min(a, ...), max(a, ...)");
        ok = false;
      }
      for (const auto& a : e.args) ok = check_expr(a, ctx, s, depth + 1) && ok;
      return ok;
    }
  }
  return false;
}

TensorState* Walker::tensor(const std::string& name) {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Buffer* Walker::buffer(const std::string& name, Space sp) {
  TensorState* t = tensor(name);
  if (!t) return nullptr;
  Buffer& b = t->lv[space_index(sp)];
  return b.exists ? &b : nullptr;
}

Buffer& Walker::declare_buffer(const std::string& name, Space sp, SrcLoc loc, bool by_allocate) {
  if (!syms_.count(name)) {
    syms_[name] = Symbol{SymKind::Tensor, loc, static_cast<int>(frames_.size()) - 1};
  }
  gone_.erase(name);
  TensorState& t = tensors_[name];
  Buffer& b = t.lv[space_index(sp)];
  b = Buffer{};
  b.exists = true;
  b.decl = loc;
  b.frame = static_cast<int>(frames_.size()) - 1;
  b.loop_depth = static_cast<int>(loops_.size());
  b.by_allocate = by_allocate;
  if (!loops_.empty()) b.loop_header = loops_.back().header;
  frames_.back().bufs.emplace_back(name, space_index(sp));
  TensorInfo& ti = info_.tensors[name];
  ti.name = name;
  if (ti.decl.line == 0) ti.decl = loc;
  return b;
}

// ---- data flow -------------------------------------------------------------------------------

void Walker::read(const std::string& name, Space sp, SrcLoc at, const Stmt& s) {
  Buffer* b = buffer(name, sp);
  if (!b) return;
  if (sp == Space::Shared && !b->view_of.empty()) {  // a view reads its base (one level: a refused view of a view reads nothing)
    const Buffer* base = buffer(b->view_of, sp);
    if (base && base->view_of.empty()) read(b->view_of, sp, at, s);
    return;
  }
  if (sp == Space::Register) {
    for (size_t i = 0; i < loops_.size(); ++i) {
      if (b->loop_depth <= static_cast<int>(i) && !loops_[i].written.count(name)) loops_[i].read_first.insert(name);
    }
    int depth = static_cast<int>(loops_.size());
    if (b->by_allocate && b->loop_depth > 0 && b->loop_depth == depth && !b->written_since_decl) {
      if (!b->carried_reported) {
        b->carried_reported = true;
        rep_.error("TL0304", b->decl,
                   "'" + name + "' carries its value from one iteration to the next (line " + line_of(at) +
                       " reads it before the iteration writes it), but it is allocated inside the loop, which resets it every iteration",
                   "move `" + (b->decl_text.empty() ? "Allocate " + name + " ..." : b->decl_text) + "` before `" +
                       (b->loop_header.empty() ? std::string("for ...") : b->loop_header) + "`" +
                       (b->defined ? "" : " and give it an initial value (`init 0`, `init -inf`)"));
      }
      b->defined = true;
      return;
    }
  }
  if (!b->defined && !b->undef_reported) {
    std::string hint;
    if (sp == Space::Register && b->by_allocate) {
      hint = "give `" + (b->decl_text.empty() ? "Allocate " + name + " ..." : b->decl_text) +
             "` an initial value (`init 0`, `init -inf`), or write it (`Copy " + name +
             " from shared to register`, `Compute ... and get " + name + "`) before this line";
    } else if (sp == Space::Register) {
      hint = "write '" + name + "' before this line";
    } else if (sp == Space::Shared) {
      hint = "copy a tile into it first: `Copy " + name + " (...) in coordinate [...] from global to shared`";
    } else {
      hint = "write it before reading it";
    }
    rep_.error("TL0305", at,
               "'" + name + "' (" + to_string(sp) + ") is read before anything is written to it", hint);
    b->undef_reported = true;  // report once per buffer, even when the loop analysis resets `defined`
  }
}

void Walker::write_full(const std::string& name, Space sp) {
  Buffer* b = buffer(name, sp);
  if (!b) return;
  b->defined = true;
  b->written_since_decl = true;
  b->staged = -1;  // (a Copy from register that stages the whole tile sets it again)
  if (sp == Space::Register) {
    b->version = ++write_seq_;
    for (auto& l : loops_) l.written.insert(name);
  }
}

// ---- statements ------------------------------------------------------------------------------

// `skip` (on a loop, naming a Mask) is checked by check_skip; the Hopper schedule's attributes
// (stages, async, wait, release, overlap, persistent) by check_schedule (checker_schedule.cc); anything else is
// TL0701.
void Walker::attrs(const Stmt& s) {
  if (s.kind == Stmt::Kind::Merge) return merge_attrs(s);  // `{rows: R}` only (checker_merge.cc)
  for (const auto& a : s.attrs) {
    if (a.key == "skip") {
      check_skip(s, a);
      continue;
    }
    if (a.key == "pack") {
      check_pack(s, a);
      continue;
    }
    if (a.key == "paged") {
      check_paged(s, a);
      continue;
    }
    if (a.key == "ragged") {
      check_ragged(s, a);
      continue;
    }
    if (a.key == "unroll") {  // the loop's iterations issued U at a time (a combine program's parts)
      const bool num = a.value && a.value->kind == Expr::Kind::Number && a.value->is_int && a.value->value >= 1 &&
                       a.value->value <= 64;
      if (s.kind != Stmt::Kind::For || !combine() || !num)
        rep_.error("TL0415", pick(a.loc, s.loc),
                   s.kind != Stmt::Kind::For ? "`unroll` is an attribute of a loop"
                   : !combine()              ? "`unroll` is lowered for the loop over the parts of a combine program only"
                                             : "`unroll` takes an integer literal from 1 to 64",
                   "write `for s = 0: splits {unroll: 16}` in a `Kernel NAME combine` program, or remove it");
      continue;
    }
    if (a.key == "warps_m") {  // the warp layout of the register tile the statement makes (mma.sync backward)
      const bool makes_tile = (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Register) ||
                              (s.kind == Stmt::Kind::Compute && s.compute.op == "GEMM" &&
                               s.compute.result == ComputeStmt::Result::Get);
      const bool num = a.value && (a.value->kind != Expr::Kind::Number ||
                                   (a.value->is_int && a.value->value >= 1 && a.value->value <= 16));
      if (!backward() || !makes_tile || !num)
        rep_.error("TL0417", pick(a.loc, s.loc),
                   !backward()   ? "`warps_m` is lowered in backward programs only (the mma.sync backward's warp layouts)"
                   : !makes_tile ? "`warps_m` belongs on the statement that makes a register tile: `Allocate X in register ...` or "
                                   "`Compute GEMM A, B and get X`"
                                 : "`warps_m` takes an integer from 1 to 16 (a literal, or an expression of Consts)",
                   "write e.g. `Compute GEMM Q, K^T and get S {warps_m: 2}` (2 warps along the rows, WARPS / 2 along the "
                   "columns), or remove it");
      else if (a.value->kind != Expr::Kind::Number)
        check_expr(*a.value, Ctx::Static, s);
      continue;
    }
    if (a.key == "at_use") {  // a register vector read from shared memory where it is used (backward)
      const bool vec = s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Register && s.alloc.shape.size() == 1;
      const bool init = vec && s.alloc.init.has_value();
      if (!backward() || !vec || a.value || init)
        rep_.error("TL0420", pick(a.loc, s.loc),
                   !backward() ? "`at_use` is lowered in backward programs only"
                   : !vec      ? "`at_use` belongs on the Allocate of a register vector: `Allocate D in register (BM) fp32 {at_use}`"
                   : init      ? "`at_use` on a vector with `init`: it holds no values of its own, only its ring slot's"
                               : "`at_use` takes no value",
                   "write `{at_use}` on a register vector that is copied from a shared ring and read by column (`D^T`), or "
                   "remove it");
      continue;
    }
    if (a.key == "ordered") {  // deterministic sums: the additions into each tile in a fixed order (backward)
      const bool adds = s.kind == Stmt::Kind::Copy && s.copy.accumulate && s.copy.from == Space::Register &&
                        s.copy.to == Space::Global;
      if (!backward() || !adds || a.value)
        rep_.error("TL0418", pick(a.loc, s.loc),
                   !backward() ? "`ordered` is lowered in backward programs only (deterministic gradients)"
                   : !adds     ? "`ordered` belongs on an accumulating store: `Copy X (tile) in coordinate [..] from register to "
                                 "global and accumulate {ordered}`"
                               : "`ordered` takes no value",
                   "write `{ordered}` on the `... and accumulate` Copies of dQ (and dK, dV), or remove it");
      continue;
    }
    if (a.key == "view") {  // checked with the Allocate it belongs to (checker_views.cc)
      if (s.kind != Stmt::Kind::Allocate)
        error(s, "TL0421", pick(a.loc, s.loc), "`view` applies to the Allocate of a shared buffer (the first columns of another)",
              "write `Allocate V in shared (BN, dv) bf16 {view: K}`, or remove it");
      continue;
    }
    if (is_schedule_attr(a.key)) continue;
    rep_.error("TL0701", pick(a.loc, s.loc), "unknown schedule attribute `" + a.key + "`",
               "the attributes are skip: MASK (loops), stages: N (shared Allocate), async (global -> shared Copy), "
               "wait: X and release: X (any statement), overlap (the key loop), stage: N (its statements), persistent (the "
               "Grid), pack: G (the global Q, O, LSE), paged: TABLE (the global K, V), ragged: CU_SEQLENS (the global Q, K, V, O, LSE), view: B (a shared Allocate), unroll: U (a combine program's loop), warps_m: N (a backward program's register tiles), ordered (a backward program's accumulating stores), at_use (a backward program's register vectors); remove `{" + a.key +
                   (a.value ? ": ..." : "") + "}` from this line");
  }
}

void Walker::kernel_stmt(const Stmt& s) {
  if (kernel_) {
    error(s, "TL0307", s.loc, "a second Kernel header (the first is at line " + line_of(kernel_->loc) + ")",
          "a TL file holds one kernel: remove this line");
    return;
  }
  kernel_ = &s;
  info_.kernel_name = s.kernel.name;
  info_.kernel_mask = s.kernel.mask;
  if (seen_non_header_ || !loops_.empty()) {
    error(s, "TL0307", s.loc, "the Kernel header must be the first statement",
          "move `Kernel " + s.kernel.name + " ...` to the top of the file");
  }
}

void Walker::dim_stmt(const Stmt& s) {
  if (!loops_.empty()) {
    error(s, "TL0308", s.loc, "Dim inside a loop body", "declare problem dimensions at the top, after the Kernel line");
  }
  for (const auto& it : s.dim.items) {
    if (it.value) check_expr(*it.value, Ctx::Static, s);
    if (declare_name(it.name, SymKind::Dim, pick(it.loc, s.loc), s)) info_.dims.push_back(it.name);
  }
}

void Walker::const_stmt(const Stmt& s) {
  if (!loops_.empty()) {
    error(s, "TL0308", s.loc, "Const inside a loop body", "declare tile parameters at the top, after the Kernel line");
  }
  for (const auto& it : s.cnst.items) {
    check_expr(it.value, Ctx::Static, s);
    if (declare_name(it.name, SymKind::Const, pick(it.loc, s.loc), s)) info_.consts.push_back(it.name);
  }
}

void Walker::grid_stmt(const Stmt& s) {
  if (!loops_.empty()) {
    error(s, "TL0308", s.loc, "Grid inside a loop body", "declare the grid at the top, after Dim and Const");
  }
  for (const auto& it : s.grid.items) {
    check_expr(it.extent, Ctx::Static, s);
    if (declare_name(it.var, SymKind::Grid, pick(it.loc, s.loc), s)) info_.grid_vars.push_back(it.var);
  }
}

void Walker::let_stmt(const Stmt& s) {
  if (kv_length_let(s)) return;
  check_expr(s.let.value, Ctx::Index, s);
  if (declare_name(s.let.name, SymKind::Let, s.loc, s) && loops_.empty()) info_.lets.push_back(s.let.name);
}

void Walker::for_stmt(const Stmt& s) {
  const ForStmt& f = s.loop;
  bool ok = check_expr(f.lo, Ctx::Index, s);
  ok = check_expr(f.hi, Ctx::Index, s) && ok;
  (void)ok;
  if (loops_.size() >= 32) {
    error(s, "TL0308", s.loc, "loops nested too deeply", "flatten the loop nest");
    return;
  }
  std::string header = "for " + f.var + " = " + fmt_expr(f.lo) + ": " + fmt_expr(f.hi);
  auto before = tensors_;
  auto one_walk = [&] {
    const auto derived_before = derived_here_;  // each walk of the body is one iteration, in TL order
    derived_here_.clear();
    push_frame();
    loops_.push_back(LoopCtx{header, f.var, {}, {}});
    declare_name(f.var, SymKind::LoopVar, s.loc, s);
    walk_body(f.body);
    for (const auto& n : loops_.back().read_first) {
      if (loops_.back().written.count(n)) info_.tensors[n].loop_carried = true;
    }
    pop_frame();
    loops_.pop_back();
    ++walks_;
    derived_here_.insert(derived_before.begin(), derived_before.end());  // what the enclosing body derived, and this loop
  };
  one_walk();
  // A second walk models the next iteration when layouts changed across the body (a tensor that
  // enters iteration 2 in another layout than iteration 1). Diagnostics are deduplicated.
  bool changed = false;
  for (const auto& [name, t] : before) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) continue;
    for (int l = 0; l < 3; ++l) {
      if (t.lv[l].exists && it->second.lv[l].exists && t.lv[l].layout != it->second.lv[l].layout) changed = true;
    }
  }
  if (changed && walks_ < 256) one_walk();
  // After the loop: the body may have run zero times. Must-written facts are those before the
  // loop; a layout that differs between "no iteration" and "some iterations" becomes unknown.
  for (auto& [name, t] : tensors_) {
    auto it = before.find(name);
    if (it == before.end()) continue;
    for (int l = 0; l < 3; ++l) {
      Buffer& now = t.lv[l];
      const Buffer& old = it->second.lv[l];
      if (!now.exists || !old.exists) continue;
      now.defined = old.defined;
      now.written_since_decl = old.written_since_decl;
      if (now.layout != old.layout) now.layout = Layout::Unknown;
    }
  }
}

void Walker::stmt(const Stmt& s) {
  attrs(s);
  switch (s.kind) {
    case Stmt::Kind::Comment:
    case Stmt::Kind::Blank: return;
    case Stmt::Kind::Kernel: kernel_stmt(s); break;
    case Stmt::Kind::Dim: dim_stmt(s); break;
    case Stmt::Kind::Const: const_stmt(s); break;
    case Stmt::Kind::Grid: grid_stmt(s); break;
    case Stmt::Kind::Let: let_stmt(s); break;
    case Stmt::Kind::Allocate: allocate_stmt(s); break;
    case Stmt::Kind::Copy: copy_stmt(s); break;
    case Stmt::Kind::Compute: compute_stmt(s); break;
    case Stmt::Kind::Reshape: reshape_stmt(s); break;
    case Stmt::Kind::For: for_stmt(s); break;
    case Stmt::Kind::Variant: variant_stmt(s); break;
    case Stmt::Kind::Role: role_stmt(s); break;
    case Stmt::Kind::Phase: phase_stmt(s); break;
    case Stmt::Kind::Merge: merge_stmt(s); break;
  }
  if (loops_.empty() && (s.kind == Stmt::Kind::Kernel || s.kind == Stmt::Kind::Dim || s.kind == Stmt::Kind::Const))
    header_.push_back(&s);
  if (s.kind != Stmt::Kind::Kernel) {
    if (!kernel_ && !seen_non_header_) {
      rep_.error("TL0307", s.loc, "the program does not start with a Kernel header",
                 "add `Kernel NAME with mask none` (or causal, ...) as the first line");
    }
    seen_non_header_ = true;
  }
}

void Walker::walk_body(const std::vector<Stmt>& body) {
  for (const auto& s : body) stmt(s);
}

void Walker::finish() {
  SrcLoc top = kernel_ ? kernel_->loc : SrcLoc{1, 1};
  if (!kernel_ && !seen_non_header_) {
    rep_.error("TL0307", top, "the program has no Kernel header", "add `Kernel NAME with mask none` as the first line");
  }
  const MaskSpec km = kernel_ ? kernel_->kernel.mask : MaskSpec{};
  if (kernel_ && km.kind == MaskSpec::Kind::Window) {
    check_expr(km.left, Ctx::Window, *kernel_);
    check_expr(km.right, Ctx::Window, *kernel_);
  }
  // Every Compute Mask applies the Kernel's mask, or `bounds` alone (tiles the loop bounds already
  // keep inside the visible region still need the sequence-end bound).
  bool applied = false;
  for (const Stmt* m : masks_) {
    const MaskSpec& ms = m->compute.mask;
    if (ms.kind == MaskSpec::Kind::None || ms.kind == MaskSpec::Kind::Bounds || ms.kind == MaskSpec::Kind::Named) continue;
    bool same = ms.kind == km.kind &&
                (ms.kind != MaskSpec::Kind::Window || (ms.left == km.left && ms.right == km.right));
    if (same) {
      applied = true;
      continue;
    }
    std::string kmask = km.kind == MaskSpec::Kind::Window
                            ? "window(" + fmt_expr(km.left) + ", " + fmt_expr(km.right) + ")"
                            : std::string(to_string(km.kind));
    rep_.error("TL0409", pick(ms.loc, m->loc),
               "Mask with " + std::string(to_string(ms.kind)) + " but the Kernel declares mask " + kmask,
               "apply the Kernel's mask (`with " + kmask + "`), or `with bounds`; or change the Kernel line");
  }
  bool needs_mask = km.kind == MaskSpec::Kind::Causal || km.kind == MaskSpec::Kind::CausalTopLeft ||
                    km.kind == MaskSpec::Kind::Window;
  if (phase_) {  // a phase: its workspaces written; the attention's masks and gradients are the main kernel's
    for (const auto& w : info_.workspaces)
      if (!stored_to_global_.count(w) && !plain_to_global_.count(w))
        rep_.error("TL0419", global_alloc_.count(w) ? global_alloc_.at(w) : top,
                   "Phase " + info_.phase_name + " never writes its workspace " + w,
                   "store it: `Copy " + w + " (BM) in coordinate [m, 0] from register to global`");
    return;
  }
  if (kernel_ && needs_mask && !applied) {
    rep_.error("TL0409", top,
               "the Kernel declares mask " + std::string(to_string(km.kind)) + " but no Compute Mask applies it",
               "add `Compute Mask S at [m_block, j] with " + std::string(to_string(km.kind)) +
                   (km.kind == MaskSpec::Kind::Window ? "(...)" : "") + "` after the scores are computed");
  }
  finish_pack();
  finish_kv_cache();
  finish_split();
  finish_merge();
  // Kernel arguments.
  const std::vector<const char*> required =
      backward()  ? std::vector<const char*>{"Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV"}
      : combine() ? std::vector<const char*>{"O_part", "LSE_part", "O", "LSE"}
                  : std::vector<const char*>{"Q", "K", "V", "O"};
  if (combine() && kernel_->kernel.mask.kind != MaskSpec::Kind::None)
    rep_.error("TL0414", kernel_->loc, "a combine program merges finished results: the Kernel line declares no mask",
               "write `Kernel " + kernel_->kernel.name + " combine`");
  for (const char* n : required) {
    if (std::string(n) == "V" && v_is_view_of_k()) continue;  // V is K's first columns (`{view: K}`)
    if (!global_alloc_.count(n)) {
      rep_.error("TL0406", top,
                 std::string(merge_body_ ? "the Merge block" : backward() ? "the backward program"
                                                 : combine()  ? "the combine program" : "the program") +
                     " never allocates the global tensor " + n,
                 "add `" + example_global(n) + "` after the Grid/Let lines");
    }
  }
  if (backward()) {
    // The chain rule through every score modification: each Score a Modify applies is differentiated.
    for (const auto& name : modified_)
      if (!derived_.count(name))
        rep_.error("TL0413", top,
                   "the scores are modified by Score '" + name + "' but no `Compute Derivative` carries the gradient through it",
                   "keep the scores before the Modify (`Compute Convert S and get S0 fp32`) and, after dS = P * (dP - D), "
                   "write `Compute Derivative dS, S0 at [i, n_block] with " + name + "`");
    for (const auto& g : info_.aux_grads)
      if (!grads_accumulated_.count(g))
        rep_.error("TL0406", global_alloc_.count(g) ? global_alloc_.at(g) : top,
                   "the gradient " + g + " of the auxiliary input " + g.substr(1) + " is never accumulated",
                   "add `Compute Gradient dS, S0 and accumulate " + g + " at [i, n_block] with NAME" +
                       "` before the Score NAME's Derivative, or remove the Allocate");
    // The gradients: dK and dV stored (or accumulated) per key tile, dQ accumulated by every key block.
    for (const char* n : {"dQ", "dK", "dV"}) {
      auto it = global_alloc_.find(n);
      if (it == global_alloc_.end()) continue;
      const std::string name = n;
      const bool acc = accumulated_to_global_.count(n) > 0, plain = plain_to_global_.count(n) > 0;
      if (!acc && !plain) {
        rep_.error("TL0406", it->second, "the gradient " + name + " is never stored",
                   name == "dQ" ? "add `Copy dQ (BM, d) in coordinate [i, 0] from register to global and accumulate` in the query loop"
                                : "add `Copy " + name + " (BN, d) in coordinate [n_block, 0] from register to global` after the loop");
      } else if (acc && plain) {
        rep_.error("TL0413", it->second, name + " is both accumulated into and stored by plain Copies",
                   "store every tile of " + name + " the same way: with `and accumulate` (fp32, zero at launch) or without");
      } else if (name == "dQ" && !acc) {
        rep_.error("TL0413", it->second, "dQ is stored by a plain Copy: every key block computes a share of each dQ tile",
                   "write `Copy dQ (BM, d) in coordinate [i, 0] from register to global and accumulate`");
      }
    }
  }
  for (const char* n : {"O", "LSE"}) {
    if (backward()) break;  // inputs of a backward program
    auto it = global_alloc_.find(n);
    if (it != global_alloc_.end() && !stored_to_global_.count(n)) {
      rep_.error("TL0406", it->second, std::string("the output ") + n + " is never stored",
                 std::string("add `Copy ") + n + (std::string(n) == "O" ? " (BM, d)" : " (BM)") +
                     " in coordinate [m_block" + (std::string(n) == "O" ? ", 0" : "") +
                     "] from register to global` after the loop");
    }
  }
  auto gshape = [&](const std::string& n) -> const std::vector<Expr>* {
    auto it = info_.tensors.find(n);
    if (it == info_.tensors.end() || !it->second.in_global) return nullptr;
    return &it->second.global_shape;
  };
  auto same_head = [&](const char* a, const char* b) {
    const auto* sa = gshape(a);
    const auto* sb = gshape(b);
    if (!sa || !sb || sa->size() != 2 || sb->size() != 2) return;
    if (!((*sa)[1] == (*sb)[1])) {
      rep_.error("TL0406", global_alloc_[b],
                 std::string("global ") + a + " is " + fmt_shape(*sa) + " and " + b + " is " + fmt_shape(*sb) +
                     ": their head dims must be the same",
                 std::string("use the same head-dim name in both (`") + b + " ... (" + fmt_expr((*sb)[0]) + ", " +
                     fmt_expr((*sa)[1]) + ")`)");
    }
  };
  if (combine()) same_head("O_part", "O");
  same_head("Q", "K");
  same_head("V", "O");
  if (backward()) {
    same_head("O", "dO");
    same_head("Q", "dQ");
    same_head("K", "dK");
    same_head("V", "dV");
  }
}

// `Phase NAME ... end` (docs/tl.md, "Phases"): in a backward program, at the top, before the main
// Grid; its body is a kernel of its own (its Grid, globals, registers), checked by a second walker
// over the main program's Kernel / Dim / Const lines and the body. The fp32 globals it writes
// (workspaces) become inputs of the main program, carrying their data flow (TL0413's D term).
void Walker::phase_stmt(const Stmt& s) {
  const std::string& name = s.loop.var;
  if (!backward() || phase_) {
    error(s, "TL0419", s.loc, "Phase " + name + " outside a backward program",
          phase_ ? "phases do not nest: write each at the top of the program"
                 : "phases precede the main kernel of a `Kernel NAME backward` program (e.g. D = rowsum(dO * O))");
    return;
  }
  if (!loops_.empty() || !info_.grid_vars.empty()) {
    error(s, "TL0419", s.loc, "Phase " + name + (loops_.empty() ? " after the Grid line" : " inside a loop"),
          "write the phases after the Kernel, Dim and Const lines, before the main program's Grid");
    return;
  }
  for (const auto& ph : info_.phases)
    if (ph.phase_name == name) {
      error(s, "TL0419", s.loc, "a second Phase named " + name, "give each phase its own name");
      return;
    }
  Program sub;
  sub.file = prog_.file;
  for (const Stmt* h : header_) sub.stmts.push_back(*h);
  for (const auto& b : s.loop.body) sub.stmts.push_back(b);
  CheckInfo pinfo;
  Walker w(sub, rep_, pinfo);
  w.set_phase(name);
  for (const auto& [ws, decl] : workspace_decl_) w.workspace_decl_[ws] = decl;
  w.run();
  bool grid = false;
  for (const auto& b : s.loop.body) grid = grid || b.kind == Stmt::Kind::Grid;
  if (!grid)
    error(s, "TL0419", s.loc, "Phase " + name + " has no Grid", "a phase is a kernel: give it a Grid (`Grid m = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch`)");
  for (const auto& ws : pinfo.workspaces) {
    info_.workspace_deps[ws] = pinfo.workspace_deps[ws];
    for (const auto& b : s.loop.body)
      if (b.kind == Stmt::Kind::Allocate && b.alloc.space == Space::Global && b.alloc.name == ws) workspace_decl_[ws] = &b;
  }
  pinfo.phases.clear();
  info_.phases.push_back(std::move(pinfo));
}

void Walker::run() {
  for (const auto& s : prog_.stmts)  // (the Role's own checks: checker_schedule.cc)
    if (s.kind == Stmt::Kind::Role && !s.role.producer && s.role.split_columns) split_columns_ = true;
  frames_.clear();
  frames_.emplace_back();
  walk_body(prog_.stmts);
  finish();
}

}  // namespace detail

bool check(const Program& p, support::DiagSink& diags, const CheckOptions& opts, CheckInfo& info) {
  info = CheckInfo{};
  detail::Reporter rep(diags);
  detail::Walker w(p, rep, info);
  w.run();
  detail::check_schedule(p, w.poisoned, rep, info);
  detail::check_ranges(p, opts, w.poisoned, rep);
  return rep.errors() == 0;
}

bool check(const Program& p, support::DiagSink& diags, const CheckOptions& opts) {
  CheckInfo info;
  return check(p, diags, opts, info);
}

}  // namespace qattn::tl
