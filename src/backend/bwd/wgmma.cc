// The backward lowering's wgmma mode (lower_impl.h): on an sm90 target the TL GEMMs become warpgroup
// MMAs (device/qattn/sm90/backward.cuh) when every GEMM of the program has a wgmma form:
//   - the product (M, N) is split over the warpgroups (WARPS / 4 of them) along M, 64 rows each, or,
//     for a 64-row product on two warpgroups, along N (each its half of the columns);
//   - an operand read from shared memory is K-major when its K dimension runs along the tile's
//     columns (A as stored, B^T) and MN-major when it runs along the rows (A^T, B as stored): both
//     are wgmma forms for 16-bit types;
//   - A may come from registers (a converted accumulator after its Reshape) when the product is split
//     along M (each warpgroup holds its rows of A) and B is read as stored.
// A register tile's layout is then the wgmma accumulator's: Mma<R> with its 16-row warps along M
// (a warpgroup's 4 warps cover its 64 rows), or MmaCols<64, C, 2> for a product split along N (also an
// Allocate'd accumulator that such a product adds to: dK, dV of a 64-row key tile at d256). Any
// `{warps_m: N}` (the mma.sync layouts of the sm80 form) keeps the kernel on mma.sync.
#include "backend/bwd/lower_impl.h"

namespace qattn::backend::bwd::detail {
using tl::Stmt;

std::optional<Lower::WgGemm> Lower::wg_form(const Stmt& s, std::string& why) const {
  const auto& c = s.compute;
  const tl::Operand &A = c.operands[0], &B = c.operands[1];
  const std::string line = "TL " + std::to_string(s.loc.line) + ": ";
  WgGemm g;
  // A from registers: a computed tile that no Copy fills from shared memory, read as it is
  bool a_reg = false;
  if (!A.transposed && computed_.count(A.expr.name) && reg_shapes_.count(A.expr.name)) {
    a_reg = true;
    walk(prog_.stmts, [&](const Stmt& t) {
      if (t.kind == Stmt::Kind::Copy && t.copy.name == A.expr.name && t.copy.from == tl::Space::Shared && t.copy.to == tl::Space::Register)
        a_reg = false;
    });
  }
  int ka = 0;
  if (a_reg) {
    g.rs = true;
    auto shape = reg_shapes_.find(A.expr.name);
    if (shape == reg_shapes_.end()) return why = line + "the shape of the register A operand " + A.expr.name + " is not known", std::nullopt;
    g.m = shape->second.first, ka = shape->second.second;
  } else {
    auto it = shared_.find(A.expr.name);
    if (it == shared_.end() || it->second.cols == 0) return why = line + "A operand " + A.expr.name + " has no 2-D shared tile", std::nullopt;
    const SharedBuf& sa = it->second;
    g.a_mn = A.transposed;
    g.a_rows = sa.rows;
    g.m = A.transposed ? sa.cols : sa.rows;
    ka = A.transposed ? sa.rows : sa.cols;
  }
  auto it = shared_.find(B.expr.name);
  if (it == shared_.end() || it->second.cols == 0) return why = line + "B operand " + B.expr.name + " has no 2-D shared tile", std::nullopt;
  const SharedBuf& sb = it->second;
  g.b_mn = !B.transposed;
  g.b_rows = sb.rows;
  g.n = B.transposed ? sb.rows : sb.cols;
  g.k = B.transposed ? sb.cols : sb.rows;
  if (g.k != ka || g.k % 16 != 0) return why = line + "the depths of A and B differ or are not a multiple of 16", std::nullopt;
  const int wgs = warps_ / 4;
  if (g.m == 64 * wgs) {
    if (g.n % 8 != 0 || g.n > 256) return why = line + "N = " + std::to_string(g.n) + " is not a wgmma N (8 ... 256)", std::nullopt;
  } else if (g.m == 64 && wgs == 2) {
    g.split_n = true;
    const int half = g.n / 2;
    if (g.n % 16 != 0 || half > 256 || (g.b_mn && half % 32 != 0))
      return why = line + "a 64-row product split along N needs " + (g.b_mn ? "halves of 32-column blocks" : "N a multiple of 16"), std::nullopt;
    if (g.rs) return why = line + "a register A operand needs the product split along M", std::nullopt;
  } else {
    return why = line + "the product has " + std::to_string(g.m) + " rows: not 64 per warpgroup (" + std::to_string(wgs) + " of them)",
           std::nullopt;
  }
  if (g.rs && !g.b_mn) return why = line + "A from registers with B^T (K-major B) is not lowered", std::nullopt;
  return g;
}

bool Lower::wgmma_plan() {
  wg_ = false;
  // The shapes of the register tiles (Allocate, and the results of Computes in TL order), and the
  // vectors read by column (`X^T`): those filled from shared memory are loaded by column.
  reg_shapes_.clear();
  auto shape_of = [&](const tl::Operand& o) -> std::pair<int, int> {
    auto r = reg_shapes_.find(o.expr.name);
    auto sb = shared_.find(o.expr.name);
    int rows = 0, cols = 0;
    if (r != reg_shapes_.end() && r->second.second) rows = r->second.first, cols = r->second.second;
    else if (sb != shared_.end()) rows = sb->second.rows, cols = sb->second.cols;
    return o.transposed ? std::pair<int, int>{cols, rows} : std::pair<int, int>{rows, cols};
  };
  std::set<std::string> from_shared, by_row;
  walk(prog_.stmts, [&](const Stmt& s) {
    if (s.kind == Stmt::Kind::Allocate && s.alloc.space == tl::Space::Register && regs_.count(s.alloc.name))
      reg_shapes_[s.alloc.name] = {regs_.at(s.alloc.name).rows, regs_.at(s.alloc.name).cols};
    if (s.kind == Stmt::Kind::Copy && s.copy.from == tl::Space::Shared && s.copy.to == tl::Space::Register) from_shared.insert(s.copy.name);
    if (s.kind != Stmt::Kind::Compute || s.compute.operands.empty()) return;
    const auto& c = s.compute;
    if (c.operands.size() == 2 && c.op != "GEMM" && c.operands[1].expr.kind == tl::Expr::Kind::Name) {
      auto x = reg_shapes_.find(c.operands[0].expr.name);
      if (c.operands[1].transposed && x != reg_shapes_.end()) col_use_[c.operands[1].expr.name] = x->second;
      else if (!c.operands[1].transposed) by_row.insert(c.operands[1].expr.name);
    }
    if (c.result != tl::ComputeStmt::Result::Get) return;
    if (c.op == "GEMM" && c.operands.size() == 2) {
      reg_shapes_[c.target] = {shape_of(c.operands[0]).first, shape_of(c.operands[1]).second};
    } else if (c.op == "RowSum" || c.op == "RowMax") {
      auto x = reg_shapes_.find(c.operands[0].expr.name);
      if (x != reg_shapes_.end()) reg_shapes_[c.target] = {x->second.first, 0};
    } else {
      auto x = reg_shapes_.find(c.operands[0].expr.name);
      if (x != reg_shapes_.end()) reg_shapes_[c.target] = x->second;
    }
  });
  row_use_ = by_row;
  for (const auto& [name, tile] : col_use_)
    if (from_shared.count(name) && !by_row.count(name)) col_vecs_[name] = tile;
  if (target_.sm != 90) return false;
  if (warps_ != 4 && warps_ != 8) return wg_reason_ = "WARPS = " + std::to_string(warps_) + " is not 1 or 2 warpgroups", false;
  bool ok = true;
  std::set<std::string> narrow;
  walk(prog_.stmts, [&](const Stmt& s) {
    if (!ok) return;
    for (const auto& a : s.attrs)
      if (a.key == "warps_m") ok = false, wg_reason_ = "TL " + std::to_string(s.loc.line) + ": `{warps_m}` states an mma.sync layout";
    if (ok && s.kind == Stmt::Kind::Compute && s.compute.op == "GEMM") {
      std::string why;
      auto g = wg_form(s, why);
      if (!g) ok = false, wg_reason_ = why;
      // an accumulator that a product split along N adds to (dK, dV of a 64-row key tile): its
      // Allocate lays it out as the product's warpgroup halves of the columns
      else {
        if (g->split_n && s.compute.result == tl::ComputeStmt::Result::Accumulate)
          split_acc_[s.compute.target] = "MmaCols<" + std::to_string(g->m) + ", " + std::to_string(g->n) + ", 2>{}";
        // a B read MN-major from a column that is a multiple of 32 only (the halves of MLA's 192
        // columns): its tile in atoms of 32 columns, the 64-byte swizzle, for every GEMM that reads it
        if (g->split_n && g->b_mn && (g->n / 2) % 64 != 0) narrow.insert(s.compute.operands[1].expr.name);
      }
    }
  });
  if (!ok) return split_acc_.clear(), false;
  for (const auto& n : narrow) shared_.at(n).atom = 32;
  wg_ = true;
  return true;
}

std::string Lower::wg_atom(const WgGemm& g) const {
  return wgmma_atom(g.split_n ? g.n / 2 : g.n, elem_, g.a_mn, g.b_mn);
}

void Lower::wg_gemm(Out& w, const Stmt& s, RegBuf& acc, const WgGemm& g) {
  const auto& c = s.compute;
  const tl::Operand &A = c.operands[0], &B = c.operands[1];
  const bool accumulate = c.result == tl::ComputeStmt::Result::Accumulate;
  const std::string atom = wg_atom(g);
  const std::string pb = "raw_pointer_cast(" + shared_.at(B.expr.name).var + ".data())";
  const std::string acc_regs = "qattn::sm90::regs<float>(" + acc.var + ")";
  // the tile's swizzle atom as qattn::smem_layout lays it out: the lowering's choice, else the widest
  // atom that divides its columns (32 for 96, 160, 224 columns: the 64-byte swizzle too)
  auto atom_of = [&](const std::string& n) {
    const SharedBuf& b = shared_.at(n);
    return b.atom ? b.atom : (b.cols % 64 == 0 ? 64 : 32);
  };
  const int b_ac = atom_of(B.expr.name);
  if (g.rs) {
    const RegBuf* ra = regs_.count(A.expr.name) ? &regs_.at(A.expr.name) : nullptr;
    if (!ra || ra->a_view.empty()) {
      fail("XL0303", A.loc.line ? A.loc : s.loc, "GEMM A operand '" + A.expr.name + "' is a register accumulator without its Reshape",
           "insert `Reshape " + A.expr.name + " from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)`");
      return;
    }
    if (!same_rows(*ra, acc, s)) return;
    if (!accumulate) w.line("clear(" + acc.var + ");");
    w.line("qattn::sm90::wg_gemm_rs<" + atom + ", " + std::to_string(g.k) + (b_ac != 64 ? ", " + std::to_string(b_ac) : "") +
           ">(qattn::sm90::regs<uint32_t>(" + ra->var + "), " + pb + ", " +
           acc_regs + ");  // wgmma: A from this warpgroup's registers, B (K, N) from shared");
    wg_pending_.push_back({c.target, A.expr.name, {B.expr.name}});
    if (handoff_.count(A.expr.name) || handoff_.count(B.expr.name)) --handoff_reads_left_;  // (A from registers: no read)
    return;
  }
  const std::string pa = "raw_pointer_cast(" + shared_.at(A.expr.name).var + ".data())";
  const int a_ac = atom_of(A.expr.name);
  // this warpgroup's rows of A (K-major: a row offset; MN-major: a column offset), or its columns of B
  const std::string a_off = g.split_n ? "0" : "64 * wg", b_off = g.split_n ? std::to_string(g.n / 2) + " * wg" : "0";
  w.line("qattn::sm90::wg_gemm_ss<" + atom + ", " + (g.a_mn ? "true" : "false") + ", " + (g.b_mn ? "true" : "false") + ", " +
         std::to_string(g.a_rows) + ", " + std::to_string(g.b_rows) + ", " + std::to_string(g.k) + ", " + (accumulate ? "true" : "false") +
         (a_ac != 64 || b_ac != 64 ? ", " + std::to_string(a_ac) + ", " + std::to_string(b_ac) : "") + ">(" + pa + ", " + a_off + ", " + pb + ", " + b_off + ", " + acc_regs + ");  // wgmma: A " + (g.a_mn ? "MN" : "K") + "-major, B " +
         (g.b_mn ? "MN" : "K") + "-major, the warpgroups along " + (g.split_n ? "N" : "M"));
  wg_pending_.push_back({c.target, "", {A.expr.name, B.expr.name}});
  if (handoff_.count(A.expr.name) || handoff_.count(B.expr.name)) --handoff_reads_left_;
}

void Lower::wait_upto(Out& w, long idx) {
  if (idx < 0) return;
  const long after = long(wg_pending_.size()) - 1 - idx;
  std::string names;
  for (long k = 0; k <= idx; ++k) names += (names.empty() ? "" : ", ") + wg_pending_[size_t(k)].acc;
  w.line("qattn::sm90::wgmma_wait<" + std::to_string(after) + ">();  // " + names + " ready" +
         (after ? " (" + std::to_string(after) + " later group" + (after > 1 ? "s" : "") + " still running)" : ""));
  for (long k = 0; k <= idx; ++k) {
    const WgPending& g = wg_pending_[size_t(k)];
    w.line("qattn::sm90::fence_regs(qattn::sm90::regs<float>(" + regs_.at(g.acc).var + "));");
    if (!g.a.empty()) w.line("qattn::sm90::fence_regs(qattn::sm90::regs<uint32_t>(" + regs_.at(g.a).var + "));  // (A, live until now)");
  }
  wg_pending_.erase(wg_pending_.begin(), wg_pending_.begin() + idx + 1);
  handoff_arrive(w);
}

void Lower::wait_before(Out& w, const Stmt* s) {
  if (wg_pending_.empty()) return;
  if (!s) return wait_upto(w, long(wg_pending_.size()) - 1);
  std::set<std::string> touched, written;  // registers read or written; registers and shared tiles written
  switch (s->kind) {
    case Stmt::Kind::Compute:
      for (const auto& o : s->compute.operands)
        if (o.expr.kind == tl::Expr::Kind::Name) touched.insert(o.expr.name);
      if (!s->compute.target.empty()) touched.insert(s->compute.target), written.insert(s->compute.target);
      if (s->compute.result == tl::ComputeStmt::Result::InPlace && !s->compute.operands.empty())
        written.insert(s->compute.operands[0].expr.name);
      break;
    case Stmt::Kind::Copy:
      touched.insert(s->copy.name);
      if (s->copy.to != tl::Space::Global) written.insert(s->copy.name);
      break;
    case Stmt::Kind::Reshape: touched.insert(s->reshape.name); break;
    case Stmt::Kind::For: return wait_upto(w, long(wg_pending_.size()) - 1);
    default: return;
  }
  long idx = -1;
  for (size_t k = 0; k < wg_pending_.size(); ++k) {
    const WgPending& g = wg_pending_[k];
    bool hit = touched.count(g.acc) || (!g.a.empty() && written.count(g.a));
    for (const auto& n : g.smem) hit = hit || written.count(n);
    if (hit) idx = long(k);
  }
  wait_upto(w, idx);
}

void Lower::wait_for_smem(Out& w, const std::string& name) {
  long idx = -1;
  for (size_t k = 0; k < wg_pending_.size(); ++k)
    if (wg_pending_[k].smem.count(name)) idx = long(k);
  wait_upto(w, idx);
}

}  // namespace qattn::backend::bwd::detail
