// The backward lowering's barriers and the loop's copy/compute overlap (lower_impl.h, docs/translation.md).
#include "backend/bwd/lower_impl.h"

#include "support/sha256.h"
#include "tl/printer.h"
#include "tl/variant.h"

namespace qattn::backend::bwd::detail {
using tl::Stmt;

void Lower::barrier(Out& w, const std::string& why) {
  if (wg_ && !(written_async_.empty() && written_sync_.empty()))
    w.line("qattn::sm90::fence_async_smem();  // the threads' shared stores, visible to wgmma (the async proxy)");
  if (tma_add_wait_due_) {  // the stages of the TMA additions are free once this barrier is passed
    w.line("if (tid % 128 == 0) qattn::sm90::ptx::tma_store_wait<0>();  // the previous iteration's TMA additions have read their stage");
    tma_add_wait_due_ = false;
    tma_add_free_ = true;
  }
  w.line("__syncthreads();  // " + why);
  read_since_barrier_.clear();
  written_sync_.clear();  // (a barrier also publishes the block's stores so far)
  if (tma_issue_due_) {  // every warp is past the previous iteration: its ring slot is free
    tma_issue_due_ = false;
    issue_ring(w);
  }
}

void Lower::before_read(Out& w, const std::string& name) {
  if (tma_wait_due_ && tma_ring_.count(name)) {
    w.line("qattn::sm90::ptx::mbar_wait(ring_full + " + tma_slot_ + ", " + tma_parity_ + ");  // this iteration's ring slot has landed");
    tma_wait_due_ = false;
  }
  if (written_async_.count(name)) {
    w.line("qattn::commit();");
    w.line("qattn::wait<0>();  // the cp.async copies into shared memory have landed");
    barrier(w, "... for every thread");
    written_async_.clear();
    issue_ring(w);
  } else if (written_sync_.count(name)) {
    barrier(w, "what the block stored to shared memory is visible");
  }
  read_since_barrier_.insert(name);
}

void Lower::before_write(Out& w, const std::string& name, bool async) {
  if (read_since_barrier_.count(name) && handoff_.count(name) && !handoff_synced_ && !loop_var_.empty()) {
    // only the previous iteration read it (one write, reads after it): wait for the other warpgroups' reads
    w.line("if (handoff_wait_" + loop_var_ + ") qattn::sm90::ptx::bar_sync(1 + wg, kThreads);  // the other warpgroups' wgmma of the previous "
           "iteration are done reading " + name);
    handoff_synced_ = true;
    for (const auto& n : handoff_) read_since_barrier_.erase(n), handed_.insert(n);
  }
  if (read_since_barrier_.count(name)) barrier(w, "every warp is done reading " + name);
  (async ? written_async_ : written_sync_).insert(name);
}

void Lower::flush(Out& w) {
  if (written_async_.empty() && written_sync_.empty()) return;
  if (!written_async_.empty()) {
    w.line("qattn::commit();");
    w.line("qattn::wait<0>();");
  }
  barrier(w, "the copies so far have landed");
  written_async_.clear();
}

bool Lower::reads(const Stmt& st, const std::string& name) {
  if (st.kind == Stmt::Kind::Copy) return st.copy.name == name && st.copy.from == tl::Space::Shared;
  if (st.kind == Stmt::Kind::Compute && st.compute.op == "GEMM")
    for (const auto& o : st.compute.operands)
      if (o.expr.kind == tl::Expr::Kind::Name && o.expr.name == name) return true;
  return false;
}

bool Lower::writes_shared(const Stmt& st, const std::string& name) {
  return st.kind == Stmt::Kind::Copy && st.copy.name == name && st.copy.to == tl::Space::Shared;
}

bool Lower::prefetchable(const std::vector<Stmt>& body, size_t k, long* last) {
  const std::string& name = body[k].copy.name;
  long first = -1, end = -1;
  bool other_writer = false;
  for (size_t j = 0; j < body.size(); ++j) {
    if (j != k && writes_shared(body[j], name)) other_writer = true;
    if (reads(body[j], name)) {
      if (first < 0) first = long(j);
      end = long(j);
    }
  }
  if (last) *last = end;
  return !other_writer && first > long(k);
}

void Lower::loop(Out& w, const Stmt& s) {
  const auto& body_stmts = s.loop.body;
  std::map<size_t, std::vector<const Stmt*>> after;  // statement index -> Copies to issue for i + 1 after it
  std::vector<const Stmt*> ahead, ring;
  for (size_t k = 0; k < body_stmts.size(); ++k) {
    const Stmt& c = body_stmts[k];
    if (c.kind != Stmt::Kind::Copy || c.copy.from != tl::Space::Global || c.copy.to != tl::Space::Shared) continue;
    if (!shared_.count(c.copy.name)) continue;
    long last = -1;
    const bool ahead_ok = prefetchable(body_stmts, k, &last);
    if (!ahead_ok && shared_.at(c.copy.name).stages > 1) {
      fail("XL0301", c.loc, "the ring " + c.copy.name + " (`{stages: 2}`) is filled by this Copy only when it is the buffer's one writer in "
                            "the loop body and comes before its first read there",
           "copy the tile once, at the top of the body, or remove `{stages: 2}`");
      return;
    }
    if (!ahead_ok) continue;
    if (shared_.at(c.copy.name).stages > 1) {  // a ring: the next iteration's tile goes to the other slot at the top
      ring.push_back(&c);
      ahead.push_back(&c);
      prefetched_.insert(&c);
      continue;
    }
    // issued after a run of loads from shared memory rather than inside it (one barrier for the run)
    while (size_t(last) + 1 < body_stmts.size() && body_stmts[size_t(last) + 1].kind == Stmt::Kind::Copy &&
           body_stmts[size_t(last) + 1].copy.from == tl::Space::Shared && body_stmts[size_t(last) + 1].copy.to == tl::Space::Register)
      ++last;
    after[size_t(last)].push_back(&c);
    ahead.push_back(&c);
    prefetched_.insert(&c);
  }
  // everything written before the loop that is still in flight stays so: the first read waits
  if (!written_sync_.empty()) barrier(w, "the block's stores are visible");
  std::set<std::string> body_reads;  // what an earlier iteration may still be reading at the top of the body
  for (const auto& st : body_stmts)
    for (const auto& [name, b] : shared_)
      if (reads(st, name)) body_reads.insert(name);
  w.line(ref(s));
  const std::string v = id(s.loop.var);
  w.line("const int lo_" + v + " = " + cint(s.loop.lo) + ", hi_" + v + " = " + cint(s.loop.hi) + ";");
  const bool skip = skip_lambdas(w, s);
  const std::string first = skip ? "first_" + v : "lo_" + v;
  // The iteration after this one, and the counter that picks a ring's slot: with `{skip}` the
  // visited tiles are not consecutive, so the slots go by visit count (it_v), not by tile index.
  next_ = skip ? "nx_" + v : v + " + 1";
  loop_var_ = v;
  loop_stmt_ = &s;
  fill_slot_ = skip ? "0" : v;  // (a ring's first tile goes to the slot of the first visit)
  const bool tma = !tma_tiles_.empty();
  if (tma) {
    // the ring's mbarriers, published to every thread (with the copies before the loop) by one barrier
    w.line("// the ring's mbarriers: one per slot; a phase completes when the TMA bytes and the cp.async of the fp32 rows landed");
    w.line("uint64_t* ring_full = reinterpret_cast<uint64_t*>(smem + kSmemRingFull);");
    w.open("if (tid == 0) {");
    const std::string arrivals = std::to_string(1 + (tma_ring_.size() > tma_tiles_.size() ? kRingRowThreads : 0));
    w.line("qattn::sm90::ptx::mbar_init(ring_full, " + arrivals + ");");
    w.line("qattn::sm90::ptx::mbar_init(ring_full + 1, " + arrivals + ");");
    w.line("qattn::sm90::ptx::fence_mbar_init();");
    w.close();
    if (!written_async_.empty()) {
      w.line("qattn::commit();");
      w.line("qattn::wait<0>();  // the copies before the loop have landed");
    }
    written_sync_.insert("ring_full");  // (a barrier follows: also the fence for the cp.async tiles)
    barrier(w, "the mbarriers and the copies so far are visible to every thread");
    written_async_.clear();
    w.line("// the first iteration's ring slot, issued before the loop (each later one during the iteration before)");
    w.open("if (" + first + " < hi_" + v + ") {");
    w.line("const int " + v + " = " + first + ";");
    tma_issue(w, ring, fill_slot_);
    w.close();
  } else if (!ahead.empty()) {
    w.line("// the first iteration's copies, issued before the loop (each later one during the iteration before)");
    for (const Stmt* c : ahead)
      if (read_since_barrier_.count(c->copy.name)) {
        barrier(w, "every warp is done reading the buffers");
        break;
      }
    w.open("if (" + first + " < hi_" + v + ") {");
    w.line("const int " + v + " = " + first + ";");
    for (const Stmt* c : ahead) emit_g2s(w, *c);
    w.close();
  }
  std::set<std::string> in_flight = written_async_;
  if (!tma)  // (a TMA ring is waited for on its mbarrier)
    for (const Stmt* c : ahead) in_flight.insert(c->copy.name);
  if (skip) {
    w.open("for (int " + v + " = " + first + ", it_" + v + " = 0, nx_" + v + "; " + v + " < hi_" + v + "; " + v + " = nx_" + v +
           ", ++it_" + v + ") {");
  } else {
    w.open("for (int " + v + " = lo_" + v + "; " + v + " < hi_" + v + "; ++" + v + ") {");
  }
  written_async_ = in_flight;
  read_since_barrier_ = body_reads;  // the previous iteration's reads
  loop_var_ = v;
  // Clauses that read auxiliary inputs (document ids): the Masks' `full when` flags and the next tile's
  // `empty when` clause are read at the top of the iteration, and the next visited tile is resolved
  // where it is first needed (resolve_next), so that their loads are in flight under the ring wait and
  // the products instead of ahead of them (H200 bf16, documents: 1.04-1.06x, both together; either
  // alone 1.00-1.02x; bench/results/2026-12-01-h200-bwd-doc-loads). Clauses of arithmetic only
  // (prefix-LM) keep the next tile's walk at the top (the preload measured 0.985-0.988x there).
  const bool preload = skip && skip_reads_;
  next_resolved_ = !preload;
  if (preload) {
    hoist_full_flags(w, body_stmts);
    w.line("const bool vis_next_" + v + " = visible_" + v + "(" + v + " + 1);  // the next tile's clause, read now (aux_at clamps " + v +
           " + 1)");
  } else if (skip) {
    w.line(next_ + " = next_" + v + "(" + v + ");  // the next visited tile (prefetched during this one)");
  }
  const std::string count = skip ? "it_" + v : v;
  for (const Stmt* c : ring) {
    const SharedBuf& b = shared_.at(c->copy.name);
    w.line(slot_decl(b, count) + "  // this iteration's slot of the ring");
    read_since_barrier_.erase(c->copy.name);  // the previous iteration read the other slot
  }
  ring_pending_ = ring;
  visit_ = skip ? "it_" + v : v + " - lo_" + v;
  handoff_plan(s);
  if (!handoff_.empty() && preload)  // (named here: a refill block below rebinds the loop variable)
    w.line("[[maybe_unused]] const bool handoff_wait_" + v + " = " + visit_ + " != 0;  // a previous iteration's products read the scratch tiles");
  else if (!handoff_.empty())
    w.line("[[maybe_unused]] const bool handoff_wait_" + v + " = " + visit_ + " != 0, handoff_pass_" + v + " = " + next_ + " < hi_" + v +
           ";  // a previous iteration's products read the scratch tiles; a next one will write them");
  tma_add_wait_due_ = !tma_adds_.empty();  // (the iteration's first barrier waits for the previous additions)
  tma_add_free_ = false;
  if (tma) {
    tma_wait_due_ = tma_issue_due_ = true;
    tma_slot_ = "(" + count + ") % 2";
    tma_parity_ = "((" + (skip ? count : v + " - lo_" + v) + ") >> 1) & 1";  // the k-th visit of a slot completes phase k
  }
  for (auto& [name, r] : regs_) r.at_use_loaded = false;  // `{at_use}` vectors: copied again in each iteration
  for (size_t k = 0; k < body_stmts.size() && !failed_; ++k) {
    one(w, body_stmts[k]);
    auto it = after.find(k);
    if (it == after.end()) continue;
    std::string names;
    for (const Stmt* c : it->second) names += (names.empty() ? "" : ", ") + c->copy.name;
    w.line("// " + names + " of iteration " + v + " + 1, issued after " + v + "'s last read (TL " +
           std::to_string(body_stmts[k].loc.line) + ")");
    for (const Stmt* c : it->second)
      if (read_since_barrier_.count(c->copy.name)) {
        barrier(w, "every warp is done reading them");
        break;
      }
    resolve_next(w);
    w.open("if (" + next_ + " < hi_" + v + ") {");
    w.line("const int " + v + "_next = " + next_ + ";");
    w.open("{");
    w.line("const int " + v + " = " + v + "_next;");
    for (const Stmt* c : it->second) emit_g2s(w, *c);
    w.close();
    w.close();
    for (const Stmt* c : it->second) written_async_.insert(c->copy.name);
  }
  if (wg_) wait_before(w, nullptr);  // no wgmma group runs into the next iteration
  if (!ring_pending_.empty()) {  // no read waited for this iteration's tiles: the other slots may still be read
    barrier(w, "every warp is past the reads of the previous iteration's ring slots");
    issue_ring(w);
  }
  resolve_next(w);  // (the loop's increment reads it)
  full_flags_.clear();
  loop_var_.clear();
  loop_stmt_ = nullptr;
  for (auto& [name, r] : regs_) r.at_use_loaded = false;  // after the loop no slot is this iteration's
  next_.clear();
  fill_slot_.clear();
  if (!written_sync_.empty()) barrier(w, "the block's stores are visible");
  if (!ahead.empty() && !tma) w.line("qattn::commit();  // the next iteration's copies: one group");
  tma_wait_due_ = tma_issue_due_ = false;
  tma_add_wait_due_ = tma_add_free_ = false;
  handoff_.clear();
  handoff_synced_ = handoff_arrived_ = false;
  w.close();
  written_async_.clear();  // after the loop: the last iteration issued none (nothing in flight to read)
  read_since_barrier_ = body_reads;
}

// True when the expression reads an element of an auxiliary tensor (a load in the kernel).
static bool reads_aux(const tl::Expr& e) {
  if (e.kind == tl::Expr::Kind::Index) return true;
  for (const auto& a : e.args)
    if (reads_aux(a)) return true;
  return false;
}

void Lower::resolve_next(Out& w) {
  if (next_resolved_ || loop_var_.empty()) return;
  const std::string& v = loop_var_;
  w.line(next_ + " = " + v + " + 1 >= hi_" + v + " ? hi_" + v + " : vis_next_" + v + " ? " + v + " + 1 : next_" + v + "(" + v +
         " + 1);  // the next visited tile");
  next_resolved_ = true;
}

void Lower::hoist_full_flags(Out& w, const std::vector<Stmt>& body) {
  // A named Mask's `full when` clause reads its auxiliary inputs at the tile's corners: read at the top
  // of the iteration, its loads are in flight under the ring wait and the first products instead of
  // between S's wgmma wait and the softmax (mask() takes the flag).
  for (const auto& st : body) {
    const auto& c = st.compute;
    if (st.kind != Stmt::Kind::Compute || c.op != "Mask" || c.mask.kind != tl::MaskSpec::Kind::Named || c.at.size() != 2 ||
        c.operands.empty())
      continue;
    auto decl = info_.variants.find(c.mask.name);
    if (decl == info_.variants.end() || !decl->second.full_when || !reads_aux(*decl->second.full_when)) continue;
    // the tile's shape from the product that makes it (`Compute GEMM A, B^T and get S`: A's rows by B's
    // rows, both in shared memory); a Mask of another tile keeps its flag where it is
    int rows = 0, cols = 0;
    for (const auto& g : body)
      if (g.kind == Stmt::Kind::Compute && g.compute.op == "GEMM" && g.compute.target == c.operands[0].expr.name &&
          g.compute.operands.size() == 2 && !g.compute.operands[0].transposed && g.compute.operands[1].transposed &&
          shared_.count(g.compute.operands[0].expr.name) && shared_.count(g.compute.operands[1].expr.name))
        rows = shared_.at(g.compute.operands[0].expr.name).rows, cols = shared_.at(g.compute.operands[1].expr.name).rows;
    if (rows == 0 || cols == 0) continue;
    const bool t = c.operands[0].transposed;
    const std::string M = std::to_string(t ? cols : rows), N = std::to_string(t ? rows : cols);  // queries, keys
    const std::string var = "full_" + c.mask.name + "_" + std::to_string(st.loc.line);
    w.line("const bool " + var + " = [&] { const int q0 = (" + cint(c.at[0]) + ") * " + M + ", k0 = (" + cint(c.at[1]) + ") * " + N +
           "; return full_" + c.mask.name + "(q0, q0 + " + M + " - 1, k0, k0 + " + N + " - 1); }();  // TL " +
           std::to_string(st.loc.line) + "'s full clause, read now");
    full_flags_[&st] = var;
  }
}

bool Lower::skip_lambdas(Out& w, const Stmt& loop) {
  const tl::Attr* a = nullptr;
  for (const auto& at : loop.attrs)
    if (at.key == "skip") a = &at;
  if (!a || !a->value || a->value->kind != tl::Expr::Kind::Name) return false;
  const std::string& name = a->value->name;
  // The tile pair: the one `Compute Mask S at [r, c] with NAME` masks, S from `Compute GEMM A, B^T
  // and get S` (A's rows by B's rows, both staged in shared memory); what the checker and the
  // interpreter take too.
  const Stmt* mask = nullptr;
  const Stmt* gemm = nullptr;
  for (const auto& b : loop.loop.body)
    if (b.kind == Stmt::Kind::Compute && b.compute.op == "Mask" && b.compute.mask.kind == tl::MaskSpec::Kind::Named &&
        b.compute.mask.name == name && b.compute.at.size() == 2 && b.compute.operands.size() == 1)
      mask = &b;
  if (mask)
    for (const auto& b : loop.loop.body)
      if (b.kind == Stmt::Kind::Compute && b.compute.op == "GEMM" && b.compute.target == mask->compute.operands[0].expr.name &&
          b.compute.operands.size() == 2 && !b.compute.operands[0].transposed && b.compute.operands[1].transposed)
        gemm = &b;
  auto v = info_.variants.find(name);
  const SharedBuf* A = gemm ? (shared_.count(gemm->compute.operands[0].expr.name) ? &shared_.at(gemm->compute.operands[0].expr.name) : nullptr) : nullptr;
  const SharedBuf* B = gemm ? (shared_.count(gemm->compute.operands[1].expr.name) ? &shared_.at(gemm->compute.operands[1].expr.name) : nullptr) : nullptr;
  if (!mask || !gemm || !A || !B || v == info_.variants.end() || !v->second.empty_when) {
    fail("XL0301", a->loc.line ? a->loc : loop.loc, "`{skip: " + name + "}`: the tile pair is not lowered",
         "the loop body needs `Compute GEMM Q, K^T and get S` (Q and K in shared memory) and `Compute Mask S at [r, c] with " +
             name + "`, and the Mask an `empty when` clause");
    return false;
  }
  // `Mask St^T` of `GEMM K, Q^T and get St`: the (queries, keys) pair is (B's rows, A's rows)
  const bool t = mask->compute.operands[0].transposed;
  const std::string lv = id(loop.loop.var), M = std::to_string(t ? B->rows : A->rows), N = std::to_string(t ? A->rows : B->rows);
  w.line("// TL " + std::to_string(loop.loc.line) + ": {skip: " + name + "}: tiles whose `empty when` clause holds are not visited");
  w.line("auto visible_" + lv + " = [&](int " + lv + ") -> bool { const int row0 = (" + cint(mask->compute.at[0]) + ") * " + M +
         ", col0 = (" + cint(mask->compute.at[1]) + ") * " + N + "; return !empty_" + name + "(row0, row0 + " + M +
         " - 1, col0, col0 + " + N + " - 1); };");
  w.line("auto next_" + lv + " = [&](int " + lv + ") -> int { return qattn::next_visible<4, 1>(" + lv + ", hi_" + lv +
         ", visible_" + lv + "); };  // four tiles' clauses a round");
  w.line("const int first_" + lv + " = (lo_" + lv + " < hi_" + lv + " && !visible_" + lv + "(lo_" + lv + ")) ? next_" + lv + "(lo_" +
         lv + ") : lo_" + lv + ";");
  skip_ = name;
  skip_reads_ = reads_aux(*v->second.empty_when);
  skip_m_ = M, skip_n_ = N;
  skip_at_[0] = mask->compute.at[0], skip_at_[1] = mask->compute.at[1];
  return true;
}

std::string Lower::slot_decl(const SharedBuf& b, const std::string& iter) const {
  const std::string at = "smem + kSmem" + b.var.substr(1) + " + (" + iter + ") % " + std::to_string(b.stages) + " * " +
                         std::to_string(b.bytes);
  if (b.cols == 0) return "float* " + b.var + " = reinterpret_cast<float*>(" + at + ");";
  return "Tensor " + b.var + " = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(" + at + ")), " + b.layout + "{});";
}

void Lower::issue_ring(Out& w) {
  if (ring_pending_.empty() || loop_var_.empty()) return;
  const std::string& v = loop_var_;
  std::string names;
  for (const Stmt* c : ring_pending_) names += (names.empty() ? "" : ", ") + c->copy.name;
  w.line("// " + names + " of iteration " + v + " + 1 into the other slot of their rings (every warp is past iteration " + v +
         " - 1, which read it)");
  resolve_next(w);
  w.open("if (" + next_ + " < hi_" + v + ") {");
  w.line("const int " + v + "_next = " + next_ + ";");
  w.open("{");
  w.line("const int " + v + " = " + v + "_next;");
  fill_slot_ = next_ == "nx_" + v ? "it_" + v + " + 1" : v;  // (v is the next iteration's here)
  if (!tma_tiles_.empty()) tma_issue(w, ring_pending_, fill_slot_);
  else
    for (const Stmt* c : ring_pending_) emit_g2s(w, *c);
  w.close();
  w.close();
  ring_pending_.clear();
}

void Lower::emit_g2s(Out& w, const Stmt& st) {
  const auto& c = st.copy;
  if (wg_) wait_for_smem(w, c.name);  // a wgmma still reading the tile
  const SharedBuf* b = sh(c.name, st);
  if (!b) return;
  if (b->stages > 1 && !loop_var_.empty()) {  // the slot of the iteration being filled (loop_var_ rebound to it)
    w.open("{");
    w.line(slot_decl(*b, fill_slot_.empty() ? loop_var_ : fill_slot_));
  }
  const std::string coord = c.coord.empty() ? std::string("0") : cint(c.coord[0]);
  if (b->cols == 0)
    w.line("qattn::copy_rows_g2s<" + std::to_string(b->rows) + ", kThreads>(g" + id(c.name) + ", p.seqlen_q, " + coord + ", " +
           b->var + ", tid);  // TL " + std::to_string(st.loc.line));
  else
    w.line("qattn::copy_g2s(gmem_copy, m" + id(c.name) + ", " + coord + ", " + b->var + ", tid);  // TL " +
           std::to_string(st.loc.line));
  if (b->stages > 1 && !loop_var_.empty()) w.close();
}

void Lower::plan_tma_ring() {
  tma_tiles_.clear();
  tma_ring_.clear();
  const Stmt* loop = wg_ ? only_loop() : nullptr;
  if (!loop) return;
  const auto& body = loop->loop.body;
  std::vector<TmaTile> tiles;
  std::set<std::string> ring;
  for (size_t k = 0; k < body.size(); ++k) {
    const Stmt& c = body[k];
    if (c.kind != Stmt::Kind::Copy || c.copy.from != tl::Space::Global || c.copy.to != tl::Space::Shared) continue;
    if (!shared_.count(c.copy.name) || !prefetchable(body, k)) continue;  // copied in place, waited for where it is (loop())
    const SharedBuf& b = shared_.at(c.copy.name);
    if (b.stages != 2) return;  // prefetched into one slot: the cp.async overlap
    if (c.copy.coord.size() > 2 || (c.copy.coord.size() == 2 && !(c.copy.coord[1].kind == tl::Expr::Kind::Number && c.copy.coord[1].value == 0)))
      return;
    ring.insert(c.copy.name);
    if (b.cols == 0) continue;  // fp32 rows: cp.async on the slot's mbarrier
    const GlobalArg* g = find_arg(c.copy.name);
    const Stmt* alloc = global_alloc(c.copy.name);
    const std::string& n = c.copy.name;
    const int width = (n == "V" || n == "O" || n == "dO" || n == "dV") ? d_v_ : d_qk_;
    // a box is 64 columns of one 128-byte swizzle atom and at most 256 rows; the tile spans the row;
    // the view's (batch, head) are the Grid's own axes over batch and heads_q (TMA bounds its
    // coordinates by the map's extents: an offset computed otherwise stays on cp.async's plain address)
    if (!g || g->out || !alloc || alloc->alloc.offset.size() != 2 || b.atom != 0 || b.cols % 64 != 0 || b.cols != width ||
        b.rows > 256 || n == "K" || n == "V" || !grid_axis(alloc->alloc.offset[0], "batch") ||
        !grid_axis(alloc->alloc.offset[1], "heads_q"))
      return;
    TmaTile t;
    t.name = n;
    t.arg = g;
    t.batch = cint(alloc->alloc.offset[0]);
    t.head = cint(alloc->alloc.offset[1]);
    t.rows = b.rows;
    t.cols = b.cols;
    tiles.push_back(t);
  }
  if (tiles.empty()) return;
  tma_tiles_ = tiles;
  tma_ring_ = ring;
}

bool Lower::grid_axis(const tl::Expr& e, const char* extent) const {
  if (e.kind != tl::Expr::Kind::Name || !grid_stmt_) return false;
  for (const auto& it : grid_stmt_->grid.items)
    if (it.var == e.name) return it.extent.kind == tl::Expr::Kind::Name && it.extent.name == extent;
  return false;
}

const Stmt* Lower::only_loop() const {
  const Stmt* loop = nullptr;
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::For) {
      if (loop) return nullptr;  // (one loop: the backward's form)
      loop = &st;
    }
  return loop;
}

const Stmt* Lower::global_alloc(const std::string& n) const {
  const Stmt* alloc = nullptr;
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && st.alloc.name == n) alloc = &st;
  return alloc;
}

// A `Copy X (R, C) in coordinate [i, 0] from register to global` of a kernel output, not `{ordered}`,
// whose global Allocate is offset by [batch, head]: the tile a TMA copy of X takes (without its stage).
std::optional<Lower::TmaAdd> Lower::tma_tile_copy(const Stmt& c) const {
  if (c.kind != Stmt::Kind::Copy || c.copy.from != tl::Space::Register || c.copy.to != tl::Space::Global || c.copy.coord.size() != 2 ||
      !(c.copy.coord[1].kind == tl::Expr::Kind::Number && c.copy.coord[1].value == 0))
    return std::nullopt;
  for (const auto& a : c.attrs)
    if (a.key == "ordered") return std::nullopt;
  const std::string& n = c.copy.name;
  const GlobalArg* g = find_arg(n);
  const Stmt* alloc = global_alloc(n);
  auto r = regs_.find(n);
  auto shape = reg_shapes_.find(n);
  if (!g || !g->out || !alloc || alloc->alloc.offset.size() != 2 || (r == regs_.end() && shape == reg_shapes_.end())) return std::nullopt;
  TmaAdd t;
  t.name = n;
  t.arg = g;
  t.batch = cint(alloc->alloc.offset[0]);
  t.head = cint(alloc->alloc.offset[1]);
  t.rows = r != regs_.end() ? r->second.rows : shape->second.first;
  t.cols = r != regs_.end() ? r->second.cols : shape->second.second;
  return t;
}

void Lower::plan_tma_adds() {
  tma_adds_.clear();
  const Stmt* loop = wg_ ? only_loop() : nullptr;
  if (!loop) return;
  const int wgs = warps_ / 4;
  const int64_t limit = target_.smem_per_block > 0 ? int64_t(target_.smem_per_block) : int64_t(166912);
  int64_t end = smem_bytes_;
  for (const Stmt& c : loop->loop.body) {
    auto t = tma_tile_copy(c);
    if (!t || !c.copy.accumulate || t->name != "dQ") continue;
    const Stmt* alloc = global_alloc(t->name);
    if (!grid_axis(alloc->alloc.offset[0], "batch") || !grid_axis(alloc->alloc.offset[1], "heads_q")) continue;
    // the product that writes the tile: its warpgroups' parts are 64 rows x whole 32-column boxes
    std::optional<WgGemm> form;
    walk(loop->loop.body, [&](const Stmt& s) {
      if (s.kind == Stmt::Kind::Compute && s.compute.op == "GEMM" && s.compute.result != tl::ComputeStmt::Result::InPlace &&
          s.compute.target == t->name) {
        std::string why;
        form = wg_form(s, why);
      }
    });
    if (!form || form->m != t->rows || t->cols != d_qk_) continue;
    const bool parts_ok = form->split_n ? (t->rows == 64 && t->cols % (32 * wgs) == 0) : (t->rows == 64 * wgs && t->cols % 32 == 0);
    const int64_t off = (end + 1023) / 1024 * 1024, bytes = int64_t(t->rows) * t->cols * 4;
    // the stage fits beside the buffers, the 1024-byte alignment and a few KB of row-reduction scratch
    if (!parts_ok || off + bytes + 1024 + 4096 > limit) continue;
    t->off = off;
    tma_adds_.push_back(*t);
    end = off + bytes;
  }
  smem_bytes_ = end;
  plan_tma_epilogue(*loop);
}

// The epilogue's 16-bit dK, dV, staged in the loop's shared buffers (dead after it) when no statement
// after the loop reads or writes one of them. GQA's fp32 additions keep the float4 reductions: by TMA
// they measured 0.97-1.04x (the query heads of a group add into one kv head's tile at once;
// bench/results/2026-11-30-h200-bwd-epilogue).
void Lower::plan_tma_epilogue(const Stmt& loop) {
  int64_t dead_end = 0;
  for (const auto& [n, b] : shared_) dead_end = std::max<int64_t>(dead_end, b.offset + b.bytes * b.stages);
  std::vector<const Stmt*> after;
  for (const auto& st : prog_.stmts)
    if (!after.empty() || &st == &loop) after.push_back(&st);
  for (const Stmt* st : after)
    for (const auto& [n, b] : shared_)
      if (st != &loop && (reads(*st, n) || writes_shared(*st, n))) return;
  const int wgs = warps_ / 4;
  int64_t at = 0;
  for (const Stmt* st : after) {
    auto t = tma_tile_copy(*st);
    if (!t || st->copy.accumulate || (t->name != "dK" && t->name != "dV")) continue;
    if ((t->name == "dK" ? dk_dtype_ : dv_dtype_) == tl::DType::F32) continue;  // (fp32 tiles are added, not stored)
    const auto& r = regs_.at(t->name);
    const bool parts_ok = split_acc_.count(t->name) ? (t->rows == 64 && t->cols % (64 * wgs) == 0)
                                                    : (t->rows == 64 * wgs && t->cols % 64 == 0 && r.wm == 0);
    const int64_t bytes = int64_t(t->rows) * t->cols * 2;
    if (!parts_ok || t->cols != (t->name == "dK" ? d_qk_ : d_v_) || at + bytes > dead_end) continue;
    t->off = at;
    t->epilogue = t->store = true;
    tma_adds_.push_back(*t);
    at = (at + bytes + 1023) / 1024 * 1024;
  }
}

void Lower::tma_issue(Out& w, const std::vector<const Stmt*>& copies, const std::string& slot) {
  int64_t bytes = 0;
  for (const auto& t : tma_tiles_) bytes += int64_t(t.rows) * t.cols * 2;
  w.line("const int ring_slot = (" + slot + ") % 2;");
  w.open("if (tid == 0) {");
  w.line("qattn::sm90::ptx::mbar_arrive_expect_tx(ring_full + ring_slot, " + std::to_string(bytes) + ");");
  for (const Stmt* c : copies) {
    const SharedBuf& b = shared_.at(c->copy.name);
    if (b.cols == 0) continue;
    const TmaTile* t = nullptr;
    for (const auto& x : tma_tiles_)
      if (x.name == c->copy.name) t = &x;
    if (!t) continue;
    const std::string coord = c->copy.coord.empty() ? std::string("0") : cint(c->copy.coord[0]);
    w.line("qattn::sm90::tma_load_tile<" + std::to_string(b.rows) + ", " + std::to_string(b.cols) + ">(&tm" + id(t->name) +
           ", ring_full + ring_slot, reinterpret_cast<Element*>(smem + kSmem" + id(t->name) + " + ring_slot * " + std::to_string(b.bytes) + "), (" + coord +
           ") * " + std::to_string(b.rows) + ", " + t->head + ", " + t->batch + ");  // TL " + std::to_string(c->loc.line));
  }
  w.close();
  if (tma_ring_.size() == tma_tiles_.size()) return;
  w.open("if (tid < " + std::to_string(kRingRowThreads) + ") {");
  for (const Stmt* c : copies) {
    const SharedBuf& b = shared_.at(c->copy.name);
    if (b.cols != 0) continue;
    const std::string coord = c->copy.coord.empty() ? std::string("0") : cint(c->copy.coord[0]);
    w.line("qattn::copy_rows_g2s<" + std::to_string(b.rows) + ", " + std::to_string(kRingRowThreads) + ">(g" + id(c->copy.name) +
           ", p.seqlen_q, " + coord + ", reinterpret_cast<float*>(smem + kSmem" + id(c->copy.name) + " + ring_slot * " + std::to_string(b.bytes) +
           "), tid);  // TL " + std::to_string(c->loc.line));
  }
  w.line("qattn::sm90::ptx::cp_async_arrive_noinc(ring_full + ring_slot);  // when this thread's copies have landed");
  w.close();
}

void Lower::handoff_plan(const Stmt& loop) {
  handoff_.clear();
  handoff_synced_ = handoff_arrived_ = false;
  handoff_reads_left_ = 0;
  if (!wg_ || warps_ < 8 || warps_ % 4 != 0) return;
  const auto& body = loop.loop.body;
  auto is_gemm_reading = [&](const Stmt& st, const std::string& n) {
    return st.kind == Stmt::Kind::Compute && st.compute.op == "GEMM" && reads(st, n);
  };
  for (const auto& [name, b] : shared_) {
    if (b.cols == 0 || b.stages != 1) continue;
    long write = -1, writes = 0;
    bool ok = true;
    for (size_t k = 0; k < body.size(); ++k) {
      const Stmt& st = body[k];
      if (st.kind == Stmt::Kind::Copy && st.copy.name == name && st.copy.to == tl::Space::Shared) {
        ++writes;
        write = long(k);
        if (st.copy.from != tl::Space::Register) ok = false;
      }
      // a read before the write, or not by a GEMM (a Copy to registers of a tile only GEMMs read moves no
      // data: the GEMMs read it from shared memory)
      const bool gemm_only_copy = st.kind == Stmt::Kind::Copy && st.copy.to == tl::Space::Register && !elementwise_.count(name);
      if (reads(st, name) && ((!is_gemm_reading(st, name) && !gemm_only_copy) || write < 0)) ok = false;
    }
    if (ok && writes == 1) handoff_.insert(name);
  }
  for (const auto& st : body)
    for (const auto& n : handoff_)
      if (is_gemm_reading(st, n)) {
        ++handoff_reads_left_;
        break;
      }
}

void Lower::handoff_arrive(Out& w) {
  if (!handoff_synced_ || handoff_arrived_ || handoff_reads_left_ > 0) return;
  for (const auto& g : wg_pending_)
    for (const auto& n : handoff_)
      if (g.smem.count(n)) return;
  resolve_next(w);
  const std::string pass = skip_reads_ && !skip_.empty() ? next_ + " < hi_" + loop_var_ : "handoff_pass_" + loop_var_;
  w.line("if (" + pass + ")  // done reading the scratch tiles: the other warpgroups may write them");
  w.line("  for (int g = 0; g < kThreads / 128; ++g)");
  w.line("    if (g != wg) qattn::sm90::ptx::bar_arrive(1 + g, kThreads);");
  handoff_arrived_ = true;
}

}  // namespace qattn::backend::bwd::detail
