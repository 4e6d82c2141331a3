// TL interpreter, part 2: statement execution other than Compute: Let, Allocate, Copy, Reshape,
// for loops, and the scoping of names bound inside loop bodies (restored after each iteration).
// Schedule attributes: `{wait: X}` runs before a statement, `{release: X}` after it, `{async}`
// Copies and `{stages: N}` Allocates go through interp_schedule.cc.
#include <cmath>
#include <limits>

#include "tl/interp_impl.h"

namespace qattn::tl::interp {
namespace {

const char* level_name(int level) { return level == kShared ? "shared" : "register"; }

int level_of(Space s) { return s == Space::Shared ? kShared : kRegister; }

}  // namespace

bool Machine::count(double work, SrcLoc loc) {
  work_ += work;
  if (work_ <= kMaxWork) return true;
  return error("TL0902", loc,
               "the program executes more than " + std::to_string(int64_t(kMaxWork)) +
                   " element operations; the interpreter stops here",
               "run with smaller --dims, or check the loop bounds and Grid extents");
}

bool Machine::fits(double bytes, SrcLoc loc, const std::string& what) {
  const double budget = double(cfg_.memory_budget);
  if (double(live_bytes_) + bytes <= budget) return true;
  auto mib = [](double b) { return std::to_string(int64_t(std::ceil(b / double(1 << 20)))) + " MiB"; };
  return error("TL0906", loc,
               what + " needs " + mib(bytes) + " beside the " + mib(double(live_bytes_)) +
                   " the run holds: over the interpreter's memory budget of " + mib(budget),
               "run with smaller --dims or smaller tiles, free buffers by allocating them inside the loop that uses "
               "them, or raise the budget (`qattn tl run --max-memory MIB`)");
}

void Machine::recharge(Buffer& b) {
  size_t n = b.data.capacity() + (b.ring ? b.ring->pending.capacity() : 0);
  b.charge = Charge(&live_bytes_, int64_t(n * sizeof(double)));
}

std::optional<int64_t> Machine::ev_int(const Expr& e) { return eval_int(e, env_, &diags_); }
std::optional<double> Machine::ev_scalar(const Expr& e) { return eval_scalar(e, env_, &diags_); }

Buffer* Machine::tensor(const std::string& name) {
  auto it = slots_.find(name);
  if (it == slots_.end()) return nullptr;
  if (it->second.buf[kRegister]) return &*it->second.buf[kRegister];
  if (it->second.buf[kShared]) return &*it->second.buf[kShared];
  return nullptr;
}

bool Machine::is_tensor(const Operand& o) { return o.expr.kind == Expr::Kind::Name && tensor(o.expr.name); }

Buffer* Machine::operand_tensor(const Operand& o, const Stmt& s, const char* what) {
  SrcLoc loc = o.loc.line ? o.loc : s.loc;
  if (o.expr.kind != Expr::Kind::Name) {
    error("TL0901", loc, std::string(what) + " of " + s.compute.op + " must be a tensor, found an expression");
    return nullptr;
  }
  Buffer* b = tensor(o.expr.name);
  if (b && !shared_read_ok(o.expr.name, b, loc)) return nullptr;
  if (!b) {
    auto it = slots_.find(o.expr.name);
    bool global_only = it != slots_.end() && it->second.global;
    error("TL0901", loc, "'" + o.expr.name + "' has no register or shared buffer here",
          global_only ? "copy it from global to shared (and register) first"
                      : "allocate it, or produce it with `and get " + o.expr.name + "` before this statement");
  }
  return b;
}

void Machine::bind_int(const std::string& name, int64_t v) {
  if (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.recorded.insert({name, -1}).second) {
      auto it = env_.ints.find(name);
      f.ints.push_back({name, it == env_.ints.end() ? std::nullopt : std::optional<int64_t>(it->second)});
    }
  }
  env_.ints[name] = v;
}

void Machine::bind_buffer(const std::string& name, int level, Buffer b) {
  Slot& slot = slots_[name];
  if (!frames_.empty()) {
    Frame& f = frames_.back();
    if (f.recorded.insert({name, level}).second) f.bufs.push_back({name, level, std::move(slot.buf[level])});
  }
  slot.buf[level] = std::move(b);
}

bool Machine::exec_block(const std::vector<Stmt>& body, bool top) {
  for (const auto& s : body) {
    if (!count(kStmtCost, s.loc)) return false;
    if (!s.attrs.empty() && !schedule_before(s)) return false;
    bool ok = true;
    switch (s.kind) {
      case Stmt::Kind::Kernel:
      case Stmt::Kind::Dim:
      case Stmt::Kind::Const:
      case Stmt::Kind::Grid:
        if (!top)
          return error("TL0903", s.loc, "Kernel, Dim, Const and Grid statements are not supported inside a loop",
                       "move the statement to the top of the program");
        break;
      case Stmt::Kind::Comment:
      case Stmt::Kind::Variant:
      case Stmt::Kind::Role:  // warp roles do not change what is computed
      case Stmt::Kind::Phase:  // run before the grid (run_grid)
      case Stmt::Kind::Blank: break;
      case Stmt::Kind::Merge:  // run after the grid (run_merge)
        if (!top || in_merge_ || &s != merge_)
          return error("TL0903", s.loc, "a Merge inside a loop or a Merge block, or a second Merge, is not supported",
                       "write one Merge, the program's last statement");
        break;
      case Stmt::Kind::Let: {
        const bool reads = s.let.value.kind == Expr::Kind::Index ||
                           (s.let.value.kind == Expr::Kind::Binary && s.let.value.args.size() == 2 &&
                            s.let.value.args[0].kind == Expr::Kind::Index);
        auto v = reads ? kv_length_let(s) : ev_int(s.let.value);
        if (!v) return false;
        bind_int(s.let.name, *v);
        break;
      }
      case Stmt::Kind::Allocate: ok = exec_allocate(s); break;
      case Stmt::Kind::Copy: ok = exec_copy(s); break;
      case Stmt::Kind::Compute: ok = exec_compute(s); break;
      case Stmt::Kind::Reshape: ok = exec_reshape(s); break;
      case Stmt::Kind::For: ok = exec_for(s); break;
    }
    if (!ok) return false;
    if (!s.attrs.empty() && !schedule_after(s)) return false;
  }
  return true;
}

bool Machine::exec_for(const Stmt& s) {
  const auto& l = s.loop;
  auto lo = ev_int(l.lo);
  auto hi = ev_int(l.hi);
  if (!lo || !hi) return false;
  for (int64_t j = *lo; j < *hi; ++j) {
    if (!count(kIterCost, s.loc)) return false;
    frames_.emplace_back();
    bind_int(l.var, j);
    bool skip = false;
    bool ok = skip_iteration(s, skip);
    if (ok && !skip) ok = exec_block(l.body, false);
    // Restore the names bound in this iteration (reverse order).
    Frame f = std::move(frames_.back());
    frames_.pop_back();
    for (auto it = f.bufs.rbegin(); it != f.bufs.rend(); ++it) slots_[it->name].buf[it->level] = std::move(it->old);
    for (auto it = f.ints.rbegin(); it != f.ints.rend(); ++it) {
      if (it->old) env_.ints[it->name] = *it->old;
      else env_.ints.erase(it->name);
    }
    if (!ok) return false;
  }
  return true;
}

bool Machine::exec_allocate(const Stmt& s) {
  const auto& a = s.alloc;
  if (a.space == Space::Global) {
    auto git = globals_.find(a.name);
    const bool parted = git != globals_.end() && git->second.parts > 0;  // offset [b, s, head]
    if (!frames_.empty() && !(parted && (combine_ || in_merge_)))
      return error("TL0903", s.loc, "a global Allocate inside a loop is not supported",
                   "allocate the kernel's arguments at the top of the program");
    if (aux_.count(a.name)) return true;  // an auxiliary input: read by declarations only
    if (aux_grads_.count(a.name)) return true;  // the gradient of one: `Compute Gradient` adds to it
    if (git == globals_.end()) return error("TL0901", s.loc, "unknown global tensor '" + a.name + "'");
    Global& g = git->second;
    if (parted) {  // offset [b, s, head]: part s of (batch, head)
      if (a.offset.size() != 3)
        return error("TL0901", s.loc,
                     "the offset of global " + a.name + " has " + std::to_string(a.offset.size()) +
                         " indices; it selects (batch, split, head) and needs 3");
      std::array<int64_t, 3> ix{};
      for (int i = 0; i < 3; ++i) {
        auto v = ev_int(a.offset[size_t(i)]);
        if (!v) return false;
        ix[size_t(i)] = *v;
      }
      // a packed view (`{pack: G}`) is indexed by its head group
      if (ix[0] < 0 || ix[0] >= prob_.batch || ix[1] < 0 || ix[1] >= g.parts || ix[2] < 0 || (ix[2] + 1) * g.pack > g.heads)
        return error("TL0901", s.loc,
                     "offset [" + std::to_string(ix[0]) + ", " + std::to_string(ix[1]) + ", " + std::to_string(ix[2]) +
                         "] of global " + a.name + " is outside (batch, splits, heads" + (g.pack > 1 ? " / pack" : "") +
                         ") = (" + std::to_string(prob_.batch) + ", " + std::to_string(g.parts) + ", " +
                         std::to_string(g.heads / g.pack) + ")",
                     combine_ || in_merge_ ? "loop over the parts with `for t = 0: splits`" : "the part is the Grid axis `s = 0: splits`");
      if (!g.ragged.empty()) {  // ragged parts: part ix[1] of the packed rows (docs/tl.md, "Ragged batches")
        View& v = *(slots_[a.name].global = View{&g, 0});
        v.part = ix[1];
        return ragged_view(s, v, ix[0], ix[2]);
      }
      slots_[a.name].global = View{&g, ((ix[0] * g.parts + ix[1]) * g.heads + ix[2] * g.pack) * g.view_elems()};
      return true;
    }
    int64_t b = 0, h = 0;
    if (a.offset.empty()) {
      if (prob_.batch != 1 || g.heads != 1)
        return error("TL0901", s.loc, "global " + a.name + " has no offset but the problem has several (batch, head) matrices",
                     "write `with offset [b, head]` with the Grid variables that select this block's matrix");
    } else {
      if (a.offset.size() != 2)
        return error("TL0901", s.loc,
                     "the offset of global " + a.name + " has " + std::to_string(a.offset.size()) +
                         " indices; it selects (batch, head) and needs 2");
      auto bv = ev_int(a.offset[0]);
      auto hv = ev_int(a.offset[1]);
      if (!bv || !hv) return false;
      b = *bv;
      h = *hv;
    }
    if (!g.ragged.empty()) return ragged_view(s, *(slots_[a.name].global = View{&g, 0}), b, h);  // (packed or not)
    if (g.pack > 1) {  // the offset counts groups of `pack` heads
      if (b < 0 || b >= prob_.batch || h < 0 || (h + 1) * g.pack > g.heads)
        return error("TL0901", s.loc,
                     "offset [" + std::to_string(b) + ", " + std::to_string(h) + "] of global " + a.name + " packed by " +
                         std::to_string(g.pack) + " is outside (batch, heads / pack) = (" + std::to_string(prob_.batch) +
                         ", " + std::to_string(g.heads / g.pack) + ")",
                     "a packed view is indexed by its head group: `with offset [b, kv_head]`, `Grid kv_head = 0: heads_kv`");
      slots_[a.name].global = View{&g, (b * g.heads + h * g.pack) * g.view_elems()};
      return true;
    }
    if (b < 0 || b >= prob_.batch || h < 0 || h >= g.heads)
      return error("TL0901", s.loc,
                   "offset [" + std::to_string(b) + ", " + std::to_string(h) + "] of global " + a.name +
                       " is outside (batch, heads) = (" + std::to_string(prob_.batch) + ", " + std::to_string(g.heads) + ")",
                   a.name == "K" || a.name == "V" ? "K and V have heads_kv heads: index them with the kv head (Let kv_head = head / (heads_q / heads_kv))"
                                                  : "");
    slots_[a.name].global = View{&g, (b * g.heads + h) * g.view_elems()};
    return kv_view(s, *slots_[a.name].global);
  }
  Buffer buf;
  if (a.shape.empty() || a.shape.size() > 2)
    return error("TL0903", s.loc, "buffers have 1 or 2 dimensions, '" + a.name + "' has " + std::to_string(a.shape.size()));
  int64_t n = 1;
  for (const auto& e : a.shape) {
    auto v = ev_int(e);
    if (!v) return false;
    if (*v < 1) return error("TL0901", e.loc, "dimension of '" + a.name + "' is " + std::to_string(*v) + "; it must be at least 1");
    if (*v > kMaxBufferElems || n * *v > kMaxBufferElems)
      return error("TL0902", e.loc, "buffer '" + a.name + "' is too large for the interpreter",
                   "tiles hold at most " + std::to_string(kMaxBufferElems) + " elements");
    n *= *v;
    buf.shape.push_back(*v);
  }
  int level = level_of(a.space);
  buf.dtype = a.dtype.value_or(level == kShared ? DType::F16 : DType::F32);  // documented defaults
  double init = std::numeric_limits<double>::quiet_NaN();
  if (a.init) {
    auto v = ev_scalar(*a.init);
    if (!v) return false;
    init = rnd(buf.dtype, *v);
  }
  if (!count(double(n), s.loc)) return false;
  if (!fits(double(n) * sizeof(double), s.loc, std::string(level_name(level)) + " buffer '" + a.name + "'")) return false;
  buf.data.assign(size_t(n), init);
  recharge(buf);
  const Attr* view = nullptr;  // `{view: K}`: the first columns of K's shared buffer, no ring of its own
  for (const auto& at : s.attrs)
    if (at.key == "view" && !view) view = &at;
  if (level == kShared && (view ? !make_view(s, *view, buf) : !make_ring(s, buf))) return false;
  bind_buffer(a.name, level, std::move(buf));
  return true;
}

bool Machine::exec_reshape(const Stmt& s) {
  auto it = slots_.find(s.reshape.name);
  if (it == slots_.end() || !it->second.buf[kRegister])
    return error("TL0901", s.loc, "Reshape of '" + s.reshape.name + "', which has no register buffer here",
                 "Reshape re-lays out a register tile (a GEMM result) before it feeds another GEMM");
  return true;  // the values do not change
}

bool Machine::exec_copy(const Stmt& s) {
  if (s.copy.to == Space::Shared)
    if (auto v = slots_.find(s.copy.name); v != slots_.end() && v->second.buf[kShared] && !v->second.buf[kShared]->view_of.empty())
      return error("TL0901", s.loc,
                   "Copy into '" + s.copy.name + "', a view of " + v->second.buf[kShared]->view_of + ": a view holds no data of its own",
                   "copy into " + v->second.buf[kShared]->view_of + "; " + s.copy.name + " reads its first columns");
  for (const auto& a : s.attrs)
    if (a.key == "async" && !(s.copy.name == "O" && s.copy.from == Space::Register && s.copy.to == Space::Global))
      return async_copy(s);  // (an async store of O completes at once here: it changes no value)
  const auto& c = s.copy;
  auto it = slots_.find(c.name);
  if (it != slots_.end() && it->second.buf[kShared]) {
    const Buffer& b = *it->second.buf[kShared];
    if (c.from == Space::Shared && !shared_read_ok(c.name, &b, s.loc)) return false;
    if (c.to == Space::Shared && c.from != Space::Shared && b.ring && b.ring->copies > 0)
      return error("TL0905", s.loc,
                   "a synchronous Copy into '" + c.name + "', which `{async}` Copies fill (line " +
                       std::to_string(b.ring->copy_loc.line) + ")",
                   "mark this Copy `{async}` too, or copy into another shared buffer");
  }
  return copy_values(s, nullptr);
}

bool Machine::copy_values(const Stmt& s, Buffer* into) {
  const auto& c = s.copy;
  if (c.from == c.to)
    return error("TL0901", s.loc, std::string("Copy from ") + to_string(c.from) + " to " + to_string(c.to),
                 "a Copy moves data between two memory levels");
  auto it = slots_.find(c.name);
  // One side of the copy: a global view or a buffer, as a (rows, cols) matrix.
  struct Side {
    View* view = nullptr;
    Buffer* buf = nullptr;
    std::vector<int64_t> shape;  // as declared
    int64_t rows = 1, cols = 1;
    DType dtype = DType::F32;
  };
  auto side = [&](Space sp, Side& out) -> bool {
    if (sp == Space::Global) {
      if (it == slots_.end() || !it->second.global)
        return error("TL0901", s.loc, "'" + c.name + "' has no global view here",
                     "`Allocate " + c.name + " in global (...) with offset [...]` must run before this Copy");
      out.view = &*it->second.global;
      out.shape = out.view->g->view;
      out.shape[0] = out.view->rows();  // packed views have pack * rows rows
      out.dtype = out.view->g->dtype;
    } else {
      int level = level_of(sp);
      if (it == slots_.end() || !it->second.buf[level])
        return error("TL0901", s.loc, "'" + c.name + "' has no " + level_name(level) + " buffer here",
                     std::string("allocate it with `Allocate ") + c.name + " in " + level_name(level) + " (...)`");
      out.buf = into && sp == Space::Shared && sp == c.to ? into : &*it->second.buf[level];
      out.shape = out.buf->shape;
      out.dtype = out.buf->dtype;
    }
    out.rows = out.shape[0];
    out.cols = out.shape.size() > 1 ? out.shape[1] : 1;
    return true;
  };
  Side src, dst;
  if (!side(c.from, src) || !side(c.to, dst)) return false;
  if (dst.view && !dst.view->g->output && !(dst.view->g->workspace && in_phase_))
    return error("TL0901", s.loc, "Copy to the global input '" + c.name + "'",
                 backward_ ? "a backward kernel writes only dQ, dK and dV" : "a kernel writes only O and LSE");
  if (c.accumulate && !(dst.view && dst.view->g->accumulated && c.from == Space::Register))
    return error("TL0901", s.loc, "`and accumulate` on a Copy of '" + c.name + "' from " + to_string(c.from) + " to " + to_string(c.to),
                 "only a backward program's outputs (dQ, dK, dV) accumulate, from register to global");
  if (dst.view && dst.view->g->accumulated && !c.accumulate)
    return error("TL0901", s.loc, "a plain Copy to '" + c.name + "', which other Copies accumulate into",
                 "write every Copy of " + c.name + " to global with `and accumulate`, or none");
  auto read = [&](const Side& sd, int64_t r, int64_t col) {
    return sd.view ? sd.view->g->data[sd.view->at(r, col, sd.cols)] : sd.buf->data[size_t(r * sd.cols + col)];
  };
  auto write = [&](const Side& sd, int64_t r, int64_t col, double x) {
    if (sd.view) {
      size_t i = sd.view->at(r, col, sd.cols);
      sd.view->g->data[i] = rnd(sd.dtype, c.accumulate ? sd.view->g->data[i] + x : x);  // an atomic add rounds the sum
      sd.view->g->written[i] = 1;
      if (sd.view->start >= 0) sd.view->g->writer[i] = int32_t(sd.view->batch);
    } else {
      sd.buf->data[size_t(r * sd.cols + col)] = rnd(sd.dtype, x);
    }
  };
  if (c.tile.empty()) {  // the whole buffer
    if (src.shape != dst.shape)
      return error("TL0901", s.loc,
                   "Copy " + c.name + " from " + to_string(c.from) + " " + shape_str(src.shape) + " to " + to_string(c.to) +
                       " " + shape_str(dst.shape) + ": the shapes differ",
                   "without a tile, both buffers must have the same shape; otherwise write `Copy NAME (tile) in coordinate [..]`");
    if (!count(double(src.rows * src.cols), s.loc)) return false;
    for (int64_t r = 0; r < src.rows; ++r)
      for (int64_t col = 0; col < src.cols; ++col) write(dst, r, col, read(src, r, col));
    return true;
  }
  // A tile at a tile coordinate.
  if (c.tile.size() != c.coord.size())
    return error("TL0901", s.loc, "the tile has " + std::to_string(c.tile.size()) + " dimensions but the coordinate has " +
                                      std::to_string(c.coord.size()));
  for (const Side* sd : {&src, &dst})
    if (c.tile.size() != sd->shape.size())
      return error("TL0901", s.loc,
                   "the tile has " + std::to_string(c.tile.size()) + " dimensions but a buffer of '" + c.name + "' is " +
                       shape_str(sd->shape));
  std::vector<int64_t> tile, origin;
  for (size_t i = 0; i < c.tile.size(); ++i) {
    auto t = ev_int(c.tile[i]);
    auto k = ev_int(c.coord[i]);
    if (!t || !k) return false;
    if (*t < 1 || *t > kMaxBufferElems)
      return error("TL0901", c.tile[i].loc, "tile dimension " + std::to_string(*t) + " is out of range");
    if (*k < -(int64_t(1) << 31) || *k > (int64_t(1) << 31))
      return error("TL0901", c.coord[i].loc, "tile coordinate " + std::to_string(*k) + " is out of range");
    tile.push_back(*t);
    origin.push_back(*k * *t);
  }
  int64_t tr = tile[0], tc = tile.size() > 1 ? tile[1] : 1;
  int64_t orr = origin[0], oc = origin.size() > 1 ? origin[1] : 0;
  if (!count(double(tr * tc), s.loc)) return false;
  auto tile_mismatch = [&](const Side& sd, Space sp) {
    return error("TL0901", s.loc,
                 "Copy of a " + shape_str(tile) + " tile of '" + c.name + "', whose " + to_string(sp) + " buffer is " +
                     shape_str(sd.shape),
                 "the buffer must have the tile's shape");
  };
  if (src.view || dst.view) {
    // Global side: out-of-range elements read as zero / are not written.
    const Side& g = src.view ? src : dst;
    const Side& b = src.view ? dst : src;
    if (b.shape != tile) return tile_mismatch(b, src.view ? c.to : c.from);
    for (int64_t r = 0; r < tr; ++r)
      for (int64_t col = 0; col < tc; ++col) {
        int64_t gr = orr + r, gc = oc + col;
        bool in = gr >= 0 && gr < g.rows && gc >= 0 && gc < g.cols;
        if (src.view) write(dst, r, col, in ? read(src, gr, gc) : 0.0);
        else if (in) write(dst, gr, gc, read(src, r, col));
      }
    return true;
  }
  // Shared <-> register with a tile: a sub-tile of the larger buffer, which must contain it.
  bool from_big = dst.shape == tile;
  if (!from_big && src.shape != tile) return tile_mismatch(dst, c.to);
  const Side& whole = from_big ? src : dst;
  if (orr < 0 || oc < 0 || orr + tr > whole.rows || oc + tc > whole.cols)
    return error("TL0901", s.loc,
                 "tile at element origin (" + std::to_string(orr) + ", " + std::to_string(oc) + ") of size " + shape_str(tile) +
                     " is outside '" + c.name + "' " + shape_str(whole.shape));
  for (int64_t r = 0; r < tr; ++r)
    for (int64_t col = 0; col < tc; ++col) {
      if (from_big) write(dst, r, col, read(src, orr + r, oc + col));
      else write(dst, orr + r, oc + col, read(src, r, col));
    }
  return true;
}

}  // namespace qattn::tl::interp
