// sm90 lowering, the kernel's facts (see lower.h): header and work-tile names, the roles, the
// rings and the shared-memory layout, the producer's TMA loads. Inputs: the front end's header
// analysis (detail::Lowering::analyze_front: Dims, Consts, Grid, tensors, tiles), the checked
// program and its CheckInfo. Diagnostics: XL0201-XL0303 at the statement the kernel cannot run.
#include "backend/sm90/lower.h"

#include <algorithm>

#include "backend/translate.h"
#include "hw/sm90_policy.h"
#include "support/sha256.h"
#include "tl/eval.h"
#include "tl/printer.h"

namespace qattn::backend::sm90 {

namespace pol = hw::sm90;


bool Lower::error(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint) {
  diags_.error(code, at, msg, hint);
  return false;
}

kir::TlRef Lower::ref(const tl::Stmt& s) const { return detail::tl_ref(s); }

const kir::SharedBuf* Lower::buf(const std::string& name) const {
  for (const auto& b : k_.smem)
    if (b.name == name) return &b;
  return nullptr;
}

std::optional<kir::Kernel> Lower::run() {
  kernel_names_ = names_;
  kernel_names_.scope_prefix = "v.";
  kernel_names_.scoped.insert("softmax_scale");
  for (const char* n : {"window_left", "window_right", "softcap"}) kernel_names_.scoped.insert(n);  // launch builtins
  for (const auto& [var, ext] : f_.grid_) kernel_names_.scoped.insert(var);
  for (const auto& [name, fld] : f_.runtime_dims_) kernel_names_.scoped.insert(name);
  for (const auto& st : prog_.stmts)
    if (st.kind == tl::Stmt::Kind::Let) kernel_names_.scoped.insert(st.let.name);
  if (!lower_header() || !lower_scope() || !lower_roles() || !lower_smem() || !lower_loads() || !lower_registers() ||
      !schedule())
    return std::nullopt;
  return k_;
}

bool Lower::lower_header() {
  f_.describe_header(k_);
  k_.family = "wgmma";
  const support::SrcLoc at = f_.loop_ ? f_.loop_->loc : support::SrcLoc{};
  if (!f_.loop_)
    return error("XL0302", {}, "the program has no loop over K/V tiles", "the sm90 kernel streams K and V tiles in one `for j = ...` loop");
  if (k_.elem != tl::DType::BF16 && k_.elem != tl::DType::F16)
    return error("XL0102", at, std::string("Q, K, V in ") + tl::to_string(k_.elem) + " are not lowered on sm90 yet",
                 "use bf16 or fp16 (fp8 runs on the sm89 path: `--gpu l40s`)");
  if (k_.out != k_.elem)
    return error("XL0102", at, "O in another dtype than Q, K, V is not lowered on sm90", "store O in the operands' dtype");
  if (!f_.shared_.count("Q"))
    return error("XL0301", at, "the sm90 kernel stages Q through shared memory", "allocate `Q in shared (BM, d)`");
  k_.sm90.bm = f_.tile_m_;
  return true;
}

// The TL names of a work tile: Grid variables, runtime Dims, fixed Dims and Consts, Lets, the
// auxiliary globals, the Score / Mask declarations, the loop's mask and {skip}.
bool Lower::lower_scope() {
  // what the sm90 kernel cannot bind: more than 4 auxiliary globals, two kernel masks, a {skip} tile
  // the key loop does not compute
  int aux = 0;
  for (const auto& st : prog_.stmts) {
    if (st.kind != tl::Stmt::Kind::Allocate || st.alloc.space != tl::Space::Global) continue;
    const auto& a = st.alloc;
    if (a.name == "Q" || a.name == "K" || a.name == "V" || a.name == "O" || a.name == "LSE") continue;
    if (std::find(info_.aux.begin(), info_.aux.end(), a.name) == info_.aux.end() || ++aux > 4)
      return error("XL0301", st.loc, "global tensor " + a.name + " has no ABI argument",
                   "globals are Q, K, V, O, LSE and up to 4 auxiliary fp32/int32 inputs of Score/Mask declarations");
  }
  const tl::Stmt& loop = *f_.loop_;
  bool kernel_mask = false;
  for (const auto& s : loop.loop.body) {
    if (s.kind != tl::Stmt::Kind::Compute || s.compute.op != "Mask") continue;
    const tl::MaskSpec& m = s.compute.mask;
    if (m.kind == tl::MaskSpec::Kind::Named) {
      auto v = info_.variants.find(m.name);
      if (v == info_.variants.end() || !v->second.is_mask)
        return error("XL0301", s.loc, "`" + m.name + "` is not a Mask declaration", "declare `Mask " + m.name + " = ...`");
      continue;
    }
    if (kernel_mask)
      return error("XL0301", s.loc, "a second kernel Mask in the loop", "one `Compute Mask S ... with causal/window/...` per score tile");
    kernel_mask = true;
  }
  for (const auto& a : loop.attrs) {
    if (a.key != "skip") continue;
    if (!a.value || a.value->kind != tl::Expr::Kind::Name)
      return error("XL0301", a.loc, "`{skip}` without a Mask name", "`{skip: NAME}`");
    if (!f_.skip_tile(loop, a.value->name, names_))
      return error("XL0301", loop.loc, "`{skip: " + a.value->name + "}` is not lowered here",
                   "the loop needs `Compute GEMM Q, K^T and get S` and `Compute Mask S at [m_block, j] with " + a.value->name +
                       "`, and the Mask an `empty when` clause");
  }
  f_.describe_scope(k_, names_);
  kernel_names_.aux_extents = names_.aux_extents;
  // 3 axes, or 4 with split keys (analyze.cc checked the fourth: `s = 0: splits`)
  k_.launch.split = k_.scope.grid.size() == 4 && info_.split;
  if (k_.scope.grid.size() != 3 && !k_.launch.split)
    return error("XL0203", f_.grid_stmt_ ? f_.grid_stmt_->loc : support::SrcLoc{}, "the sm90 kernel's Grid has 3 axes",
                 "write `Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch`");
  k_.launch.reverse_m = f_.mask_.kind == tl::MaskSpec::Kind::Causal || f_.mask_.kind == tl::MaskSpec::Kind::CausalTopLeft;
  return true;
}

// The warp roles: the TL's Role statements, or the policy's defaults when the program states none.
bool Lower::lower_roles() {
  const tl::ScheduleInfo& sc = info_.schedule;
  const support::SrcLoc at = f_.loop_->loc;
  k_.launch.persistent = sc.persistent;
  kir::Roles& r = k_.roles;
  r.split_columns = sc.present && sc.split_columns;
  const std::string why = pol::tile_problem(f_.tile_m_, f_.shared_.count("K") ? f_.shared_.at("K").rows : 0, k_.d_qk, k_.d_v,
                                            r.split_columns ? sc.consumer_wg : 1);
  if (!why.empty()) return error("XL0202", f_.const_stmt_ ? f_.const_stmt_->loc : at, why, "see docs/translation.md, \"Hopper\"");
  r.consumer_wg = r.split_columns ? sc.consumer_wg : f_.tile_m_ / pol::kRowsPerConsumer;
  const pol::RegisterSplit split = pol::register_split(r.consumer_wg, sc.persistent, !info_.paged.empty());
  r.producer_regs = split.producer;
  r.consumer_regs = split.consumer;
  r.pingpong = r.consumer_wg == 2 && !r.split_columns;
  for (const auto& st : prog_.stmts)
    if (st.kind == tl::Stmt::Kind::Role) (st.role.producer ? r.producer_tl : r.consumer_tl) = ref(st);
  if (sc.present) {
    const support::SrcLoc rat = r.producer_tl.line ? support::SrcLoc{r.producer_tl.line, 1} : at;
    if (sc.producer_wg != 1)
      return error("XL0202", rat, std::to_string(sc.producer_wg) + " producer warpgroups are not lowered",
                   "the sm90 kernel has one producer warpgroup (its thread 0 issues every TMA): `Role producer warpgroups 1 ...`");
    if (r.split_columns && sc.consumer_wg != 2)
      return error("XL0202", rat, "split columns over " + std::to_string(sc.consumer_wg) + " consumer warpgroups is not lowered",
                   "the sm90 kernel splits the columns over two warpgroups: `Role consumer warpgroups 2 registers 224 split columns`");
    if (sc.consumer_wg != r.consumer_wg)
      return error("XL0202", rat, std::to_string(sc.consumer_wg) + " consumer warpgroups do not split BM = " + std::to_string(f_.tile_m_) + " rows",
                   "each consumer warpgroup owns 64 rows of the query tile: `Role consumer warpgroups " +
                       std::to_string(r.consumer_wg) + " ...` for BM = " + std::to_string(f_.tile_m_));
    if (sc.pingpong && sc.consumer_wg != 2)
      return error("XL0202", rat, "ping-pong over " + std::to_string(sc.consumer_wg) + " consumer warpgroups is not lowered",
                   "the kernel alternates exactly two consumer warpgroups; drop `pingpong` or use BM = 128");
    r.producer_regs = sc.producer_regs;
    r.consumer_regs = sc.consumer_regs;
    r.pingpong = sc.pingpong;
  }
  k_.launch.threads = pol::kThreadsPerWarpgroup * (r.producer_wg + r.consumer_wg);
  const int wgs = r.producer_wg + r.consumer_wg;
  const int regs = pol::kThreadsPerWarpgroup * (r.producer_regs * r.producer_wg + r.consumer_wg * r.consumer_regs);
  if (regs > pol::kThreadsPerWarpgroup * wgs * pol::launch_registers(wgs))
    return error("XL0202", r.consumer_tl.line ? support::SrcLoc{r.consumer_tl.line, 1} : at,
                 "the roles ask for " + std::to_string(regs) + " registers; the block's " + std::to_string(128 * wgs) + " threads hold " +
                     std::to_string(pol::launch_registers(wgs)) + " each at launch, which setmaxnreg only moves between them",
                 "lower the registers of a Role (a setmaxnreg.inc beyond them waits for ever)");
  return true;
}

// Shared memory: every shared Allocate (Q, then the rings K and V, in Allocate order), the O staging
// tile, the ring barriers and the tile exchange. Rings: buffers filled by {async} Copies, or, in a
// program without Roles, every buffer filled from global memory (the producer issues them all).
bool Lower::lower_smem() {
  const tl::ScheduleInfo& sc = info_.schedule;
  const int eb = dtype_bytes(k_.elem);
  const support::SrcLoc at = f_.loop_->loc;
  for (const auto& n : f_.shared_order_) {
    const detail::SharedBuf& b = f_.shared_.at(n);
    kir::SharedBuf s;
    s.name = n;
    s.cpp = "s" + names_.ident(n);
    s.rows = b.rows;
    s.cols = b.cols;
    s.cols_padded = pol::padded_cols(b.cols);
    s.dtype = b.dtype;
    s.ring = true;
    auto st = sc.stages.find(n);
    s.stages = st != sc.stages.end() ? st->second : 1;
    if (!sc.present && st == sc.stages.end()) {
      // no Hopper schedule: the translator picks the ring depth of the buffers the loop refills (STAGES)
      for (const auto& b2 : f_.loop_->loop.body)
        if (b2.kind == tl::Stmt::Kind::Copy && b2.copy.name == n && b2.copy.to == tl::Space::Shared) s.stages = f_.stages_;
    }
    if (s.stages < 1 || s.stages > 4) return error("XL0202", at, n + " has " + std::to_string(s.stages) + " stages", "use 1 to 4 stages");
    for (const auto& st2 : prog_.stmts)
      if (st2.kind == tl::Stmt::Kind::Allocate && st2.alloc.space == tl::Space::Shared && st2.alloc.name == n) {
        s.tl = ref(st2);
        for (const auto& a : st2.attrs)  // TL {view: K}: K's first columns, no storage
          if (a.key == "view" && a.value && a.value->kind == tl::Expr::Kind::Name) s.view_of = a.value->name;
      }
    // a tile the consumers write (TL `Copy X from register to shared`): no ring
    for (const auto& b2 : f_.loop_->loop.body)
      if (b2.kind == tl::Stmt::Kind::Copy && b2.copy.name == n && b2.copy.from == tl::Space::Register && b2.copy.to == tl::Space::Shared)
        s.from_registers = true;
    if (!s.view_of.empty() || s.from_registers) {
      s.ring = false;
      s.stages = 1;
    }
    k_.smem.push_back(s);
  }
  for (auto& s : k_.smem) {
    if (s.view_of.empty()) continue;
    const kir::SharedBuf* base = buf(s.view_of);
    if (!base || !base->ring || !base->view_of.empty() || base->rows != s.rows || base->cols < s.cols || s.cols % 64 != 0)
      return error("XL0202", s.tl.line ? support::SrcLoc{s.tl.line, 1} : at,
                   "the view " + s.name + " is not the first columns (a multiple of 64) of a ring with its rows",
                   "`Allocate V in shared (BN, d_v) bf16 {view: K}` over `Allocate K in shared (BN, d) bf16 {stages: N}`");
    s.stages = base->stages;
  }
  if (!buf("K") || !buf("V"))
    return error("XL0301", at, "the sm90 kernel stages K and V through shared memory", "allocate `K in shared (BN, d)` and `V in shared (BN, d)`");
  k_.sm90.bn = buf("K")->rows;
  if (buf("V")->rows != k_.sm90.bn)
    return error("XL0202", at, "K and V tiles of different rows are not lowered", "give K and V the same BN rows");
  if (k_.roles.split_columns != (buf("V")->view_of == "K"))
    return error("XL0202", at,
                 k_.roles.split_columns ? "split columns without V as a view of K is not lowered"
                                        : "V as a view of K is lowered with `split columns` consumers only",
                 "DeepSeek's absorbed MLA: `Allocate V in shared (BN, d_v) bf16 {view: K}` and `Role consumer warpgroups 2 ... split columns`");
  if (sc.present && buf("K")->stages != buf("V")->stages)
    return error("XL0202", at,
                 "K has " + std::to_string(buf("K")->stages) + " stages and V " + std::to_string(buf("V")->stages),
                 "the kernel keeps K and V in rings of one depth: give both the same `{stages: N}`");
  // O staging: its own tile when a persistent grid can afford it (the next tile's Q load then does
  // not wait for this tile's epilogue) or when O is wider than Q (d_v > d_qk), else Q's rows.
  const int stages = buf("K")->stages;
  const auto with_o = pol::smem_plan(k_.sm90.bm, k_.sm90.bn, k_.d_qk, k_.d_v, stages, eb, true, k_.launch.persistent);
  const bool o_wider = pol::o_wider_than_q(k_.d_qk, k_.d_v) && !k_.roles.split_columns;
  const bool separate_o = o_wider || (k_.launch.persistent && with_o.total <= target_.smem_per_block && !k_.roles.split_columns);
  kir::SharedBuf o;
  o.name = "O";
  o.cpp = "sO";
  o.rows = k_.sm90.bm;
  o.cols = k_.d_v;
  o.cols_padded = pol::padded_cols(k_.d_v);
  o.dtype = k_.out;
  o.alias_of = separate_o ? "" : "Q";
  o.tl.text = o_wider ? "O staging: its own tile (O is wider than Q)" : separate_o ? "O staging: its own tile" : "O staging: in Q's rows";
  // An O store marked {async} completes in the background: with O in its own tile the wait for it
  // moves to just before the next tile's store (and the block's end).
  bool async_store = false;
  for (const auto& st : prog_.stmts)
    if (st.kind == tl::Stmt::Kind::Copy && st.copy.name == "O" && st.copy.to == tl::Space::Global)
      for (const auto& a : st.attrs) async_store = async_store || a.key == "async";
  k_.launch.defer_store_wait = separate_o && async_store;
  int64_t off = 0;
  for (auto& s : k_.smem) {
    if (!s.view_of.empty()) continue;
    s.offset = off;
    s.bytes = int64_t(s.stages) * s.rows * s.cols_padded * eb;
    off += s.bytes;
  }
  for (auto& s : k_.smem)
    if (!s.view_of.empty()) s.offset = buf(s.view_of)->offset;
  if (k_.roles.split_columns) {  // the warpgroups' row exchange (RowCombine)
    k_.sm90.exchange_offset = off;
    off += pol::kSplitExchangeBytes;
  }
  if (separate_o) {
    o.offset = off;
    o.bytes = int64_t(o.rows) * o.cols_padded * eb;
    off += o.bytes;
  } else {
    o.offset = buf("Q")->offset;
  }
  k_.smem.push_back(o);
  for (auto& s : k_.smem) {
    if (!s.ring || !s.alias_of.empty() || !s.view_of.empty() || s.name == "O") continue;
    s.barrier_offset = off;
    off += 16 * s.stages;
  }
  // persistent: the tile exchange; a ragged launch's live-tile counts after it (Scheduler<..., true>)
  const int dense = k_.launch.persistent && !k_.scope.q_count_cpp.empty() ? pol::kDenseTilesBytes : 0;
  if (k_.launch.persistent) off += pol::kTileExchangeBytes + dense;
  k_.launch.smem_bytes = pol::kAlignSlack + off;
  const auto plan = pol::smem_plan(k_.sm90.bm, k_.sm90.bn, k_.d_qk, k_.d_v, stages, eb, separate_o, k_.launch.persistent);
  if (!k_.roles.split_columns && k_.smem.size() == 4 && plan.total + dense != k_.launch.smem_bytes)
    return error("XL0202", at, "internal: the shared-memory layout and the policy's formula disagree", "report this");
  if (k_.roles.split_columns && k_.smem.size() == 5 &&
      pol::smem_plan_split(k_.sm90.bm, k_.sm90.bn, k_.d_qk, stages, eb, k_.launch.persistent).total + dense != k_.launch.smem_bytes)
    return error("XL0202", at, "internal: the shared-memory layout and the policy's split-columns formula disagree", "report this");
  if (k_.launch.smem_bytes > target_.smem_per_block)
    return error("XL0202", f_.const_stmt_ ? f_.const_stmt_->loc : at,
                 "the tiles need " + std::to_string(k_.launch.smem_bytes / 1024) + " KB of shared memory; " + target_.name + " has " +
                     std::to_string(target_.smem_per_block / 1024) + " KB per block",
                 "lower BN or the stages");
  const int split = k_.roles.split();
  k_.sm90.mma_qk = wgmma_atom(k_.sm90.bn / split, k_.elem, false, false);
  k_.sm90.mma_pv = wgmma_atom(k_.d_v / split, k_.elem, false, true);
  // GQA packing
  if (info_.pack) {
    const std::string gx = tl::print_expr(*info_.pack);
    if (gx != "heads_q / heads_kv")
      return error("XL0202", info_.pack->loc.line ? info_.pack->loc : at, "`{pack: " + gx + "}` is not lowered on sm90",
                   "the sm90 kernel packs every query head of a kv head into its tiles: write `{pack: heads_q / heads_kv}`");
    k_.sm90.pack = true;
    for (const auto& st : prog_.stmts)
      for (const auto& a : st.attrs)
        if (a.key == "pack" && !k_.sm90.pack_tl.line) k_.sm90.pack_tl = ref(st);
  }
  return true;
}

// The producer's loads: every global -> shared Copy, in program order (Q before the loop; K and V
// in it). The tile row is the Copy's coordinate times the tile's rows; head and batch come from the
// global view's offset `[b, head]`.
bool Lower::lower_loads() {
  const bool roles = info_.schedule.present;
  auto visit = [&](const tl::Stmt& s, bool in_loop) -> bool {
    if (s.kind != tl::Stmt::Kind::Copy || s.copy.from != tl::Space::Global || s.copy.to != tl::Space::Shared) return true;
    const tl::CopyStmt& c = s.copy;
    const bool async = std::any_of(s.attrs.begin(), s.attrs.end(), [](const tl::Attr& a) { return a.key == "async"; });
    if (roles && !async)
      return error("XL0301", s.loc, "the copy into shared " + c.name + " is not `{async}`",
                   "in a program with Roles the producer fills shared buffers with TMA: mark the Copy `{async}`");
    const kir::SharedBuf* b = buf(c.name);
    auto g = info_.tensors.find(c.name);
    if (!b || g == info_.tensors.end() || !g->second.in_global)
      return error("XL0301", s.loc, "Copy of " + c.name + " has no global tensor and shared buffer", "");
    if (c.name != "Q" && c.name != "K" && c.name != "V")
      return error("XL0301", s.loc, "the sm90 kernel loads Q, K and V; " + c.name + " is not lowered", "");
    if (c.coord.size() != 2 || c.tile.size() != 2 || !(c.coord[1].kind == tl::Expr::Kind::Number && c.coord[1].value == 0))
      return error("XL0301", s.loc, "a Copy tile that does not span the head dim (column coordinate 0) is not lowered",
                   "tiles hold whole rows: `Copy " + c.name + " (BN, d) in coordinate [j, 0] ...`");
    const tl::Stmt* alloc = nullptr;
    for (const auto& st : prog_.stmts)
      if (st.kind == tl::Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && st.alloc.name == c.name) alloc = &st;
    if (!alloc || alloc->alloc.offset.size() != 2)
      return error("XL0301", s.loc, "the global " + c.name + " has no `with offset [batch, head]`",
                   "`Allocate " + c.name + " in global (seqlen, d) with offset [b, head]`");
    kir::Load l;
    l.tl = ref(s);
    l.buffer = c.name;
    l.global = c.name;
    l.rows = b->rows;
    l.cols = b->cols;
    l.row_cpp = kernel_names_.int_expr(tl::Expr::binary("*", c.coord[0], c.tile[0]));
    l.batch_cpp = kernel_names_.int_expr(alloc->alloc.offset[0]);
    const std::string& start = c.name == "Q" ? k_.scope.q_start_cpp : k_.scope.kv_start_cpp;
    if (!start.empty()) {  // TL {ragged}: one packed sequence of rows (the maps' batch extent is 1)
      // a GQA-packed Q counts packed rows: the sequence's first query is packed row start_q x G
      l.row_cpp = (c.name != "Q" ? "v.start_k + " : k_.sm90.pack ? "v.start_q * p.pack + " : "v.start_q + ") + l.row_cpp;
      l.batch_cpp = "0";
    }
    l.head_cpp = kernel_names_.int_expr(alloc->alloc.offset[1]);
    l.packed = k_.sm90.pack && c.name == "Q";
    l.stream = std::any_of(s.attrs.begin(), s.attrs.end(), [](const tl::Attr& a) { return a.key == "stream"; });
    l.in_loop = in_loop;
    k_.sm90.loads.push_back(l);
    if (!in_loop) once_rings_.push_back(c.name);
    return true;
  };
  for (const auto& s : prog_.stmts) {
    if (&s == f_.loop_) {
      for (const auto& b : s.loop.body)
        if (!visit(b, true)) return false;
      continue;
    }
    if (!visit(s, false)) return false;
  }
  for (const auto& b : k_.smem) {
    if (b.name == "O" || !b.view_of.empty() || b.from_registers) continue;
    const bool loaded = std::any_of(k_.sm90.loads.begin(), k_.sm90.loads.end(), [&](const kir::Load& l) { return l.buffer == b.name; });
    if (!loaded) return error("XL0301", b.tl.line ? support::SrcLoc{b.tl.line, 1} : support::SrcLoc{}, "shared " + b.name + " is never loaded", "");
  }
  return true;
}

}  // namespace qattn::backend::sm90
