// Deterministic sums (lower_impl.h, docs/translation.md "The backward pass"): `Copy X ... from
// register to global and accumulate {ordered}` adds the block's tile with plain loads and stores, one
// block at a time per tile, in the order of the blocks' linear indices. A counter per tile (the
// workspace of qattn_bwd_params, zeroed by the launch) counts the blocks that have added theirs; a
// block waits until it equals the number of blocks before it that add to the same tile, which the
// lowering computes from the TL: in the loop, the blocks of lower key-block index whose loop visits
// the tile (the loop bounds and `{skip}` re-evaluated for them); after the loop, the grid points of
// lower index that the address's Lets map to the same tile (GQA: the query heads of a kv head).
#include "backend/bwd/lower_impl.h"

namespace qattn::backend::bwd::detail {
using tl::Stmt;

namespace {

// The Grid variables an expression reads, directly (`direct`) or through Lets (`via_let`).
void grid_reads(const tl::Expr& e, const std::map<std::string, const tl::Expr*>& lets, const std::set<std::string>& grid,
                std::set<std::string>& direct, std::set<std::string>& via_let, bool in_let = false) {
  if (e.kind == tl::Expr::Kind::Name) {
    if (grid.count(e.name)) (in_let ? via_let : direct).insert(e.name);
    if (auto it = lets.find(e.name); it != lets.end()) grid_reads(*it->second, lets, grid, direct, via_let, true);
  }
  for (const auto& a : e.args) grid_reads(a, lets, grid, direct, via_let, in_let);
}

}  // namespace

// The Grid variable the in-loop `{ordered}` additions are ordered over: the one the tile's address
// (the view's offset, the tile coordinate) does not read. Empty when the loop has no ordered Copy or
// that is not one variable (ordered_add then refuses it).
std::string Lower::ordered_loop_var() const {
  std::map<std::string, const tl::Expr*> lets;
  std::set<std::string> grid;
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::Let) lets[st.let.name] = &st.let.value;
  if (!grid_stmt_) return {};
  for (const auto& it : grid_stmt_->grid.items) grid.insert(it.var);
  for (const auto& st : prog_.stmts) {
    if (st.kind != Stmt::Kind::For) continue;
    for (const auto& c : st.loop.body) {
      bool ordered = false;
      for (const auto& a : c.attrs) ordered = ordered || a.key == "ordered";
      if (!ordered || c.kind != Stmt::Kind::Copy || c.copy.coord.empty()) continue;
      std::set<std::string> direct, via_let;
      for (const auto& a : prog_.stmts)
        if (a.kind == Stmt::Kind::Allocate && a.alloc.space == tl::Space::Global && a.alloc.name == c.copy.name)
          for (const auto& e : a.alloc.offset) grid_reads(e, lets, grid, direct, via_let);
      grid_reads(c.copy.coord[0], lets, grid, direct, via_let);
      std::vector<std::string> free;
      for (const auto& v : grid)
        if (!direct.count(v) && !via_let.count(v)) free.push_back(v);
      return free.size() == 1 ? free[0] : std::string();
    }
  }
  return {};
}

bool Lower::ordered_add(Out& w, const Stmt& s, const RegBuf& r) {
  const auto& c = s.copy;
  const GlobalArg* g = find_arg(c.name);
  const tl::Stmt* alloc = nullptr;
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && st.alloc.name == c.name) alloc = &st;
  if (!g || !g->out || !alloc || alloc->alloc.offset.size() != 2 || c.coord.empty())
    return fail("XL0301", s.loc, "`{ordered}` on " + c.name + " is not lowered", "order the additions into dQ, dK or dV");
  std::map<std::string, const tl::Expr*> lets;
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::Let) lets[st.let.name] = &st.let.value;
  std::set<std::string> grid;
  for (const auto& it : grid_stmt_->grid.items) grid.insert(it.var);
  // the tile's address: the view's (batch, head) offset and the tile row
  std::set<std::string> direct, via_let;
  for (const auto& e : alloc->alloc.offset) grid_reads(e, lets, grid, direct, via_let);
  grid_reads(c.coord[0], lets, grid, direct, via_let);
  const bool rows_k = c.name == "dK" || c.name == "dV";
  const std::string heads = rows_k ? "p.heads_kv" : "p.heads_q", seqlen = rows_k ? "p.seqlen_k" : "p.seqlen_q";
  const std::string R = std::to_string(r.rows);
  const std::string tiles = "((" + seqlen + " + " + R + " - 1) / " + R + ")";
  std::string base = workspace_elems();  // after the phases' workspaces
  for (const auto& n : ws_counts_) base += " + " + n;
  const std::string slab = "ws_" + id(c.name);
  ws_counts_.push_back("int64_t(p.batch) * " + heads + " * " + tiles);
  w.line("// {ordered}: " + c.name + "'s tiles take the additions one block at a time, in the blocks' order (a counter per tile "
         "in the workspace)");
  w.line("int* " + slab + " = p.workspace + (" + base + ") + (int64_t(" + cint(alloc->alloc.offset[0]) + ") * " + heads + " + (" +
         cint(alloc->alloc.offset[1]) + ")) * " + tiles + " + (" + cint(c.coord[0]) + ");");
  const std::string before = "before_" + id(c.name);
  if (!loop_var_.empty()) {
    // in the loop: the tile is the loop's (coordinate [i, ..]); the other blocks adding to it differ in
    // one Grid variable the address does not read (the key block), whose loop may or may not visit i
    std::vector<std::string> free;
    for (const auto& v : grid)
      if (!direct.count(v) && !via_let.count(v)) free.push_back(v);
    const bool tile_is_loop = c.coord[0].kind == tl::Expr::Kind::Name && id(c.coord[0].name) == loop_var_;
    if (free.size() != 1 || !tile_is_loop || !loop_stmt_)
      return fail("XL0301", s.loc, "`{ordered}` in the loop needs the tile of the loop's iteration (coordinate [" + loop_var_ +
                                       ", 0]) and one Grid variable the address does not read (the key block)",
                  "store as the planner's backward does: `Copy dQ (BM, d) in coordinate [i, 0] from register to global and "
                  "accumulate {ordered}` under `Grid n_block = ..., head = ..., b = ...`");
    const std::string fv = id(free[0]);
    // the loop's bounds and skip must read the free variable directly (a Let of it would keep this block's value)
    std::set<std::string> d2, v2;
    grid_reads(loop_stmt_->loop.lo, lets, grid, d2, v2);
    grid_reads(loop_stmt_->loop.hi, lets, grid, d2, v2);
    if (!skip_.empty()) {
      grid_reads(skip_at_[0], lets, grid, d2, v2);
      grid_reads(skip_at_[1], lets, grid, d2, v2);
    }
    if (v2.count(free[0]))
      return fail("XL0301", s.loc, "`{ordered}`: the loop's bounds read " + free[0] + " through a Let",
                  "write " + free[0] + " itself in the loop's bounds");
    const std::string& v = loop_var_;
    std::string visible = "true";
    if (!skip_.empty())
      visible = "!empty_" + skip_ + "((" + cint(skip_at_[0]) + ") * " + skip_m_ + ", (" + cint(skip_at_[0]) + ") * " + skip_m_ + " + " +
                skip_m_ + " - 1, (" + cint(skip_at_[1]) + ") * " + skip_n_ + ", (" + cint(skip_at_[1]) + ") * " + skip_n_ + " + " +
                skip_n_ + " - 1)";
    // The turn order is descending in the free variable, the order in which the blocks reach tile v
    // when the loop's first tile grows with it (a causal mask: the block of the last keys starts at the
    // last query tiles); the kernel maps that variable to the block index reversed, so a block waits
    // only for blocks launched before it.
    if (free[0] != reversed_grid_var_)
      return fail("XL0301", s.loc, "`{ordered}` over " + free[0] + ": the Grid does not launch it in reverse", "");
    w.line("// the blocks of higher " + free[0] + " (launched first) whose loop visits tile " + v + " (its bounds" +
           (skip_.empty() ? "" : " and {skip}") + " evaluated for them) add first");
    w.line("auto visits_" + v + " = [&](int " + fv + ", int " + v + ") -> bool { return " + v + " >= (" + cint(loop_stmt_->loop.lo) +
           ") && " + v + " < (" + cint(loop_stmt_->loop.hi) + ") && " + visible + "; };");
    w.line("int " + before + " = 0;");
    w.line("for (int other = " + fv + " + 1; other < " + reversed_extent_ + "; ++other) " + before + " += visits_" + v + "(other, " +
           v + ");");
  } else {
    // after the loop: every block adds once; the blocks adding to the same tile differ in the Grid
    // variables the address reads only through Lets (the query head, through kv_head)
    std::vector<std::string> through;
    for (const auto& v : via_let)
      if (!direct.count(v)) through.push_back(v);
    std::vector<std::string> unread;
    for (const auto& v : grid)
      if (!direct.count(v) && !via_let.count(v)) unread.push_back(v);
    if (through.size() > 1 || !unread.empty())
      return fail("XL0301", s.loc, "`{ordered}` after the loop: the blocks adding to one tile must differ in one Grid variable read "
                                       "through a Let (" + std::to_string(through.size()) + " here, and " +
                                       std::to_string(unread.size()) + " Grid variables the address does not read)",
                  "store as the planner's backward does: dK, dV with offset [b, kv_head], Let kv_head = head / (heads_q / heads_kv)");
    w.line("int " + before + " = 0;");
    if (!through.empty()) {
      const std::string fv = id(through[0]);
      std::string same = "true";
      for (const auto& e : alloc->alloc.offset) {
        std::set<std::string> d3, v3;
        grid_reads(e, lets, grid, d3, v3);
        if (!v3.count(through[0])) continue;
        if (e.kind != tl::Expr::Kind::Name || !lets.count(e.name))
          return fail("XL0301", s.loc, "`{ordered}`: the offset reads " + through[0] + " through an expression, not one Let",
                      "name the kv head by a Let: `Let kv_head = head / (heads_q / heads_kv)`");
        // the Let's value for another `fv` (its own Lets must not read fv: they would keep this block's value)
        std::set<std::string> d4, v4;
        grid_reads(*lets.at(e.name), lets, grid, d4, v4);
        if (v4.count(through[0]))
          return fail("XL0301", s.loc, "`{ordered}`: Let " + e.name + " reads " + through[0] + " through another Let",
                      "write " + through[0] + " itself in Let " + e.name);
        same += " && ([&](int " + fv + ") { return " + cint(*lets.at(e.name)) + "; }(other) == " + id(e.name) + ")";
      }
      w.line("// the blocks of lower " + through[0] + " that add to the same tile add first");
      w.line("for (int other = 0; other < " + fv + "; ++other) " + before + " += " + same + ";");
    }
  }
  w.line("qattn::turn_wait(" + slab + ", " + before + ", tid);");
  w.line("qattn::add_acc_global_ordered<" + R + ", " + std::to_string(r.cols) + ">(" + mma_of(r) + ", " + r.var + ", m" +
         id(c.name) + ", " + cint(c.coord[0]) + ", tid);  // plain fp32 adds, in turn");
  w.line("qattn::turn_pass(" + slab + ", tid);");
  return true;
}

}  // namespace qattn::backend::bwd::detail
