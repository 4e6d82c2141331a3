// The kernel IR printer (kernel.kir, the artifact people and the LLM repair loop read) and the
// kernel-info JSON derived from the same Kernel (qattn_kernel_info()).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "backend/arch.h"
#include "backend/kir_print.h"

namespace qattn::backend::kir {

namespace {

std::string at(const TlRef& r) { return r.line ? "  [TL " + std::to_string(r.line) + "]" : ""; }

const char* kind_name(RegKind k) {
  switch (k) {
    case RegKind::Tile: return "tile";
    case RegKind::Rows: return "rows";
    case RegKind::OperandA: return "A operand";
  }
  return "?";
}

std::string scaled(const Op& o) { return o.xscale_cpp.empty() ? o.a : "(" + o.xscale_cpp + ") * " + o.a; }

}  // namespace

std::string op_text(const Op& o) {
  using K = Op::Kind;
  const std::string acc = o.accumulate ? " +=" : " =";
  switch (o.kind) {
    case K::Stmt: return o.tl.line ? "TL " + std::to_string(o.tl.line) + ": " + o.tl.text : "(" + o.tl.text + ")";
    case K::RingWait: return "wait " + o.buffer;
    case K::RingRelease:
      return "release " + o.buffer + (o.tl.line ? "  (TL " + std::to_string(o.tl.line) + " {release: " + o.buffer + "})"
                                                : o.tl.text.empty() ? "" : "  (" + o.tl.text + ")");
    case K::TurnWait: return "turn wait (pingpong)";
    case K::TurnPass: return "turn pass (pingpong)";
    case K::GemmSS:
      if (o.b_mn)
        return "gemm.ss #" + std::to_string(o.group) + " " + o.result + acc + " " + o.a + " x " + o.b + " (MN-major)  K " +
               std::to_string(o.k_dim) + "  (" + o.atom + ")";
      return "gemm.ss #" + std::to_string(o.group) + " " + o.result + acc + " " + o.a + "[64 rows] x " + o.b + "^T  K " +
             std::to_string(o.k_dim) + "  (" + o.atom + ")";
    case K::GemmRS: return "gemm.rs #" + std::to_string(o.group) + " " + o.result + acc + " " + o.a + " x " + o.b + "  (" + o.atom + ")";
    case K::GemmWait: {
      std::string r;
      for (const auto& x : o.regs) r += (r.empty() ? "" : ", ") + x;
      return "gemm.wait through #" + std::to_string(o.group) + " (pending " + std::to_string(o.pending) + "): " + r +
             (o.tl.line ? "  (for TL " + std::to_string(o.tl.line) + ")" : "");
    }
    case K::Scale: return o.a + " *= " + o.scalar_cpp;
    case K::Mask: return "mask " + o.a + " with " + o.op + " at key tile " + o.coord_cpp;
    case K::Modify: return o.a + " = score_" + o.op + "(" + scaled(o) + ") at key tile " + o.coord_cpp;
    case K::RowMax: return o.result + acc + " rowmax(" + scaled(o) + ")";
    case K::RowSum: return o.result + acc + " rowsum(" + scaled(o) + ")" + (o.partial ? " partial" : "");
    case K::QuadSum: return o.a + " = quad_sum(" + o.a + ")  (whole)";
    case K::Ew: return o.result + " = " + o.op + "(" + scaled(o) + ", " + o.b + ")";
    case K::EwRows: return o.result + " = " + o.op + "(" + scaled(o) + ", rows " + o.b + ")";
    case K::EwScalar: return o.result + " = " + o.op + "(" + scaled(o) + ", " + o.scalar_cpp + ")";
    case K::Map: return o.result + " = " + o.op + "(" + scaled(o) + ")";
    case K::Rescale: return o.a + " *= rows " + o.b;
    case K::Normalize: return o.a + " /= rows " + o.b;
    case K::Convert: return o.result + " = convert(" + scaled(o) + ")";
    case K::Copy: return o.result + " = " + o.a + "  (folded)";
    case K::Fill: return o.a + " = " + o.scalar_cpp + "  (folded value)";
    case K::StoreO: return "store " + o.a + " -> global (staged in " + o.buffer + ", TMA) head " + o.head_cpp + " batch " + o.batch_cpp;
    case K::StoreRows: return "store " + o.a + " -> global LSE head " + o.head_cpp + " batch " + o.batch_cpp;
    case K::RowCombine: return o.a + " = " + o.op + " over the warpgroups (shared memory, barrier)";
    case K::StoreShared:
      return std::string(o.barrier_first ? "barrier of the warpgroups, " : "") + "store " + o.a + " -> its columns of shared " + o.buffer +
             ", barrier of the warpgroups";
  }
  return "?";
}

std::string print(const Kernel& k) {
  std::string s;
  auto line = [&](const std::string& x) { s += x + "\n"; };
  line("# kernel IR (src/backend/kir.h), written by qattn stage 2; the CUDA is emitted from this");
  line("kernel " + k.name + "  family " + k.family + "  arch " + k.arch + "  target " + k.target);
  line("  tl " + k.tl_kernel + "  tl_hash " + k.tl_hash);
  line("  dtype " + std::string(tl::to_string(k.elem)) + " -> " + tl::to_string(k.out) + "  d_qk " + std::to_string(k.d_qk) + "  d_v " +
       std::to_string(k.d_v) + "  lse " + (k.lse ? "yes" : "no"));
  for (const auto& h : k.header) line("  TL " + std::to_string(h.line) + ": " + h.text);
  const Scope& sc = k.scope;
  line("launch");
  std::string g;
  for (size_t i = 0; i < sc.grid.size() && i < sc.grid_extents_cpp.size(); ++i)
    g += (g.empty() ? "" : ", ") + sc.grid[i].tl + " < " + sc.grid_extents_cpp[i];
  line("  grid (" + g + ")" + (k.launch.persistent ? " persistent" : " one block per tile") +
       (k.launch.reverse_m ? ", longest rows first" : "") + (k.launch.split ? ", split keys: the parts folded into the batch axis" : "") +
       at(k.launch.grid_tl));
  line("  threads " + std::to_string(k.launch.threads) + "  smem " + std::to_string(k.launch.smem_bytes) + " B (limit " +
       std::to_string(k.smem_limit) + ")");
  if (k.family == "wgmma") {
    if (k.sm90.pack) line("  pack heads_q / heads_kv query heads per tile (5-D maps for Q and O)" + at(k.sm90.pack_tl));
    line(std::string("  O store: ") + (k.launch.defer_store_wait ? "{async}, waited for before the next tile's store" : "waited for at once"));
    if (k.sm90.merge.on)
      line("  merge: the consumer warpgroup that stores its rows' last part merges every part, " + std::to_string(k.sm90.merge.rows) +
           " rows at a time over its 4 warps (d_v " + std::to_string(k.sm90.merge.cols) + ")" + at(k.sm90.merge.tl));
    line("roles");
    line("  producer " + std::to_string(k.roles.producer_wg) + " warpgroup x " + std::to_string(k.roles.producer_regs) + " registers" +
         at(k.roles.producer_tl));
    line("  consumer " + std::to_string(k.roles.consumer_wg) + " warpgroups x " + std::to_string(k.roles.consumer_regs) + " registers" +
         (k.roles.pingpong ? " pingpong" : "") + (k.roles.split_columns ? " split columns" : "") + at(k.roles.consumer_tl));
  } else {
    const Mma& m = k.mma;
    line("  warps " + std::to_string(m.warps) + ", each " + std::to_string(m.tile_m / std::max(1, m.warps)) + " of the " +
         std::to_string(m.tile_m) + " rows; every warp runs every statement");
    line("  mma " + m.atom + "  (" + m.instr + ", k " + std::to_string(m.tile_k) + ")");
    line(std::string("  copies ") + (m.cp_async ? "cp.async" : "ld.global + st.shared") + ", stages " + std::to_string(m.stages));
  }
  line("shared");
  for (const auto& b : k.smem) {
    std::string x = "  " + b.name + "  @" + std::to_string(b.offset) + "  (" + std::to_string(b.rows) + ", " + std::to_string(b.cols) +
                    ") " + tl::to_string(b.dtype) + " x " + std::to_string(b.stages) + "  " + std::to_string(b.bytes) + " B";
    if (!b.alias_of.empty()) x += "  in " + b.alias_of + "'s rows";
    if (!b.view_of.empty()) x += "  view: the first columns of " + b.view_of + "'s slots";
    if (b.from_registers) x += "  written from registers";
    if (b.ring && b.name != "O") x += "  ring, mbarriers @" + std::to_string(b.barrier_offset);
    line(x + (b.tl.line ? at(b.tl) : "  (" + b.tl.text + ")"));
  }
  if (k.family == "mma") line("  O staging  @0  " + std::to_string(k.mma.epilogue_bytes) + " B  (the epilogue, over the tiles)");
  if (k.launch.persistent) {
    int64_t end = 0;
    for (const auto& b : k.smem)
      if (b.ring && b.name != "O") end = std::max(end, b.barrier_offset + 16 * b.stages);
    line("  tile exchange  @" + std::to_string(end) + "  40 B  (the persistent grid's hand-off)");
    if (!sc.q_count_cpp.empty()) line("  live-tile counts  @" + std::to_string(end + 40) + "  128 B  (a ragged launch's 32 sequences in hand)");
  }
  line("scope");
  std::string names;
  for (const auto& n : sc.grid) names += " " + n.tl;
  for (const auto& n : sc.runtime_dims) names += " " + n.tl;
  line("  names" + names);
  if (!sc.launch_args.empty()) {
    std::string a;
    for (const auto& n : sc.launch_args) a += " " + n;
    line("  launch arguments" + a);
  }
  for (const auto& g : sc.globals) line("  global " + g.text + at(g));
  for (const auto& n : sc.lets) line("  let " + n.tl + " = " + n.value_cpp + at(n.stmt));
  for (const auto& a : sc.aux) line("  aux[" + std::to_string(a.slot) + "] " + a.name + (a.is_int ? " int32" : " fp32") + at(a.tl));
  if (!sc.q_count_cpp.empty()) line("  ragged: seqlen_q = " + sc.q_count_cpp + at(sc.q_count_tl));
  if (!sc.kv_count_cpp.empty())
    line(std::string(sc.kv_ragged.empty() ? "  kv cache" : "  ragged") + ": seqlen_k = " + sc.kv_count_cpp + at(sc.kv_count_tl));
  if (!sc.q_start_cpp.empty()) line("  ragged: Q, O, LSE rows from " + sc.q_start_cpp + " of the packed tensors" + at(sc.ragged_tl));
  if (!sc.kv_start_cpp.empty()) line("  ragged: K, V rows from " + sc.kv_start_cpp + " of the packed tensors" + at(sc.ragged_tl));
  if (!sc.paged.empty()) line("  kv cache: K and V in pages of page_size rows through " + sc.paged + at(sc.paged_tl));
  for (const auto& d : sc.decls) line("  " + std::string(d.is_mask ? "mask " : "score ") + d.name + ": " + d.body_cpp + at(d.tl));
  line("  mask " + std::string(to_string(sc.mask)) + at(sc.mask_tl));
  for (size_t i = 0; i < sc.named_masks.size(); ++i) line("  mask " + sc.named_masks[i] + at(sc.named_masks_tl[i]));
  if (!sc.skip.empty()) line("  skip key tiles where empty_" + sc.skip);
  const Sm90& h = k.sm90;
  if (k.family == "wgmma") {
    line("producer");
    for (const auto& l : h.loads)
      line(std::string(l.in_loop ? "  loop: " : "  tile: ") + "load " + l.buffer + " (" + std::to_string(l.rows) + ", " +
           std::to_string(l.cols) + ") rows " + l.row_cpp + " head " + l.head_cpp + " batch " + l.batch_cpp + (l.packed ? " packed" : "") +
           (l.late ? " late" : "") + (l.stream ? " stream" : "") + at(l.tl));
    line("consumer");
    line("  registers");
    for (const auto& r : h.regs)
      line("    " + r.name + " " + kind_name(r.kind) + " (64, " + std::to_string(r.kind == RegKind::Rows ? 1 : r.cols) + ") " +
           tl::to_string(r.dtype) + (r.partial ? " partial" : "") + (r.init_cpp.empty() ? "" : " = " + r.init_cpp) + "  as " + r.cpp +
           at(r.tl));
    for (const auto& x : h.scalars) line("    " + x.cpp + " = " + x.value_cpp + at(x.tl));
    auto block = [&](const char* name, const std::vector<Op>& ops) {
      line("  " + std::string(name));
      for (const auto& o : ops) line(std::string(o.kind == Op::Kind::Stmt ? "    " : "      ") + op_text(o));
    };
    block("before the loop", h.before);
    std::string st;
    for (int l : h.loop.stage1_lines) st += (st.empty() ? "" : ", ") + std::to_string(l);
    line("  loop " + h.loop.var + " in [" + h.loop.lo_cpp + ", " + h.loop.hi_cpp + ") descending" +
         (h.loop.overlap ? ", overlap: stage 1 = TL " + st : "") + at(h.loop.tl));
    if (h.loop.overlap) block("first", h.loop.first);
    block(h.loop.overlap ? "steady" : "body", h.loop.steady);
    block("when the loop ends (also without key tiles)", h.released_after_loop);
    if (h.loop.overlap) block("drain (the last key tile's stage 1)", h.loop.drain);
    block("after the loop", h.after);
  } else {
    const Mma& m = k.mma;
    line("gemms");
    for (const auto& g : m.gemms) {
      const char* src = g.a_source == MmaGemm::ASource::Register   ? "registers (a Reshape of an accumulator)"
                        : g.a_source == MmaGemm::ASource::Resident ? "registers, copied once before the loop"
                                                                   : "shared, fragments loaded inside the GEMM";
      line("  " + g.c + (g.accumulate ? " += " : " = ") + g.a + " x " + g.b + (g.b_kmajor ? "^T" : "") + "  A from " + src + "; B " +
           (g.b_kmajor ? "K-major (ldmatrix)" : "transposed view") + (g.descale_cpp.empty() ? "" : "; descale " + g.descale_cpp) +
           at(g.tl));
    }
    if (!m.vt_buffer.empty()) line("  " + m.vt_buffer + "t: " + m.vt_buffer + " transposed in shared memory for the fp8 P V GEMM");
    const MmaPipeline& p = m.pipeline;
    line("loop");
    for (size_t i = 0; i < m.loop.size(); ++i) {
      const MmaStmt& x = m.loop[i];
      std::string r;
      for (const auto& b : x.reads) r += (r.empty() ? "" : ", ") + b;
      line("  [" + std::to_string(i) + "] TL " + std::to_string(x.tl.line) + ": " + x.tl.text +
           (x.fills.empty() ? "" : "  (fills " + x.fills + ")") + (r.empty() ? "" : "  (reads " + r + ")"));
    }
    if (!p.pipelined) {
      line("pipeline none: " + p.why_not + "; each copy is waited for at its first read");
    } else {
      const int s = m.stages;
      line("pipeline " + p.x + " [" + std::to_string(p.x_copy) + "], " + p.y + " [" + std::to_string(p.y_copy) + "], " +
           std::to_string(s) + " stage(s); prologue " +
           (p.prologue_after.line ? "after TL " + std::to_string(p.prologue_after.line) : std::string("at the loop")) + ": " +
           (s == 1 ? p.x + "(lo)" : std::to_string(s - 1) + " stage(s) of " + p.x + " and " + p.y));
      if (s == 1) {
        line("  before [" + std::to_string(p.x_first) + "] (" + p.x + "'s first read): wait all, barrier, issue " + p.y + "(j)");
        line("  after [" + std::to_string(p.x_last) + "] (" + p.x + "'s last read): wait all, barrier, issue " + p.x + "(j + 1)");
      } else {
        line("  before [" + std::to_string(p.x_first) + "] (" + p.x + "'s first read): wait until " + std::to_string(2 * s - 3) +
             " group(s) in flight, barrier, issue " + p.x + ", " + p.y + "(j + " + std::to_string(s - 1) + ")");
        line("  before [" + std::to_string(p.y_first) + "] (" + p.y + "'s first read): wait until " + std::to_string(2 * s - 2) +
             " group(s) in flight, barrier");
      }
    }
  }
  return s;
}

std::string info_json(const Kernel& k) {
  nlohmann::ordered_json j;
  j["kernel"] = k.name;
  j["tl_kernel"] = k.tl_kernel;
  j["arch"] = k.arch;
  j["family"] = k.family;
  j["target"] = k.target;
  std::string mma = k.family == "mma" ? k.mma.atom : "";
  for (const auto* blk : {&k.sm90.loop.first, &k.sm90.loop.steady})
    for (const auto& o : *blk)
      if ((o.kind == Op::Kind::GemmSS || o.kind == Op::Kind::GemmRS) && mma.find(o.atom) == std::string::npos)
        mma += (mma.empty() ? "" : ", ") + o.atom;
  j["mma"] = mma;
  j["dtype"] = tl::to_string(k.elem);
  j["out_dtype"] = tl::to_string(k.out);
  j["d_qk"] = k.d_qk;
  j["d_v"] = k.d_v;
  j["mask"] = to_string(k.scope.kernel_mask);
  if (k.scope.kernel_mask == MaskKind::Window) {
    if (k.scope.window_left >= 0 && k.scope.window_right >= 0) j["window"] = {k.scope.window_left, k.scope.window_right};
    else j["window"] = "runtime";  // the C ABI's window_left / window_right
  }
  if (!k.scope.launch_args.empty()) j["args"] = k.scope.launch_args;
  j["lse"] = k.lse;
  j["aux"] = nlohmann::ordered_json::array();
  for (const auto& a : k.scope.aux) j["aux"].push_back({{"name", a.name}, {"dtype", a.is_int ? "int32" : "fp32"}, {"shape", a.extents_cpp}});
  if (!k.scope.q_ragged.empty() || !k.scope.kv_ragged.empty()) {  // the cumulative counts of ragged batches, by role
    nlohmann::ordered_json vl = nlohmann::ordered_json::object();
    if (!k.scope.q_ragged.empty()) vl["cu_seqlens_q"] = k.scope.q_ragged;
    if (!k.scope.kv_ragged.empty()) vl["cu_seqlens_k"] = k.scope.kv_ragged;
    j["varlen"] = vl;
  }
  if ((!k.scope.kv_lengths.empty() && k.scope.kv_ragged.empty()) || !k.scope.paged.empty()) {  // the aux inputs of a KV cache, by role
    nlohmann::ordered_json kv = nlohmann::ordered_json::object();
    if (!k.scope.kv_lengths.empty()) kv["lengths"] = k.scope.kv_lengths;
    if (!k.scope.paged.empty()) kv["block_table"] = k.scope.paged;
    j["kv_cache"] = kv;
  }
  for (const auto& b : k.smem)  // TL {view: K}: V is K's first d_v columns; the C ABI takes v == k
    if (b.name == "V" && b.view_of == "K") j["v_from_k"] = true;
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  for (const auto& d : k.scope.decls) v[d.name] = d.expr_tl;
  j["variants"] = v;
  nlohmann::ordered_json tiles = nlohmann::ordered_json::object();
  for (const auto& c : k.consts) tiles[c.first] = c.second;
  j["tiles"] = tiles;
  j["threads"] = k.launch.threads;
  j["smem_bytes"] = k.launch.smem_bytes;
  if (k.family == "mma") {
    j["pipelined"] = k.mma.pipeline.pipelined;
  } else {
    j["pipelined"] = true;
    j["persistent"] = k.launch.persistent;
    if (k.launch.split) j["splits"] = true;  // ABI 8: o / lse receive batch * splits parts
    if (k.sm90.merge.on) j["merge"] = true;  // ABI 10: o_merged / lse_merged receive the merged result
    j["roles"] = {{"producer_registers", k.roles.producer_regs}, {"consumers", k.roles.consumer_wg},
                  {"consumer_registers", k.roles.consumer_regs}, {"pingpong", k.roles.pingpong}};
  }
  j["tl_hash"] = k.tl_hash;
  return j.dump();
}

}  // namespace qattn::backend::kir
