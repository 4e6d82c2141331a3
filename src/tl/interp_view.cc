// TL interpreter, part 8: shared-memory views (docs/tl.md, "Allocate NAME in shared"):
//   Allocate V in shared (BN, dv) bf16 {view: K}
// V holds no data of its own: every read of it (a GEMM operand, a Copy from shared) sees the first
// dv columns of K's shared buffer as it is then, i.e. K's current ring slot, after the same slot
// checks a read of K makes (TL0905). Nothing may be copied into V, and `{wait: V}` / `{release: V}`
// are errors (interp_schedule.cc): V has no ring. A forward program with no global V whose V is a
// view of K computes attention with V = K[:, :dv] (DeepSeek's absorbed MLA, one latent cache):
// setup_view_v gives the run a global V of (seqlen_k, dv) for the reference only, filled by
// make_view_inputs with K's first dv columns of every (batch, kv head) before the KV cache pages
// and the ragged packing see them, so the reference's V (ref_v) is K's columns there too.
#include <string>

#include "tl/interp_impl.h"

namespace qattn::tl::interp {
namespace {

const Stmt* find_view_of_k(const std::vector<Stmt>& body) {
  for (const auto& s : body) {
    if (s.kind == Stmt::Kind::For)
      if (const Stmt* v = find_view_of_k(s.loop.body)) return v;
    if (s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Shared || s.alloc.name != "V") continue;
    for (const auto& a : s.attrs)
      if (a.key == "view" && a.value && a.value->kind == Expr::Kind::Name && a.value->name == "K") return &s;
  }
  return nullptr;
}

}  // namespace

bool Machine::setup_view_v(const Program& p) {
  if (backward_ || combine_ || globals_.count("V") || !globals_.count("K")) return true;  // (a missing K: TL0901 follows)
  const Stmt* view = find_view_of_k(p.stmts);
  if (!view) return true;  // no V at all: "the program does not allocate V in global" (TL0901) follows
  const Global& k = globals_.at("K");
  std::vector<int64_t> shape;
  if (!eval_view(view->alloc, "the view V", shape)) return false;
  if (shape.size() != 2 || k.view.size() != 2)
    return error("TL0901", view->loc, "the view V of K must be a 2-D tile, found " + shape_str(shape),
                 "write `Allocate V in shared (BN, dv) bf16 {view: K}`");
  if (shape[1] > k.view[1])
    return error("TL0901", view->loc,
                 "V views the first " + std::to_string(shape[1]) + " columns of K, which has " + std::to_string(k.view[1]),
                 "a view is the first columns of its base: give V at most K's columns");
  Global v;
  v.name = "V";
  v.loc = view->loc;
  v.dtype = k.dtype;  // K's stored elements
  v.view = {k.view[0], shape[1]};
  globals_["V"] = std::move(v);
  v_view_of_k_ = true;
  return true;
}

void Machine::make_view_inputs() {
  if (!v_view_of_k_) return;
  const Global& k = globals_.at("K");
  Global& v = globals_.at("V");
  const int64_t kc = k.view[1], vc = v.view[1], rows = prob_.batch * k.heads * k.view[0];  // (batch, heads_kv, seqlen_k)
  v.data.assign(size_t(rows * vc), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < vc; ++c) v.data[size_t(r * vc + c)] = k.data[size_t(r * kc + c)];
}

bool Machine::make_view(const Stmt& s, const Attr& a, Buffer& b) {
  const SrcLoc at = a.loc.line ? a.loc : s.loc;
  const std::string& n = s.alloc.name;
  if (!a.value || a.value->kind != Expr::Kind::Name)
    return error("TL0901", at, "`view` names the shared buffer whose first columns '" + n + "' is", "write `{view: K}`");
  const std::string& base = a.value->name;
  auto it = slots_.find(base);
  const Buffer* k = it != slots_.end() && it->second.buf[kShared] ? &*it->second.buf[kShared] : nullptr;
  if (!k || base == n)
    return error("TL0901", at, "'" + n + "' is a view of '" + base + "', which has no shared buffer here",
                 "allocate the base first: `Allocate " + base + " in shared (BN, d) bf16`, then the view");
  if (!k->view_of.empty())
    return error("TL0901", at, "'" + base + "' is itself a view (of " + k->view_of + ")", "write `{view: " + k->view_of + "}`");
  if (b.shape.size() != 2 || k->shape.size() != 2 || b.rows() != k->rows() || b.cols() > k->cols() || b.dtype != k->dtype)
    return error("TL0901", at,
                 "the view '" + n + "' " + shape_str(b.shape) + " " + to_string(b.dtype) + " is not the first columns of '" + base +
                     "' " + shape_str(k->shape) + " " + to_string(k->dtype),
                 "a view has its base's rows and dtype and at most its columns");
  for (const auto& o : s.attrs)
    if (o.key == "stages")
      return error("TL0901", o.loc.line ? o.loc : s.loc, "a view takes no `stages`: '" + n + "' reads the current slot of " + base,
                   "remove `{stages: ...}` from the view");
  b.view_of = base;
  return true;
}

bool Machine::view_read(const std::string& name, Buffer& v, SrcLoc loc) {
  auto it = slots_.find(v.view_of);
  if (it == slots_.end() || !it->second.buf[kShared])
    return error("TL0901", loc, "reads " + name + ", a view of " + v.view_of + ", but " + v.view_of + " has no shared buffer here",
                 "allocate " + v.view_of + " in shared where " + name + " is read");
  const Buffer& k = *it->second.buf[kShared];
  if (!ring_read_ok(v.view_of, k, loc, " (through its view " + name + ")")) return false;
  if (!count(double(v.data.size()), loc)) return false;
  const int64_t kc = k.cols(), vc = v.cols();
  for (int64_t r = 0; r < v.rows(); ++r)
    for (int64_t c = 0; c < vc; ++c) v.data[size_t(r * vc + c)] = k.data[size_t(r * kc + c)];
  return true;
}

}  // namespace qattn::tl::interp
