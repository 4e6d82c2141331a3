// The TL checker's range analysis: abstract execution of the program's integer skeleton (Dim,
// Const, Grid, Let, for, global views, Copy tiles) at sample dimension assignments. No data moves;
// only integers are evaluated (tl/eval.h). Diagnostics:
//   TL0601 a Copy tile lying entirely outside its global view (origin < 0 or >= extent), or a
//          global offset index outside [0, batch) / [0, heads)
//   TL0602 a Grid extent < 1, a non-empty loop starting below 0, or (default samples only) a loop that
//          never executes at any sample and block
//   TL0603 an expression that cannot be evaluated (from eval_int: division by zero, unbound name)
//   TL0604 a shape or tile extent that evaluates to <= 0
// Bounded: grid axes are sampled at {0, 1, n-2, n-1} when longer than 4, loops at their first and
// last 3 iterations when longer than 8, and each sample stops after a fixed statement budget.
// Statements the structural pass rejected (the `poisoned` set) are skipped.
#include <functional>

#include "tl/checker_internal.h"
#include "tl/eval.h"

namespace qattn::tl::detail {
namespace {

struct View {
  std::vector<int64_t> shape;
  std::vector<Expr> shape_expr;
};

void collect_names(const Expr& e, std::set<std::string>& out, int depth = 0) {
  if (depth > 200) return;
  if (e.kind == Expr::Kind::Name) out.insert(e.name);
  for (const auto& a : e.args) collect_names(a, out, depth + 1);
}

std::vector<int64_t> sample_points(int64_t lo, int64_t hi, int64_t full_upto) {
  std::vector<int64_t> v;
  if (hi <= lo) return v;
  if (hi - lo <= full_upto) {
    for (int64_t x = lo; x < hi; ++x) v.push_back(x);
    return v;
  }
  int64_t k = full_upto / 2;
  for (int64_t x = lo; x < lo + k; ++x) v.push_back(x);
  for (int64_t x = hi - k; x < hi; ++x) v.push_back(x);
  return v;
}

class RangeWalker {
 public:
  RangeWalker(const Program& p, const std::set<const Stmt*>& poisoned, Reporter& rep, bool defaults)
      : prog_(p), poisoned_(poisoned), rep_(rep), defaults_(defaults) {
    for (const auto& s : p.stmts) {
      if (s.kind == Stmt::Kind::Dim) {
        for (const auto& it : s.dim.items) dim_names_.push_back(it.name);
      }
      if (s.kind == Stmt::Kind::Grid) {
        for (const auto& it : s.grid.items) {
          grid_names_.push_back(it.var);
          grid_extent_[it.var] = fmt_expr(it.extent);
        }
      }
    }
  }

  void run_sample(const std::map<std::string, int64_t>& sample) {
    Env env;
    env.ints = sample;
    // The launch-time window (window_left, window_right) where the sample does not give one.
    env.ints.emplace("window_left", 64);
    env.ints.emplace("window_right", 0);
    unknown_.clear();
    budget_ = 30000;
    std::map<std::string, View> views;
    exec(prog_.stmts, 0, env, views, 0);
  }

  void finish() {
    if (!defaults_) return;
    for (const auto& [s, st] : loops_) {
      if (st.first && !st.second) {
        report("TL0602", s->loc,
                   "the loop `for " + s->loop.var + " = " + fmt_expr(s->loop.lo) + ": " + fmt_expr(s->loop.hi) +
                       "` never executes, for any block at any of the sample problem sizes",
                   "the loop runs " + s->loop.var + " = LO .. HI-1; check the bounds (e.g. `for " + s->loop.var +
                       " = 0: cdiv(seqlen_k, BN)`)");
      }
    }
  }

 private:
  void report(const std::string& code, SrcLoc loc, const std::string& msg, const std::string& hint) {
    rep_.error(code, loc, msg, hint, /*by_location=*/true);
  }

  std::optional<int64_t> ev(const Expr& e, const Env& env) {
    if (!unknown_.empty()) {
      std::set<std::string> names;
      collect_names(e, names);
      for (const auto& n : names) {
        if (unknown_.count(n)) return std::nullopt;
      }
    }
    support::DiagSink local;
    auto v = eval_int(e, env, &local);
    for (const auto& d : local.all()) report(d.code, d.loc, d.message + " (at " + where(env) + ")", d.hint);
    return v;
  }

  std::string where(const Env& env) const {
    std::string out;
    auto add = [&](const std::string& n) {
      auto it = env.ints.find(n);
      if (it == env.ints.end()) return;
      if (!out.empty()) out += ", ";
      out += n + "=" + std::to_string(it->second);
    };
    for (const auto& n : dim_names_) add(n);
    for (const auto& n : grid_names_) add(n);
    for (const Stmt* l : loop_stack_) add(l->loop.var);
    return out;
  }

  void check_shape(const Stmt& s, const std::vector<Expr>& shape, const Env& env, const std::string& what) {
    for (const auto& e : shape) {
      auto v = ev(e, env);
      if (v && *v <= 0) {
        report("TL0604", pick(e.loc, s.loc),
                   what + " extent " + fmt_expr(e) + " evaluates to " + std::to_string(*v) + " (at " + where(env) + ")",
                   "shapes and tiles must be positive: check the Const values and Dims");
        return;
      }
    }
  }

  void global_alloc(const Stmt& s, const Env& env, std::map<std::string, View>& views) {
    const AllocateStmt& a = s.alloc;
    check_shape(s, a.shape, env, "global " + a.name);
    View v;
    v.shape_expr = a.shape;
    for (const auto& e : a.shape) {
      auto x = ev(e, env);
      if (!x) return;
      v.shape.push_back(*x);
    }
    // `{pack: G}`: the view interleaves G query heads (G * rows rows), its offset counts head groups.
    int64_t pack = 1;
    const Expr* pack_expr = nullptr;
    for (const auto& at : s.attrs) {
      if (at.key != "pack" || !at.value) continue;
      auto x = ev(*at.value, env);
      if (!x) return;
      pack = *x;
      pack_expr = &*at.value;
    }
    if (pack != 1) {
      auto hq_it = env.ints.find("heads_q");
      const int64_t hq = hq_it == env.ints.end() ? 1 : hq_it->second;
      if (pack < 1 || hq % pack != 0) {
        report("TL0601", s.loc,
               "`pack` of global " + a.name + " is " + std::to_string(pack) + ", which does not divide heads_q = " +
                   std::to_string(hq) + " (at " + where(env) + ")",
               "pack the query heads that share a kv head: `{pack: heads_q / heads_kv}`");
        return;
      }
      if (!v.shape.empty()) {
        v.shape[0] *= pack;
        Expr mul;
        mul.kind = Expr::Kind::Binary;
        mul.op = "*";
        mul.args = {v.shape_expr[0], *pack_expr};
        v.shape_expr[0] = mul;
      }
    }
    views[a.name] = v;
    // [b, head], or a split output's [b, s, head] (a Merge's parts too; a combine's: the interpreter checks them)
    const size_t n = a.offset.size();
    const bool merged_part = in_merge_ && (a.name == "O_part" || a.name == "LSE_part");
    if (n != 2 && !(n == 3 && (a.name == "O" || a.name == "LSE" || merged_part))) return;
    // Undeclared batch / heads_q are 1 and an undeclared heads_kv is heads_q (as the interpreter
    // binds them).
    bool kv = a.name == "K" || a.name == "V";
    auto dim = [&](const char* n, int64_t dflt) {
      auto it = env.ints.find(n);
      return it == env.ints.end() ? dflt : it->second;
    };
    int64_t hq = dim("heads_q", 1);
    const char* bounds[3] = {"batch", "splits", kv ? "heads_kv" : pack != 1 ? "heads_q / pack" : "heads_q"};
    int64_t limits[3] = {dim("batch", 1), dim("splits", -1), kv ? dim("heads_kv", hq) : hq / pack};
    for (size_t k = 0; k < n; ++k) {
      const size_t i = n == 2 && k == 1 ? 2 : k;  // the bound this index has
      auto x = ev(a.offset[k], env);
      if (!x || limits[i] < 0 || (*x >= 0 && *x < limits[i])) continue;  // no Dim splits: finish_split says so
      std::string hint =
          i == 0 ? "the first offset index is the batch index (`b` of `Grid b = 0: batch`)"
          : i == 1 ? "the middle index of a part's O / LSE is the part (`s` of `Grid s = 0: splits`)"
          : kv   ? "K and V are indexed by the kv head: `with offset [b, kv_head]` and `Let kv_head = head / (heads_q / heads_kv)`"
          : pack != 1 ? "packed Q, O and LSE are indexed by the head group: `with offset [b, kv_head]` with `Grid kv_head = 0: heads_kv`"
                 : "Q, O and LSE are indexed by the query head: `with offset [b, head]` with `Grid head = 0: heads_q`";
      report("TL0601", pick(a.offset[k].loc, s.loc),
                 "offset index " + fmt_expr(a.offset[k]) + " = " + std::to_string(*x) + " of global " + a.name +
                     " is outside [0, " + bounds[i] + " = " + std::to_string(limits[i]) + ") (at " + where(env) + ")",
                 hint);
      return;
    }
  }

  void copy(const Stmt& s, const Env& env, const std::map<std::string, View>& views) {
    const CopyStmt& c = s.copy;
    check_shape(s, c.tile, env, "tile");
    if (c.from != Space::Global && c.to != Space::Global) return;
    auto it = views.find(c.name);
    if (it == views.end()) return;
    const View& g = it->second;
    if (c.tile.size() != g.shape.size() || c.coord.size() != c.tile.size()) return;
    for (size_t i = 0; i < c.tile.size(); ++i) {
      auto t = ev(c.tile[i], env);
      auto k = ev(c.coord[i], env);
      if (!t || !k || *t <= 0) return;
      int64_t origin = 0, ext = g.shape[i];
      if (__builtin_mul_overflow(*k, *t, &origin)) return;  // absurd values: TL0603-free, but no claim
      if (origin >= 0 && origin < ext) continue;
      const char* axis = i == 0 ? "row" : i == 1 ? "column" : "index";
      std::string msg = "tile " + fmt_shape(c.tile) + " at coordinate " + std::to_string(*k) + " starts at " + axis + " " +
                        std::to_string(origin) + ", outside global " + c.name + " (" + fmt_expr(g.shape_expr[i]) + " = " +
                        std::to_string(ext) + ") (at " + where(env) + ")";
      std::set<std::string> used;
      collect_names(c.coord[i], used);
      std::string tiles = "cdiv(" + fmt_expr(g.shape_expr[i]) + ", " + fmt_expr(c.tile[i]) + ")";
      std::string hint;
      const Expr& ce = c.coord[i];
      if (ce.kind == Expr::Kind::Binary && ce.op == "*" && ce.args.size() == 2 &&
          (ce.args[0] == c.tile[i] || ce.args[1] == c.tile[i])) {
        const Expr& idx = ce.args[0] == c.tile[i] ? ce.args[1] : ce.args[0];
        hint = "coordinates count tiles, not elements (the origin is coordinate * " + fmt_expr(c.tile[i]) + "): write `" +
               fmt_expr(idx) + "` instead of `" + fmt_expr(ce) + "`";
      }
      for (auto l = loop_stack_.rbegin(); l != loop_stack_.rend() && hint.empty(); ++l) {
        const ForStmt& f = (*l)->loop;
        if (!used.count(f.var) || fmt_expr(f.hi) == tiles) continue;
        hint = "the loop `for " + f.var + " = " + fmt_expr(f.lo) + ": " + fmt_expr(f.hi) + "` lets " + f.var +
               " reach a tile past the end; only " + tiles + " tiles exist: bound it by " + tiles +
               " (e.g. `for " + f.var + " = 0: " + tiles + "`)";
      }
      for (const auto& gname : grid_names_) {
        if (!hint.empty()) break;
        if (used.count(gname) && grid_extent_[gname] != tiles) {
          hint = "the grid index " + gname + " reaches a tile past the end; launch " + tiles + " blocks (`Grid " + gname +
                 " = 0: " + tiles + "`) or fix the coordinate";
        }
      }
      if (hint.empty()) {
        hint = "coordinates count tiles, not elements: the " + std::string(axis) + " origin is coordinate * " +
               fmt_expr(c.tile[i]) + "; use a coordinate in [0, " + tiles + ")";
      }
      report("TL0601", s.loc, msg, hint);
      return;
    }
  }

  // env and views are shared along one path of the walk (loop and grid variables are set and
  // restored in place; Let values of a loop body stay bound after it, unobservably).
  void exec(const std::vector<Stmt>& body, size_t from, Env& env, std::map<std::string, View>& views, int depth) {
    if (depth > 40) return;
    for (size_t i = from; i < body.size(); ++i) {
      if (--budget_ < 0) return;
      const Stmt& s = body[i];
      bool bad = poisoned_.count(&s) > 0;
      switch (s.kind) {
        case Stmt::Kind::Dim:
          for (const auto& it : s.dim.items) {
            if (!it.value) continue;
            auto v = bad ? std::nullopt : ev(*it.value, env);
            if (v) {
              env.ints[it.name] = *v;
            } else {
              unknown_.insert(it.name);
            }
          }
          break;
        case Stmt::Kind::Const:
          for (const auto& it : s.cnst.items) {
            auto v = bad ? std::nullopt : ev(it.value, env);
            if (v) {
              env.ints[it.name] = *v;
            } else {
              unknown_.insert(it.name), env.ints.erase(it.name);
            }
          }
          break;
        case Stmt::Kind::Let: {
          // `Let seqlen_k = T[b]` (a KV cache's key count) and `Let seqlen_q / seqlen_k = T[b + 1] - T[b]`
          // (a ragged batch's counts): at most the Dim, sampled at the Dim's values (the longest sequence)
          const Expr& lv = s.let.value;
          const bool count = lv.kind == Expr::Kind::Index ? s.let.name == "seqlen_k"
                             : lv.kind == Expr::Kind::Binary && lv.op == "-" && lv.args.size() == 2 &&
                                   lv.args[0].kind == Expr::Kind::Index && lv.args[1].kind == Expr::Kind::Index &&
                                   (s.let.name == "seqlen_k" || s.let.name == "seqlen_q");
          if (count) break;
          auto v = bad ? std::nullopt : ev(s.let.value, env);
          if (v) {
            env.ints[s.let.name] = *v;
          } else {
            unknown_.insert(s.let.name), env.ints.erase(s.let.name);
          }
          break;
        }
        case Stmt::Kind::Kernel: break;
        case Stmt::Kind::Grid: {
          std::vector<std::pair<std::string, std::vector<int64_t>>> axes;
          for (const auto& it : s.grid.items) {
            auto v = bad ? std::nullopt : ev(it.extent, env);
            if (!v) {
              unknown_.insert(it.var);
              continue;
            }
            if (*v < 1) {
              report("TL0602", pick(it.loc, s.loc),
                         "Grid " + it.var + " has extent " + std::to_string(*v) + " (at " + where(env) + ")",
                         "a grid axis launches at least one block: check `" + it.var + " = 0: " + fmt_expr(it.extent) + "`");
            }
            axes.emplace_back(it.var, sample_points(0, *v, 4));
          }
          std::function<void(size_t, Env&)> rec = [&](size_t k, Env& e) {
            if (k == axes.size()) {
              exec(body, i + 1, e, views, depth + 1);
              return;
            }
            for (int64_t x : axes[k].second) {
              if (--budget_ < 0) return;
              e.ints[axes[k].first] = x;
              rec(k + 1, e);
              if (budget_ < 0) return;
            }
          };
          rec(0, env);
          return;
        }
        case Stmt::Kind::Allocate:
          if (bad) break;
          if (s.alloc.space == Space::Global) {
            global_alloc(s, env, views);
          } else {
            check_shape(s, s.alloc.shape, env, std::string(to_string(s.alloc.space)) + " " + s.alloc.name);
          }
          break;
        case Stmt::Kind::Copy:
          if (!bad) copy(s, env, views);
          break;
        case Stmt::Kind::Compute:
          if (!bad) {
            for (const auto& e : s.compute.at) ev(e, env);
          }
          break;
        case Stmt::Kind::For: {
          if (bad) break;
          auto lo = ev(s.loop.lo, env);
          auto hi = ev(s.loop.hi, env);
          if (!lo || !hi) break;
          auto& st = loops_[&s];
          st.first = true;
          if (*lo < 0 && *hi > *lo) {  // an empty loop may have any bounds
            report("TL0602", pick(s.loop.lo.loc, s.loc),
                       "loop `for " + s.loop.var + " = " + fmt_expr(s.loop.lo) + ": " + fmt_expr(s.loop.hi) + "` runs from " +
                           std::to_string(*lo) + " (at " + where(env) + ")",
                       "loop indices count tiles from 0: start the loop at 0 or clamp it with max(0, ...)");
            break;
          }
          auto pts = sample_points(*lo, *hi, 6);
          if (!pts.empty()) st.second = true;
          loop_stack_.push_back(&s);
          for (int64_t x : pts) {
            if (--budget_ < 0) break;
            env.ints[s.loop.var] = x;
            exec(s.loop.body, 0, env, views, depth + 1);
            if (budget_ < 0) break;
          }
          env.ints.erase(s.loop.var);
          loop_stack_.pop_back();
          break;
        }
        case Stmt::Kind::Reshape:
        case Stmt::Kind::Variant:
        case Stmt::Kind::Role:
        case Stmt::Kind::Merge:  // a split forward's merge, at this block's grid point (its parts' views range-checked)
          if (bad) break;
          in_merge_ = true;
          exec(s.loop.body, 0, env, views, depth + 1);
          in_merge_ = false;
          break;
        case Stmt::Kind::Phase:  // its own kernel (the phase's walker checks it)
        case Stmt::Kind::Comment:
        case Stmt::Kind::Blank: break;
      }
    }
  }

  const Program& prog_;
  const std::set<const Stmt*>& poisoned_;
  Reporter& rep_;
  bool defaults_;
  std::vector<std::string> dim_names_, grid_names_;
  std::map<std::string, std::string> grid_extent_;
  std::vector<const Stmt*> loop_stack_;
  std::set<std::string> unknown_;
  std::map<const Stmt*, std::pair<bool, bool>> loops_;  // reached, iterated
  long budget_ = 0;
  bool in_merge_ = false;  // executing a Merge's body
};

// The default sample problems: ragged sizes (not multiples of common tiles), seqlen_q < and >
// seqlen_k, one and many kv tiles, batch 2, MHA / GQA (heads_q = 2 * heads_kv) / MQA.
std::vector<std::map<std::string, int64_t>> default_samples(const Program& p) {
  struct S {
    int64_t batch, hq, hkv, sq, sk, hd, wl, wr;  // wl, wr: the launch-time window (-1: unbounded)
  };
  const S table[] = {
      {2, 4, 2, 1, 1, 64, 0, 0},        {2, 4, 2, 200, 333, 64, 100, 20}, {1, 3, 3, 333, 97, 96, -1, 0},
      {1, 4, 1, 128, 128, 128, 17, -1}, {2, 2, 2, 1, 517, 64, 5, 3},      {1, 2, 1, 517, 1, 32, -1, -1},
  };
  std::vector<std::string> dims;
  for (const auto& s : p.stmts) {
    if (s.kind != Stmt::Kind::Dim) continue;
    for (const auto& it : s.dim.items) {
      if (!it.value) dims.push_back(it.name);
    }
  }
  std::vector<std::map<std::string, int64_t>> out;
  for (const auto& t : table) {
    std::map<std::string, int64_t> m;
    for (const auto& d : dims) {
      if (d == "batch") m[d] = t.batch;
      else if (d == "heads_q") m[d] = t.hq;
      else if (d == "heads_kv") m[d] = t.hkv;
      else if (d == "seqlen_q") m[d] = t.sq;
      else if (d == "seqlen_k") m[d] = t.sk;
      else if (d == "splits") m[d] = 1 + (t.sk + t.sq) % 5;  // the parts of split keys: 1 to 5, some empty
      else m[d] = t.hd;  // head dims and any other free dimension
    }
    // as the C ABI passes an unbounded side: seqlen_q + seqlen_k
    m["window_left"] = t.wl < 0 ? t.sq + t.sk : t.wl;
    m["window_right"] = t.wr < 0 ? t.sq + t.sk : t.wr;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

void check_ranges(const Program& p, const CheckOptions& opts, const std::set<const Stmt*>& poisoned, Reporter& rep) {
  bool defaults = opts.sample_dims.empty();
  auto samples = defaults ? default_samples(p) : opts.sample_dims;
  RangeWalker w(p, poisoned, rep, defaults);
  for (const auto& s : samples) w.run_sample(s);
  w.finish();
}

}  // namespace qattn::tl::detail
