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
  w.line("__syncthreads();  // " + why);
  read_since_barrier_.clear();
  written_sync_.clear();  // (a barrier also publishes the block's stores so far)
}

void Lower::before_read(Out& w, const std::string& name) {
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

void Lower::loop(Out& w, const Stmt& s) {
  const auto& body_stmts = s.loop.body;
  std::map<size_t, std::vector<const Stmt*>> after;  // statement index -> Copies to issue for i + 1 after it
  std::vector<const Stmt*> ahead, ring;
  for (size_t k = 0; k < body_stmts.size(); ++k) {
    const Stmt& c = body_stmts[k];
    if (c.kind != Stmt::Kind::Copy || c.copy.from != tl::Space::Global || c.copy.to != tl::Space::Shared) continue;
    if (!shared_.count(c.copy.name)) continue;
    long first = -1, last = -1;
    bool other_writer = false;
    for (size_t j = 0; j < body_stmts.size(); ++j) {
      if (j != k && writes_shared(body_stmts[j], c.copy.name)) other_writer = true;
      if (reads(body_stmts[j], c.copy.name)) {
        if (first < 0) first = long(j);
        last = long(j);
      }
    }
    if ((other_writer || first <= long(k)) && shared_.at(c.copy.name).stages > 1) {
      fail("XL0301", c.loc, "the ring " + c.copy.name + " (`{stages: 2}`) is filled by this Copy only when it is the buffer's one writer in "
                            "the loop body and comes before its first read there",
           "copy the tile once, at the top of the body, or remove `{stages: 2}`");
      return;
    }
    if (other_writer || first <= long(k)) continue;
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
  if (!ahead.empty()) {
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
  for (const Stmt* c : ahead) in_flight.insert(c->copy.name);
  if (skip) {
    w.open("for (int " + v + " = " + first + ", it_" + v + " = 0, nx_" + v + "; " + v + " < hi_" + v + "; " + v + " = nx_" + v +
           ", ++it_" + v + ") {");
    w.line("nx_" + v + " = next_" + v + "(" + v + ");  // the next visited tile (prefetched during this one)");
  } else {
    w.open("for (int " + v + " = lo_" + v + "; " + v + " < hi_" + v + "; ++" + v + ") {");
  }
  written_async_ = in_flight;
  read_since_barrier_ = body_reads;  // the previous iteration's reads
  loop_var_ = v;
  const std::string count = skip ? "it_" + v : v;
  for (const Stmt* c : ring) {
    const SharedBuf& b = shared_.at(c->copy.name);
    w.line(slot_decl(b, count) + "  // this iteration's slot of the ring");
    read_since_barrier_.erase(c->copy.name);  // the previous iteration read the other slot
  }
  ring_pending_ = ring;
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
  loop_var_.clear();
  loop_stmt_ = nullptr;
  for (auto& [name, r] : regs_) r.at_use_loaded = false;  // after the loop no slot is this iteration's
  next_.clear();
  fill_slot_.clear();
  if (!written_sync_.empty()) barrier(w, "the block's stores are visible");
  if (!ahead.empty()) w.line("qattn::commit();  // the next iteration's copies: one group");
  w.close();
  written_async_.clear();  // after the loop: the last iteration issued none (nothing in flight to read)
  read_since_barrier_ = body_reads;
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
  w.open("if (" + next_ + " < hi_" + v + ") {");
  w.line("const int " + v + "_next = " + next_ + ";");
  w.open("{");
  w.line("const int " + v + " = " + v + "_next;");
  fill_slot_ = next_ == "nx_" + v ? "it_" + v + " + 1" : v;  // (v is the next iteration's here)
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

}  // namespace qattn::backend::bwd::detail
