// sm90 lowering, the schedule of the consumer (see lower.h and kir.h, Loop).
//
// {overlap} on the key loop pipelines it in two stages (FlashAttention-3's intra-warpgroup
// overlap): the accumulating GEMM (`and accumulate O`) and the statements after it are stage 1,
// the others stage 0; a statement's `{stage: N}` moves it. Iteration j runs its stage-0 statements
// up to and including the loop's first GEMM, then the stage-1 statements of iteration j - 1, then
// the rest of its stage 0. That reorders the program only where no statement depends on another
// (checked here, XL0304), so the kernel computes what the TL says.
//
// GEMMs are issued asynchronously (one wgmma commit group each); a GemmWait goes in front of the
// first operation that touches a register an in-flight GEMM reads or writes, and waits for just
// that group (wgmma.wait_group counts the newer groups still allowed in flight). A ring release
// that follows an in-flight GEMM reading the ring waits for that GEMM too. Each block (first,
// steady, drain) ends with no GEMM in flight, so every path into a block sees the same state.
// Ping-pong: a consumer warpgroup takes its turn before a block's first GEMM issue and passes it
// after the last.
#include <algorithm>
#include <cmath>
#include <map>

#include "backend/sm90/lower.h"
#include "tl/printer.h"

namespace qattn::backend::sm90 {

namespace {

bool meets(const std::set<std::string>& a, const std::set<std::string>& b) {
  return std::any_of(a.begin(), a.end(), [&](const std::string& x) { return b.count(x) > 0; });
}

// One straight-line block of the consumer, built op by op.
class Block {
 public:
  Block(std::vector<kir::Op>& out, bool pingpong) : out_(out), pingpong_(pingpong) {}

  void stmt(const BodyStmt& s, const std::vector<std::string>& skip_waits) {
    size_t i = 0;
    if (!s.ops.empty() && s.ops[0].kind == kir::Op::Kind::Stmt) {
      if (s.ops.size() > 1 && s.waits.empty()) touch(s.ops[1]);  // a GEMM wait goes before the statement's comment
      out_.push_back(s.ops[i++]);
    }
    for (const auto& w : s.waits)
      if (std::find(skip_waits.begin(), skip_waits.end(), w) == skip_waits.end()) ring(kir::Op::Kind::RingWait, w, {});
    for (; i < s.ops.size(); ++i) {
      const kir::Op& op = s.ops[i];
      if (op.kind == kir::Op::Kind::Stmt) {
        out_.push_back(op);
        continue;
      }
      touch(op);
      if (op.kind == kir::Op::Kind::StoreShared)  // a shared tile a GEMM in flight still reads: that GEMM first
        for (size_t g = flight_.size(); g-- > 0;)
          if (flight_[g].a_shared == op.buffer) {
            wait_through(g, op.tl);
            break;
          }
      out_.push_back(op);
      if (op.kind == kir::Op::Kind::GemmSS || op.kind == kir::Op::Kind::GemmRS) {
        Group g;
        g.id = op.group;
        g.ring = op.buffer;
        g.a_shared = op.kind == kir::Op::Kind::GemmSS ? op.a : "";
        kir::registers_of(op, g.hw_reads, g.hw_writes);
        g.hw_reads.erase(op.result);  // the accumulator is written (and read) by the hardware: a write
        if (first_gemm_ < 0) first_gemm_ = int(out_.size()) - 1;
        last_gemm_ = int(out_.size());
        flight_.push_back(g);
      }
    }
    kir::TlRef at;
    if (!s.ops.empty() && s.ops[0].kind == kir::Op::Kind::Stmt) at = s.ops[0].tl;
    for (const auto& rel : s.releases) release(rel, at);
  }

  // A ring release: after the in-flight GEMMs that read the ring, else now.
  void release(const std::string& ring_name, const kir::TlRef& tl) {
    for (auto it = flight_.rbegin(); it != flight_.rend(); ++it)
      if (it->ring == ring_name || it->a_shared == ring_name) {
        it->releases.push_back({ring_name, tl});
        return;
      }
    ring(kir::Op::Kind::RingRelease, ring_name, tl);
  }

  void finish() {
    if (!flight_.empty()) wait_through(flight_.size() - 1, {});
    if (pingpong_ && first_gemm_ >= 0) {
      kir::Op pass;
      pass.kind = kir::Op::Kind::TurnPass;
      out_.insert(out_.begin() + last_gemm_, pass);
      kir::Op turn;
      turn.kind = kir::Op::Kind::TurnWait;
      out_.insert(out_.begin() + first_gemm_, turn);
    }
  }

 private:
  struct Group {
    int id = -1;
    std::string ring, a_shared;
    std::set<std::string> hw_reads, hw_writes;
    std::vector<std::pair<std::string, kir::TlRef>> releases;
  };

  void ring(kir::Op::Kind kind, const std::string& name, const kir::TlRef& tl) {
    kir::Op op;
    op.kind = kind;
    op.buffer = name;
    op.tl = tl;
    out_.push_back(op);
  }

  // An op that touches registers of in-flight GEMMs waits for the newest such GEMM.
  void touch(const kir::Op& op) {
    std::set<std::string> r, w;
    kir::registers_of(op, r, w);
    for (size_t i = flight_.size(); i-- > 0;) {
      const Group& g = flight_[i];
      if (meets(w, g.hw_reads) || meets(w, g.hw_writes) || meets(r, g.hw_writes)) {
        wait_through(i, op.tl);
        return;
      }
    }
  }

  // Waits until flight_[i] and everything older is complete.
  void wait_through(size_t i, const kir::TlRef& tl) {
    kir::Op wt;
    wt.kind = kir::Op::Kind::GemmWait;
    wt.tl = tl;
    wt.pending = int(flight_.size() - 1 - i);
    wt.group = flight_[i].id;
    std::vector<std::pair<std::string, kir::TlRef>> rel;
    for (size_t k = 0; k <= i; ++k) {
      for (const auto& x : flight_[k].hw_writes) wt.regs.push_back(x);
      for (const auto& x : flight_[k].hw_reads) wt.regs.push_back(x);
      for (const auto& x : flight_[k].releases) rel.push_back(x);
    }
    std::sort(wt.regs.begin(), wt.regs.end());
    wt.regs.erase(std::unique(wt.regs.begin(), wt.regs.end()), wt.regs.end());
    out_.push_back(wt);
    for (const auto& [name, t] : rel) ring(kir::Op::Kind::RingRelease, name, t);
    flight_.erase(flight_.begin(), flight_.begin() + long(i) + 1);
  }

  std::vector<kir::Op>& out_;
  bool pingpong_;
  std::vector<Group> flight_;
  int first_gemm_ = -1, last_gemm_ = -1;
};

// The first key tile starts from the tile's initial values (TL `init 0` / `init -inf` of tensors no
// statement before the loop writes): a statement whose result follows from them exactly is folded
// (FlashAttention's first-iteration specialisation): Max with -inf and Add to 0 become copies,
// Subtract from -inf gives -inf and its Exp2 0, a Rescale of a zero tensor by that 0 changes nothing.
// A folded value is written (Fill) before anything else reads it, and at the end of the block when
// a later block reads it before writing it.
void fold_first(std::vector<kir::Op>& ops, std::map<std::string, float> known, const std::set<std::string>& live_after) {
  std::set<std::string> unreal;  // known values not in their registers
  std::vector<kir::Op> out;
  auto fill = [&](const std::string& x) {
    kir::Op f;
    f.kind = kir::Op::Kind::Fill;
    f.a = x;
    f.scalar_cpp = known.at(x) == 0.f ? "0.f" : "-INFINITY";
    out.push_back(f);
    unreal.erase(x);
  };
  auto note = [&](const kir::Op& o, const std::string& why) {
    kir::Op c;
    c.kind = kir::Op::Kind::Stmt;
    c.tl.text = why;
    out.push_back(c);
    (void)o;
  };
  const float ninf = -INFINITY;
  for (const auto& o : ops) {
    using K = kir::Op::Kind;
    auto is = [&](const std::string& x, float v) { return known.count(x) && known.at(x) == v; };
    const bool max_like = o.kind == K::Ew && (o.op == "Max" || o.op == "MaxOfUpper");
    const bool add_like = o.kind == K::Ew && (o.op == "Add" || o.op == "AddNonNeg") && o.xscale_cpp.empty();
    // max(-inf, b) and 0 + b: the result is a copy of b
    const bool to_copy = (max_like && is(o.a, ninf)) || (add_like && is(o.a, 0.f));
    if (to_copy && !known.count(o.b)) {
      note(o, "first key tile: " + o.a + (max_like ? " = -inf, so the max is " : " = 0, so the sum is ") + o.b);
      kir::Op c = o;
      c.kind = K::Copy;
      c.a = o.b;
      out.push_back(c);
      known.erase(o.result);
      unreal.erase(o.result);
      continue;
    }
    if (o.kind == K::Ew && (o.op == "Sub" || o.op == "SubMax") && is(o.a, ninf)) {
      note(o, "first key tile: " + o.a + " = -inf, so " + o.result + " = -inf");
      known[o.result] = ninf;
      unreal.insert(o.result);
      continue;
    }
    if (o.kind == K::Map && (o.op == "Exp2" || o.op == "Exp") && is(o.a, ninf) && o.xscale_cpp.empty()) {
      note(o, "first key tile: " + o.result + " = exp(-inf) = 0");
      known[o.result] = 0.f;
      unreal.insert(o.result);
      continue;
    }
    if (o.kind == K::Rescale && is(o.a, 0.f) && is(o.b, 0.f)) {
      note(o, "first key tile: " + o.a + " = 0 stays 0");
      continue;
    }
    // anything else: its operands are made real, its result is no longer known
    std::set<std::string> r, w;
    kir::registers_of(o, r, w);
    for (const auto& x : r)
      if (unreal.count(x)) fill(x);
    for (const auto& x : w) {
      known.erase(x);
      unreal.erase(x);
    }
    out.push_back(o);
  }
  for (const auto& x : std::set<std::string>(unreal))
    if (live_after.count(x)) fill(x);
  ops = std::move(out);
}

}  // namespace

// Stage of every loop statement, and the checks that the pipelined order computes what the
// sequential one does.
bool Lower::assign_stages(std::vector<BodyStmt>& body) {
  const kir::Loop& L = k_.sm90.loop;
  int first_gemm = -1, acc_gemm = -1;
  for (size_t i = 0; i < body.size(); ++i) {
    if (!body[i].gemm) continue;
    if (first_gemm < 0) first_gemm = int(i);
    else if (acc_gemm < 0 && body[i].stmt->compute.result == tl::ComputeStmt::Result::Accumulate) acc_gemm = int(i);
  }
  for (size_t i = 0; i < body.size(); ++i) {
    BodyStmt& b = body[i];
    b.stage = L.overlap && acc_gemm >= 0 && int(i) >= acc_gemm ? 1 : 0;
    for (const auto& a : b.stmt->attrs) {
      if (a.key != "stage") continue;
      if (!L.overlap || !a.value || a.value->kind != tl::Expr::Kind::Number || (a.value->value != 0 && a.value->value != 1))
        return error("XL0304", a.loc, "`{stage: ...}` is lowered on the statements of an `{overlap}` loop, with 0 or 1",
                     "stage 1 statements of iteration j run after the first GEMM of iteration j + 1");
      b.stage = int(a.value->value);
    }
  }
  if (!L.overlap) return true;
  for (const auto& b : k_.smem)  // the view's GEMM holds tile j - 1's slot while tile j's is waited for
    if (!b.view_of.empty() && b.stages < 2)
      return error("XL0304", f_.loop_->loc,
                   "`{overlap}` with V a view of " + b.view_of + "'s only slot: tile j's wait would need the slot tile j - 1's product still reads",
                   "give " + b.view_of + " `{stages: 2}` or drop `overlap`");
  if (first_gemm < 0)
    return error("XL0304", f_.loop_->loc, "`{overlap}` on a loop without a GEMM", "the overlap issues the next iteration's first GEMM early");
  if (body[size_t(first_gemm)].stage != 0)
    return error("XL0304", body[size_t(first_gemm)].stmt->loc, "the loop's first GEMM is in stage 1",
                 "the next iteration's first GEMM is what stage 1 runs under: keep it in stage 0");
  auto depends = [](const BodyStmt& x, const BodyStmt& y) {
    return meets(x.writes, y.reads) || meets(x.writes, y.writes) || meets(x.reads, y.writes);
  };
  const std::string j = L.var;
  for (size_t s = 0; s < body.size(); ++s) {
    if (body[s].stage != 1) continue;
    for (size_t r = 0; r < body.size(); ++r) {
      if (body[r].stage != 0) continue;
      const bool later = r > s, prefix = int(r) <= first_gemm;
      if ((later || prefix) && depends(body[s], body[r]))
        return error("XL0304", body[r].stmt->loc,
                     std::string("this statement ") + (later ? "depends on" : "conflicts with") + " the stage-1 statement at line " +
                         std::to_string(body[s].stmt->loc.line) + ", which runs " + (later ? "after it" : "after the next iteration's first GEMM"),
                     "move it to stage 1 too, or the stage-1 statement back to stage 0");
    }
    const tl::Stmt& st = *body[s].stmt;
    bool uses_j = false;
    for (const auto& e : st.compute.at)
      if (tl::print_expr(e).find(j) != std::string::npos) uses_j = true;
    if (uses_j && st.kind == tl::Stmt::Kind::Compute)
      return error("XL0304", st.loc, "a stage-1 statement that reads the loop variable is not lowered", "keep it in stage 0");
  }
  return true;
}

bool Lower::schedule() {
  const tl::Stmt& loop = *f_.loop_;
  kir::Loop& L = k_.sm90.loop;
  L.tl = ref(loop);
  L.var = loop.loop.var;
  L.var_cpp = kernel_names_.ident(L.var);
  const std::string lo = kernel_names_.int_expr(loop.loop.lo);  // tiles before 0 do not exist
  L.lo_cpp = lo == "0" ? lo : "qattn::imax(0, " + lo + ")";
  L.hi_cpp = kernel_names_.int_expr(loop.loop.hi);
  L.overlap = std::any_of(loop.attrs.begin(), loop.attrs.end(), [](const tl::Attr& a) { return a.key == "overlap"; });
  const bool roles = info_.schedule.present;
  // Rings: each is copied before the loop (once per tile) or in it (every iteration, before its reads).
  std::set<std::string> loop_rings;
  for (size_t i = 0; i < body_.size(); ++i)
    for (const auto& c : body_[i].copies) {
      loop_rings.insert(c);
      for (size_t r = 0; r < i; ++r)
        if (body_[r].reads.count(c))
          return error("XL0301", body_[i].stmt->loc, "a Copy of " + c + " after a read of it in the loop (a prefetch) is not lowered on sm90",
                       "copy the tile at the top of the body, before its reads");
    }
  for (const auto& x : once_rings_)
    if (loop_rings.count(x)) return error("XL0301", loop.loc, x + " is copied both before and in the loop", "");
  if (!roles) {
    // No Hopper schedule in the TL: wait before a ring's first read after its copy, release after
    // the last read in the body (rings copied once per tile: at the end of the tile).
    for (const auto& x : loop_rings) {
      int first = -1, last = -1;
      for (size_t i = 0; i < body_.size(); ++i)
        if (body_[i].reads.count(x)) {
          if (first < 0) first = int(i);
          last = int(i);
        }
      if (first < 0) return error("XL0301", loop.loc, x + " is copied in the loop but never read", "");
      body_[size_t(first)].waits.push_back(x);
      body_[size_t(last)].releases.push_back(x);
    }
    for (const auto& x : once_rings_)
      for (auto& b : body_)
        if (b.reads.count(x)) {
          b.waits.push_back(x);
          break;
        }
  }
  if (!assign_stages(body_)) return false;
  for (const auto& b : body_)
    if (b.stage == 1) L.stage1_lines.push_back(b.stmt->loc.line);
  // Waits on rings copied once per tile happen once, before the loop (hoisted).
  std::vector<std::string> hoisted;
  auto hoist = [&](const std::string& x, const tl::Stmt* at) {
    if (std::find(hoisted.begin(), hoisted.end(), x) != hoisted.end()) return;
    hoisted.push_back(x);
    kir::Op w;
    w.kind = kir::Op::Kind::RingWait;
    w.buffer = x;
    if (at) w.tl = ref(*at);
    k_.sm90.before.push_back(w);
  };
  for (const auto& [x, at] : pre_waits_)
    if (std::find(once_rings_.begin(), once_rings_.end(), x) != once_rings_.end()) hoist(x, at);
  for (const auto& b : body_)
    for (const auto& x : b.waits)
      if (std::find(once_rings_.begin(), once_rings_.end(), x) != once_rings_.end()) hoist(x, b.stmt);
  std::set<std::string> released_by_tl;
  for (const auto& b : body_)
    for (const auto& x : b.releases) released_by_tl.insert(x);
  for (const auto& b : after_)
    for (const auto& x : b.releases) released_by_tl.insert(x);
  // Blocks.
  const bool pp = k_.roles.pingpong;
  auto emit = [&](std::vector<kir::Op>& out, const std::vector<const BodyStmt*>& stmts) {
    Block blk(out, pp);
    for (const auto* s : stmts) blk.stmt(*s, hoisted);
    blk.finish();
  };
  const kir::SharedBuf* o = buf("O");
  std::vector<const BodyStmt*> p0, s1, r0, all;
  for (size_t i = 0; i < body_.size(); ++i) {
    all.push_back(&body_[i]);
    if (body_[i].stage == 1) s1.push_back(&body_[i]);
  }
  if (L.overlap) {
    bool seen_gemm = false;
    std::vector<const BodyStmt*> first;
    for (const auto* b : all) {
      if (b->stage == 1) continue;
      first.push_back(b);
      (seen_gemm ? r0 : p0).push_back(b);
      if (b->gemm) seen_gemm = true;
    }
    emit(L.first, first);

    std::vector<const BodyStmt*> steady = p0;
    steady.insert(steady.end(), s1.begin(), s1.end());
    steady.insert(steady.end(), r0.begin(), r0.end());
    emit(L.steady, steady);
    emit(L.drain, s1);
  } else {
    emit(L.steady, all);
  }
  // Implicit releases of the rings copied once per tile, after their last read: after the loop,
  // or, when stage 1 reads them, after the drain; when O is staged in the ring's buffer of a
  // persistent block, after O's store (the producer then issues the next tile's copy of it late).
  std::vector<const BodyStmt*> post(after_.size());
  for (size_t i = 0; i < after_.size(); ++i) post[i] = &after_[i];
  std::vector<kir::Op> after_ops;
  {
    Block blk(after_ops, false);
    for (const auto* s : post) blk.stmt(*s, hoisted);
    blk.finish();
  }
  for (const auto& x : once_rings_) {
    if (released_by_tl.count(x)) {
      if (o && o->alias_of == x && k_.launch.persistent)
        return error("XL0301", loop.loc, "the program releases " + x + ", whose buffer stages O in a persistent block",
                     "drop the release of " + x + " (the translator releases it after O's store)");
      continue;
    }
    kir::Op rel;
    rel.kind = kir::Op::Kind::RingRelease;
    rel.buffer = x;
    rel.tl.text = x + " is copied once per tile: released after its last read";
    const bool late = o && o->alias_of == x && k_.launch.persistent;
    bool stage1_reads = false;
    for (const auto* b : s1)
      if (b->reads.count(x)) stage1_reads = true;
    if (late) {
      auto it = std::find_if(after_ops.begin(), after_ops.end(), [](const kir::Op& op) { return op.kind == kir::Op::Kind::StoreO; });
      if (it == after_ops.end()) return error("XL0301", loop.loc, "O is staged in " + x + "'s buffer but never stored", "");
      rel.tl.text = x + " is copied once per tile and its buffer stages O: released after O's store";
      after_ops.insert(it + 1, rel);
      for (auto& l : k_.sm90.loads)
        if (l.buffer == x) l.late = true;
    } else if (stage1_reads) {
      after_ops.insert(after_ops.begin(), rel);
    } else {
      k_.sm90.released_after_loop.push_back(rel);
    }
  }
  k_.sm90.after = after_ops;
  if (L.overlap) {
    std::map<std::string, float> init;  // the values the tile starts from
    for (const auto& r : k_.sm90.regs) {
      if (!r.allocated || r.init_cpp.empty()) continue;
      bool written_before = false;
      for (const auto& o : k_.sm90.before) {
        std::set<std::string> rr, ww;
        kir::registers_of(o, rr, ww);
        written_before = written_before || ww.count(r.name);
      }
      if (written_before) continue;
      if (r.init_cpp == "0.0f") init[r.name] = 0.f;
      if (r.init_cpp == "-INFINITY") init[r.name] = -INFINITY;
    }
    std::set<std::string> live;  // registers a later block reads before it writes them
    for (const auto* blk : {&L.steady, &L.drain, &k_.sm90.released_after_loop, &k_.sm90.after}) {
      std::set<std::string> written;
      for (const auto& o : *blk) {
        std::set<std::string> r, w;
        kir::registers_of(o, r, w);
        for (const auto& x : r)
          if (!written.count(x)) live.insert(x);
        for (const auto& x : w) written.insert(x);
      }
    }
    fold_first(L.first, init, live);
  }
  // Split columns: a tile the warpgroups write for each other (P) is read by the other warpgroups'
  // GEMMs of the previous key tile. Each block ends with its own GEMMs complete, so a barrier of the
  // warpgroups earlier in the block (a RowCombine) orders the store after the other warpgroups' reads;
  // pipelined (the previous tile's product still in flight there), or with no such barrier before the
  // store, the warpgroups meet first.
  for (auto* blk : {&L.first, &L.steady, &L.drain}) {
    bool met = false;  // a barrier of the warpgroups since the block began
    for (auto& op : *blk) {
      if (op.kind == kir::Op::Kind::RowCombine) met = true;
      if (op.kind != kir::Op::Kind::StoreShared) continue;
      op.barrier_first = L.overlap || !met;
      met = true;
    }
  }
  return true;
}

}  // namespace qattn::backend::sm90
