// TL interpreter, part 5: the Hopper schedule (docs/tl.md, "Hopper schedule"), executed
// sequentially in program order. A shared buffer with `{stages: N}` is a ring of N slots (a buffer
// that `{async}` Copies fill without stages has 1). The k-th async Copy into it fills slot k mod N
// and leaves it pending; `{wait: X}` (before its statement) makes the latest copy's slot current,
// and reads see the current slot; `{release: X}` (after its statement) gives the current slot back
// to the producer. Roles and `{overlap}` do not change what is computed. The interpreter does not
// rely on the checker: a read of a pending (not waited for) or released slot, an async copy into a
// slot that is still held (the producer would wait forever), a release of a slot that is not held
// and a malformed attribute stop the run with TL0905 at the statement.
#include <limits>

#include "tl/interp_impl.h"

namespace qattn::tl::interp {
namespace {

constexpr int kMaxStages = 64;

const std::string* attr_name(const Attr& a) {
  return a.value && a.value->kind == Expr::Kind::Name ? &a.value->name : nullptr;
}

std::string at_line(SrcLoc l) { return l.line ? " (line " + std::to_string(l.line) + ")" : ""; }

}  // namespace

bool Machine::make_ring(const Stmt& s, Buffer& b) {
  for (const auto& a : s.attrs) {
    if (a.key != "stages") continue;
    SrcLoc at = a.loc.line ? a.loc : s.loc;
    if (!a.value) return error("TL0905", at, "`stages` without a value", "write `{stages: 2}`");
    auto n = ev_int(*a.value);
    if (!n) return false;
    if (*n < 1 || *n > kMaxStages)
      return error("TL0905", at, "`stages: " + std::to_string(*n) + "`: a ring has 1 to " + std::to_string(kMaxStages) + " slots",
                   "write `{stages: 2}`");
    b.ring.emplace();
    b.ring->slot.assign(size_t(*n), Ring::St::Free);
    return true;  // the first `stages` counts
  }
  return true;
}

bool Machine::shared_read_ok(const std::string& name, const Buffer* b, SrcLoc loc) {
  auto it = slots_.find(name);
  if (!b || it == slots_.end() || !it->second.buf[kShared] || b != &*it->second.buf[kShared]) return true;
  if (!b->view_of.empty()) return view_read(name, *it->second.buf[kShared], loc);  // its base's current slot
  return ring_read_ok(name, *b, loc, "");
}

// `via`: " (through its view V)" when the read is of a view of `name`.
bool Machine::ring_read_ok(const std::string& name, const Buffer& b, SrcLoc loc, const std::string& via) {
  if (!b.ring) return true;
  const Ring& r = *b.ring;
  if (r.latest >= 0 && r.slot[size_t(r.latest)] == Ring::St::Pending)
    return error("TL0905", loc,
                 "reads " + name + via + " before waiting for its async copy" + at_line(r.copy_loc) + ": the tile may not have landed",
                 "add {wait: " + name + "} to this statement");
  if (r.current >= 0 && r.slot[size_t(r.current)] == Ring::St::Released)
    return error("TL0905", loc,
                 "reads " + name + via + " after its slot was released" + at_line(r.release_loc) +
                     ": the producer may already be refilling it",
                 "move {release: " + name + "} to the last statement that reads " + name);
  return true;
}

// `{wait: V}` / `{release: V}` on a view: it has no ring; its reads see its base's current slot.
static std::string view_sync(const std::string& key, const std::string& n, const Buffer& b, std::string& hint) {
  hint = "write `{" + key + ": " + b.view_of + "}`: the reads of " + n + " see " + b.view_of + "'s current slot";
  return "`" + key + ": " + n + "`: '" + n + "' is a view of " + b.view_of + " (`{view: " + b.view_of + "}`) with no ring of its own";
}

bool Machine::async_copy(const Stmt& s) {
  const auto& c = s.copy;
  if (c.from != Space::Global || c.to != Space::Shared)
    return error("TL0905", s.loc,
                 std::string("`async` on a Copy from ") + to_string(c.from) + " to " + to_string(c.to) +
                     ": only copies from global to shared are asynchronous",
                 "remove `{async}` from this line");
  auto it = slots_.find(c.name);
  if (it == slots_.end() || !it->second.buf[kShared]) return copy_values(s, nullptr);  // reports the missing buffer
  Buffer& b = *it->second.buf[kShared];
  if (!b.ring) {
    b.ring.emplace();
    b.ring->slot.assign(1, Ring::St::Free);
  }
  Ring& r = *b.ring;
  const size_t k = size_t(r.copies % int64_t(r.slot.size()));
  if (r.slot[k] == Ring::St::Pending || r.slot[k] == Ring::St::Held) {
    const std::string n = std::to_string(r.slot.size());
    return error("TL0905", s.loc,
                 "async Copy of " + c.name + " into slot " + std::to_string(k) + " of its " + n + "-slot ring, which still holds an earlier tile (" +
                     (r.slot[k] == Ring::St::Pending ? "never waited for" : "waited for, never released") +
                     "): the producer would wait forever",
                 "add {release: " + c.name + "} to the last statement that reads " + c.name + " before this copy" +
                     (r.slot.size() == 1 ? std::string(", or give it more stages: `{stages: 2}` on its shared Allocate") : std::string()));
  }
  if (!fits(double(b.data.size()) * sizeof(double), s.loc, "the async copy of '" + c.name + "'")) return false;
  Buffer tmp;
  tmp.shape = b.shape;
  tmp.dtype = b.dtype;
  tmp.data.assign(b.data.size(), std::numeric_limits<double>::quiet_NaN());
  if (!copy_values(s, &tmp)) return false;
  Ring& r2 = *it->second.buf[kShared]->ring;  // copy_values does not rebind, but stay safe
  r2.pending = std::move(tmp.data);
  recharge(*it->second.buf[kShared]);
  r2.slot[k] = Ring::St::Pending;
  r2.latest = int(k);
  r2.copy_loc = s.loc;
  ++r2.copies;
  return true;
}

bool Machine::schedule_before(const Stmt& s) {
  for (const auto& a : s.attrs) {
    if (a.key != "wait") continue;
    SrcLoc at = a.loc.line ? a.loc : s.loc;
    const std::string* n = attr_name(a);
    if (!n) return error("TL0905", at, "`wait` names the shared buffer it waits for", "write `{wait: K}`");
    auto it = slots_.find(*n);
    if (it == slots_.end() || !it->second.buf[kShared])
      return error("TL0905", at, "`wait: " + *n + "`: '" + *n + "' has no shared buffer here",
                   "wait for a shared buffer that an `{async}` Copy fills");
    Buffer& b = *it->second.buf[kShared];
    if (!b.view_of.empty()) {
      std::string hint, msg = view_sync("wait", *n, b, hint);
      return error("TL0905", at, msg, hint);
    }
    if (!b.ring || b.ring->latest < 0) continue;  // nothing copied asynchronously yet: nothing to wait for
    Ring& r = *b.ring;
    if (r.slot[size_t(r.latest)] != Ring::St::Pending) continue;  // already landed
    for (auto& st : r.slot)
      if (st == Ring::St::Pending) st = Ring::St::Held;
    b.data = std::move(r.pending);
    r.pending.clear();
    r.pending.shrink_to_fit();
    recharge(b);
    r.current = r.latest;
  }
  return true;
}

bool Machine::schedule_after(const Stmt& s) {
  for (const auto& a : s.attrs) {
    if (a.key != "release") continue;
    SrcLoc at = a.loc.line ? a.loc : s.loc;
    const std::string* n = attr_name(a);
    if (!n) return error("TL0905", at, "`release` names the shared buffer it gives back", "write `{release: K}`");
    auto it = slots_.find(*n);
    if (it == slots_.end() || !it->second.buf[kShared])
      return error("TL0905", at, "`release: " + *n + "`: '" + *n + "' has no shared buffer here",
                   "release a shared buffer that an `{async}` Copy fills");
    Buffer& b = *it->second.buf[kShared];
    if (!b.view_of.empty()) {
      std::string hint, msg = view_sync("release", *n, b, hint);
      return error("TL0905", at, msg, hint);
    }
    Ring* r = b.ring ? &*b.ring : nullptr;
    if (!r || r->current < 0 || r->slot[size_t(r->current)] != Ring::St::Held) {
      std::string why = !r || r->latest < 0 ? "no async copy has filled it"
                        : r->slot[size_t(r->latest)] == Ring::St::Pending && (r->current < 0 || r->slot[size_t(r->current)] != Ring::St::Held)
                            ? "its async copy" + at_line(r->copy_loc) + " was not waited for"
                            : "its slot was already released" + at_line(r->release_loc);
      return error("TL0905", at, "releases " + *n + ", which holds no waited-for tile: " + why,
                   "release " + *n + " once per async copy, after a {wait: " + *n + "} and its last read");
    }
    r->slot[size_t(r->current)] = Ring::St::Released;
    r->release_loc = at;
  }
  return true;
}

}  // namespace qattn::tl::interp
