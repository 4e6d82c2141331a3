// TL checker: shared-memory views (docs/tl.md, "Allocate NAME in shared"), TL0421 / TL0422.
//   Allocate V in shared (BN, dv) bf16 {view: K}
// V is no storage of its own: it is the first dv columns of K's shared buffer (K's current ring
// slot when K has `{stages}`), what DeepSeek's absorbed MLA reads as V from its one latent cache.
//   TL0421 a malformed view: not on a shared Allocate, no base name, a base that is not an earlier
//          shared buffer (or is a view itself), other rows or dtype than the base, more columns,
//          `{stages}` of its own, given twice
//   TL0422 a Copy into a view (from global or from register): its data is its base's
// Reads of a view are reads of its base (Walker::read, and the async-copy protocol of
// checker_schedule.cc, where `{wait: V}` / `{release: V}` on a view is TL0720). A forward program
// whose V is a view of K needs no global V (finish()).
#include "tl/checker_internal.h"
#include "tl/eval.h"

namespace qattn::tl::detail {

namespace {
const char* kViewHint = "write `Allocate V in shared (BN, dv) bf16 {view: K}` after `Allocate K in shared (BN, d) bf16 "
                        "{stages: 2}`: the same rows and dtype as K, at most K's columns";
}  // namespace

// Fixed Dims and Consts of the program, in order: what a view's and its base's column counts are
// compared at when the two are written differently (`dv` against `d` with `Dim d = 576, dv = 512`).
static Env static_env(const Program& p) {
  Env env;
  for (const auto& s : p.stmts) {
    if (s.kind == Stmt::Kind::Dim) {
      for (const auto& it : s.dim.items)
        if (it.value)
          if (auto v = eval_int(*it.value, env, nullptr)) env.ints.emplace(it.name, *v);
    } else if (s.kind == Stmt::Kind::Const) {
      for (const auto& it : s.cnst.items)
        if (auto v = eval_int(it.value, env, nullptr)) env.ints.emplace(it.name, *v);
    }
  }
  return env;
}

// `{view: B}` on `Allocate X in shared ...`: called once X's buffer is declared (`b`). Marks the
// buffer and the tensor's info as a view of B whenever B is named (also when the view is refused:
// its reads then still read B, and a program whose V views K gets no follow-up "V never written" or
// "no global V").
void Walker::check_view(const Stmt& s, const Attr& a, Buffer& b) {
  const SrcLoc at = pick(a.loc, s.loc);
  const AllocateStmt& al = s.alloc;
  auto fail = [&](const std::string& why, const std::string& hint) { error(s, "TL0421", at, why, hint); };
  if (al.space != Space::Shared)
    return fail("`view` applies to the Allocate of a shared buffer (the first columns of another shared buffer)", kViewHint);
  if (!a.value || a.value->kind != Expr::Kind::Name)
    return fail("`view` names the shared buffer whose first columns it is: `{view: K}`", kViewHint);
  const std::string& base = a.value->name;
  if (!b.view_of.empty()) return fail("`view` given twice for '" + al.name + "'", "keep one `{view: " + b.view_of + "}`");
  if (base == al.name) return fail("'" + al.name + "' is declared a view of itself", kViewHint);
  b.view_of = base;
  info_.tensors[al.name].shared_view_of = base;
  const Buffer* bb = buffer(base, Space::Shared);
  if (!bb)
    return fail("'" + base + "' has no shared buffer declared before this line: a view reads the first columns of an earlier "
                    "`Allocate " + base + " in shared ...`",
                "allocate the base first: `Allocate " + base + " in shared (BN, d) bf16 {stages: 2}`, then `Allocate " + al.name +
                    " in shared " + fmt_shape(al.shape) + " ... {view: " + base + "}`");
  if (!bb->view_of.empty())
    return fail("'" + base + "' is itself a view (of " + bb->view_of + "): a view reads a buffer with storage of its own",
                "write `{view: " + bb->view_of + "}`");
  if (al.shape.size() != 2 || bb->shape.size() != 2)
    return fail("a view and its base are 2-D tiles; '" + al.name + "' is " + fmt_shape(al.shape) + " and '" + base + "' " +
                    fmt_shape(bb->shape),
                kViewHint);
  if (!(al.shape[0] == bb->shape[0]))
    return fail("the view '" + al.name + "' has " + fmt_expr(al.shape[0]) + " rows but its base '" + base + "' has " +
                    fmt_expr(bb->shape[0]) + ": a view is the same rows' first columns",
                "write `Allocate " + al.name + " in shared (" + fmt_expr(bb->shape[0]) + ", " + fmt_expr(al.shape[1]) + ") ... {view: " +
                    base + "}`");
  const DType vd = b.dtype.value_or(DType::F16), bd = bb->dtype.value_or(DType::F16);
  if (vd != bd)
    return fail("the view '" + al.name + "' is " + to_string(vd) + " but its base '" + base + "' is " + to_string(bd) +
                    ": a view reads the base's elements as they are stored",
                "give the view its base's dtype: `Allocate " + al.name + " in shared " + fmt_shape(al.shape) + " " + to_string(bd) +
                    " {view: " + base + "}`");
  if (!(al.shape[1] == bb->shape[1])) {  // compared at the fixed values; launch-time Dims at run time (TL0901)
    const Env env = static_env(prog_);
    auto vc = eval_int(al.shape[1], env, nullptr), bc = eval_int(bb->shape[1], env, nullptr);
    if (vc && bc && *vc > *bc)
      return fail("the view '" + al.name + "' has " + fmt_expr(al.shape[1]) + " = " + std::to_string(*vc) + " columns, more than its base '" +
                      base + "' (" + fmt_expr(bb->shape[1]) + " = " + std::to_string(*bc) + ")",
                  "a view is the first columns of its base: at most " + fmt_expr(bb->shape[1]) + " columns");
  }
  for (const auto& o : s.attrs)
    if (o.key == "stages")
      return error(s, "TL0421", pick(o.loc, s.loc),
                   "a view takes no `stages` of its own: '" + al.name + "' reads the current slot of " + base + "'s ring",
                   "remove `{stages: ...}` here; the ring is " + base + "'s (`Allocate " + base + " in shared ... {stages: 2}`)");
}

// A Copy into a view (TL0422): true when reported (the Copy is then not checked further).
bool Walker::copy_into_view(const Stmt& s) {
  const CopyStmt& c = s.copy;
  const Buffer* v = c.to == Space::Shared ? buffer(c.name, Space::Shared) : nullptr;
  if (!v || v->view_of.empty()) return false;
  const std::string& base = v->view_of;
  error(s, "TL0422", s.loc,
        "Copy into '" + c.name + "', a view of " + base + " (`{view: " + base + "}`): a view holds no data of its own, its "
            "elements are " + base + "'s first columns",
        c.from == Space::Global
            ? "copy the tile into " + base + " (`Copy " + base + " (...) in coordinate [...] from global to shared`): " + c.name +
                  " reads its first columns; a program whose V is a view of K needs no global V"
            : "stage the tile in a shared buffer of its own: `Allocate " + c.name + "2 in shared " + fmt_shape(v->shape) +
                  "` without `view`");
  return true;
}

// The forward program's V is a view of K and it has no global V: the attention's V is K's first
// columns (DeepSeek's absorbed MLA), so no global V is required.
bool Walker::v_is_view_of_k() const {
  if (backward() || combine() || global_alloc_.count("V")) return false;
  auto it = info_.tensors.find("V");
  return it != info_.tensors.end() && it->second.shared_view_of == "K";
}

}  // namespace qattn::tl::detail
