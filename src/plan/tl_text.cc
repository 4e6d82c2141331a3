// The rules engine's TL writer. One statement list serves both stages: without tiles it writes the
// sketch (stage 1a), with tiles the TL code (stage 1b). The algorithm is FlashAttention-2's forward
// pass with the softmax in the exp2 domain:
//   S = Q K^T * (softmax_scale * log2e); mask; m_new = max(m, rowmax S); alpha = 2^(m - m_new);
//   P = 2^(S - m_new); l = alpha l + rowsum P; O = alpha O + P V;  at the end O /= l and
//   LSE = (m + log2 l) * ln2.
// Attention variants (spec Variants) add Score / Mask declarations, their auxiliary inputs, and
// `Compute Modify` / `Compute Mask ... with NAME` statements; with a Score the scale splits into
// softmax_scale, the Modify statements, then log2e (docs/planner.md, "Variants").
// On sm90 the TL code also states the Hopper schedule (docs/tl.md, "Hopper schedule"): the warp
// Roles, `{stages: STAGES}` K/V rings, `{async}` TMA copies of Q, K, V, the waits and releases on
// the two GEMMs and `{overlap}` on the key loop.
#include <algorithm>
#include <cctype>
#include <optional>

#include "hw/sm90_policy.h"
#include "plan/sketch.h"
#include "spec/variants.h"
#include "tl/parser.h"
#include "tl/printer.h"
#include "tl/variant.h"

namespace qattn::plan {
namespace {

class Writer {
 public:
  explicit Writer(const TileConfig* tiles) : tiles_(tiles) {}
  bool params() const { return tiles_ != nullptr; }
  void line(const std::string& s) { out_ += std::string(depth_ * 2, ' ') + s + "\n"; }
  void comment(const std::string& s) { line("#" + s); }
  void blank() { out_ += "\n"; }
  void indent() { ++depth_; }
  void dedent() { --depth_; }
  // `base` always; `param` only in TL code.
  void stmt(const std::string& base, const std::string& param = {}) { line(params() ? base + param : base); }
  std::string text() const { return out_; }

 private:
  const TileConfig* tiles_;
  std::string out_;
  int depth_ = 0;
};

const char* dtype_name(tl::DType t) { return tl::to_string(t); }

std::string mask_text(const Problem& p) {
  using K = tl::MaskSpec::Kind;
  switch (p.mask) {
    case K::None: return "none";
    case K::Bounds: return "bounds";
    case K::Named: return "none";  // not a kernel mask: variants are Problem::variants
    case K::Causal: return "causal";
    case K::CausalTopLeft: return "causal_top_left";
    case K::Window:
      // The window is a launch argument (the builtins window_left, window_right; an unbounded side
      // arrives as seqlen_q + seqlen_k): one kernel serves every window size.
      return "window(window_left, window_right)";
  }
  return "none";
}

// The per-tile mask: bounds for unmasked kernels (ragged last tile), the kernel's mask otherwise.
std::string tile_mask_text(const Problem& p) {
  return p.mask == tl::MaskSpec::Kind::None ? "bounds" : mask_text(p);
}

// Loop bounds: whole K/V tiles that the mask hides are skipped by the bounds themselves.
// The key-tile bounds of a query tile. `first` and `end` are the tile's first query and one past
// its last: `m_block * BM` and `(m_block + 1) * BM`, or with GQA packing (row r is query r / G)
// `m_block * BM / G` and `cdiv((m_block + 1) * BM, G)`.
std::string first_query(bool pack) { return pack ? "m_block * BM / (heads_q / heads_kv)" : "m_block * BM"; }
std::string end_query(bool pack) { return pack ? "cdiv((m_block + 1) * BM, heads_q / heads_kv)" : "(m_block + 1) * BM"; }
std::string loop_lo(const Problem& p, bool pack) {
  if (p.mask == tl::MaskSpec::Kind::Window)
    return "max(0, (" + first_query(pack) + " + seqlen_k - seqlen_q - window_left) / BN)";
  return "0";
}
std::string loop_hi(const Problem& p, bool pack) {
  using K = tl::MaskSpec::Kind;
  const std::string all = "cdiv(seqlen_k, BN)";
  const std::string end = end_query(pack);
  switch (p.mask) {
    case K::Causal: return "min(" + all + ", cdiv(" + end + " + seqlen_k - seqlen_q, BN))";
    case K::CausalTopLeft: return "min(" + all + ", cdiv(" + end + ", BN))";
    case K::Window: return "min(" + all + ", cdiv(" + end + " + seqlen_k - seqlen_q + window_right, BN))";
    default: return all;
  }
}

// ---- variants (docs/spec.md "Variants", docs/planner.md) ----------------------------------------
// A custom score_mod / mask_mod in canonical TL (as written when it does not parse: the parse of
// the whole program then reports it; make_plan checks it first).
std::string custom_text(const std::string& raw) {
  support::DiagSink quiet;
  auto e = tl::parse_variant_expr(raw, quiet);
  return e && !quiet.has_errors() ? tl::print_expr(*e) : raw;
}

// The Score / Mask declarations, in application order (spec::score_order, spec::mask_order).
// The built-in masks carry their tile clauses; a custom mask_mod gets the front end's derived ones.
std::vector<std::string> declarations(const Problem& p) {
  const spec::Variants& v = p.variants;
  const std::string off = "seqlen_k - seqlen_q";
  std::vector<std::string> out;
  for (const auto& name : spec::score_order(v)) {
    if (name == "alibi")
      out.push_back("Score alibi = score - alibi_slopes[head] * abs(q_idx + " + off + " - kv_idx)");
    else if (name == "relpos")
      out.push_back("Score relpos = score + rel_bias[head, clamp(kv_idx - q_idx - seqlen_k + seqlen_q, -(NB / 2), "
                    "NB / 2 - 1) + NB / 2]");
    else if (name == "score_mod")
      out.push_back("Score score_mod = " + custom_text(v.score_mod));
    else if (name == "softcap")
      out.push_back("Score softcap = softcap * tanh(score / softcap)");  // the builtin: a launch argument
  }
  for (const auto& name : spec::mask_order(v)) {
    if (name == "prefix_lm") {
      const std::string n = std::to_string(*v.prefix_lm);
      out.push_back("Mask prefix_lm = kv_idx <= q_idx + " + off + " or kv_idx < " + n + " empty when kv_lo > q_hi + " +
                    off + " and kv_lo >= " + n + " full when kv_hi <= q_lo + " + off + " or kv_hi < " + n);
    } else if (name == "document") {
      out.push_back(
          "Mask document = seg_q[b, q_idx] == seg_k[b, kv_idx] empty when seg_q[b, q_hi] < seg_k[b, kv_lo] or "
          "seg_k[b, kv_hi] < seg_q[b, q_lo] full when seg_q[b, q_lo] == seg_k[b, kv_hi] and seg_q[b, q_hi] == "
          "seg_k[b, kv_lo]");
    } else if (name == "mask_mod") {
      out.push_back("Mask mask_mod = " + custom_text(v.mask_mod));
    }
  }
  return out;
}

// The Mask whose `empty when` clause lets the key loop skip whole tiles (`{skip: NAME}`): document
// (data-dependent, usually the most skipping), else prefix_lm, else a mask_mod whose clauses the
// front end can derive. Empty when none has one.
std::string skip_mask(const Problem& p) {
  const spec::Variants& v = p.variants;
  if (v.document) return "document";
  if (v.prefix_lm) return "prefix_lm";
  if (!v.mask_mod.empty()) {
    support::DiagSink quiet;
    auto e = tl::parse_variant_expr(v.mask_mod, quiet);
    if (e && !quiet.has_errors() && tl::derive_clauses(*e)) return "mask_mod";
  }
  return "";
}

std::string text(const Problem& p, const Target& t, const TileConfig* tiles) {
  Writer w(tiles);
  const bool smem_operands = t.sm >= 90;  // wgmma reads Q, K, V from shared memory
  // The Hopper schedule (TL code only): warp roles, K/V rings, TMA copies, waits and releases.
  // The register split of the roles is the sm90 policy's (hw/sm90_policy.h): FlashAttention-3's
  // 24 / 240 with 2 consumer warpgroups, 32 / 160 with 3, 40 / 232 on a persistent grid (whose
  // producer warp also runs the tile scheduler; 8 more for a paged KV cache's producer, whose warps
  // share the pages' copies); one consumer warpgroup per 64 rows of Q.
  const bool schedule = smem_operands && w.params();
  const int consumers = tiles ? std::max(1, tiles->consumer_wgs()) : 0;
  const bool split_cols = schedule && tiles->split_columns > 1;  // the consumer warpgroups share the rows (absorbed MLA)
  const bool vk = p.v_from_k;  // V is K's first d_v columns: no V of its own, read from K's slots
  const bool persistent = schedule && tiles->persistent;
  const bool pack = schedule && tiles->pack_gqa;  // GQA packing (TL `{pack}`)
  const hw::sm90::RegisterSplit split = hw::sm90::register_split(consumers, persistent, p.kv_cache == spec::KvCache::Paged);
  const int producer_regs = split.producer, consumer_regs = split.consumer;
  // `{...}` after a statement, in TL code on sm90 only.
  auto sched = [&](const std::string& attrs) { return schedule ? " {" + attrs + "}" : std::string(); };
  // K and V `{stream}` (an L2 evict-first hint on launches with one query tile per head, which read
  // each head's keys once): the GQA-packed kernels whose stated queries fit one tile per kv head
  // (decoding, with or without a KV cache: MQA 1.02-1.04x, GQA unchanged), ragged ones included
  // (attention_varlen's decoding kernels state their queries too). Not MHA (its KV-cache decoding
  // measured 1-2% slower with the hint), nor the ragged or prefill kernels that state no queries,
  // which load as before (the hint's branch, untaken, moved their code by up to 2%:
  // bench/results/2026-11-30-h200-decode-evict).
  const bool kv_stream = schedule && pack && p.seqlen_q > 0 &&
                         p.seqlen_q * (p.heads_q / std::max(1, p.heads_kv)) <= tiles->bm;
  const std::string kv_copy = kv_stream ? "async, stream" : "async";
  const bool same_d = p.d_qk == p.d_v;
  const std::string dqk = same_d ? "d" : "d_qk";
  const std::string dv = same_d ? "d" : "d_v";
  const std::string st = dtype_name(p.dtype);
  const std::string out = dtype_name(p.out_dtype);
  const bool paged = p.kv_cache == spec::KvCache::Paged;

  if (w.params()) {
    w.comment(" TL code (stage 1b): " + p.name + " for sm" + std::to_string(t.sm) + " (" + t.name + ")");
    w.comment(" tiles: " + tiles->reason);
  } else {
    w.comment(" TL sketch (stage 1a): " + p.name);
    w.comment(" statements only: stage 1b adds Allocate, tile shapes, coordinates, loop bounds and Reshape");
  }
  w.line("Kernel " + kernel_name(p) + " with mask " + mask_text(p));
  const spec::Variants& var = p.variants;
  const std::vector<std::string> decls = declarations(p);
  const std::vector<spec::AuxInput> aux = spec::aux_inputs(var);
  if (!w.params() && !decls.empty()) {
    w.comment(" variants: " + spec::describe(var));
    for (const auto& d : decls) w.line(d);
  }
  if (w.params()) {
    std::string dims = "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, ";
    dims += same_d ? "d = " + std::to_string(p.d_qk)
                   : "d_qk = " + std::to_string(p.d_qk) + ", d_v = " + std::to_string(p.d_v);
    if (paged) dims += ", page_size, pages";
    if (p.split_keys) dims += ", splits";
    w.line(dims);
    w.line("Const BM = " + std::to_string(tiles->bm) + ", BN = " + std::to_string(tiles->bn) +
           ", WARPS = " + std::to_string(tiles->warps) + ", STAGES = " + std::to_string(tiles->stages));
    if (var.relative_bias) w.line("Const NB = " + std::to_string(*var.relative_bias));
    const std::string grid_attr = std::string(p.split_keys ? ", split = 0: splits" : "") + (persistent ? " {persistent}" : "");
    const std::string kind = p.heads_kv == 1 ? "MQA" : "GQA";
    const std::string group = std::to_string(p.heads_q / std::max(p.heads_kv, 1));
    if (p.split_keys)
      w.comment(" split keys: each sequence's key tiles cut into `splits` parts (a launch value), part `split` attended by this"
                " block; O and LSE receive the part's result, merged by a combine kernel (docs/tl.md, \"Splitting the keys\")");
    if (pack) {
      w.line("Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_kv, b = 0: batch" + grid_attr);
      w.comment(" " + kind + " packing: a tile holds the " + group +
                " query heads of one kv head (G = heads_q / heads_kv; row r: query r / G of head kv_head * G + r % G)");
    } else {
      w.line("Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch" + grid_attr);
      w.comment(p.heads_q == p.heads_kv ? " MHA: every query head has its own kv head"
                                        : " " + kind + ": " + group + " query heads share one kv head");
      w.line("Let kv_head = head / (heads_q / heads_kv)");
    }
    if (schedule && split_cols) {
      w.comment(" Hopper schedule: 1 producer warpgroup (TMA) and " + std::to_string(consumers) +
                " consumer warpgroups sharing the BM query rows: each computes BN / " + std::to_string(consumers) +
                " score columns and d_v / " + std::to_string(consumers) + " columns of O (WARPS = 4 x " + std::to_string(consumers + 1) + ")");
      w.line("Role producer warpgroups 1 registers " + std::to_string(producer_regs));
      w.line("Role consumer warpgroups " + std::to_string(consumers) + " registers " + std::to_string(consumer_regs) + " split columns");
    } else if (schedule) {
      w.comment(" Hopper schedule: 1 producer warpgroup (TMA) and " + std::to_string(consumers) + " consumer warpgroup" +
                (consumers == 1 ? "" : "s") + " of 64 query rows (WARPS = 4 x " + std::to_string(consumers + 1) + ")");
      w.line("Role producer warpgroups 1 registers " + std::to_string(producer_regs));
      w.line("Role consumer warpgroups " + std::to_string(consumers) + " registers " + std::to_string(consumer_regs) +
             (consumers == 2 ? " pingpong" : ""));
    }
    w.blank();
    const std::string qview = pack ? " with offset [b, kv_head] {pack: heads_q / heads_kv}" : " with offset [b, head]";
    const bool kv_cache = p.kv_cache != spec::KvCache::None;
    if (p.varlen) {  // docs/tl.md, "Ragged batches"
      if (kv_cache)
        w.comment(" ragged queries: the sequences' queries packed one after another, sequence b's from row cu_seqlens_q[b] of Q and O"
                  " (aux[0]); seqlen_q is the longest");
      else
        w.comment(" ragged batches: the sequences packed one after another; sequence b's queries start at row cu_seqlens_q[b] of Q and"
                  " O (aux[0]), its keys at row cu_seqlens_k[b] of K and V (aux[1]); seqlen_q, seqlen_k are the longest");
      w.line("Allocate cu_seqlens_q in global (batch + 1) int32");
      if (!kv_cache) w.line("Allocate cu_seqlens_k in global (batch + 1) int32");
      w.line("Let seqlen_q = cu_seqlens_q[b + 1] - cu_seqlens_q[b]");
      if (!kv_cache) w.line("Let seqlen_k = cu_seqlens_k[b + 1] - cu_seqlens_k[b]");
    }
    if (p.kv_cache != spec::KvCache::None) {  // docs/tl.md, "KV caches"
      const std::string a0 = p.varlen ? "aux[1]" : "aux[0]", a1 = p.varlen ? "aux[2]" : "aux[1]";
      w.comment(paged ? " KV cache: each sequence's keys (" + a0 + "), in pages of page_size rows through its row of the block table (" +
                            a1 + ")"
                      : " KV cache: each sequence's keys are the first cache_seqlens[b] rows (" + a0 + ")");
      w.line("Allocate cache_seqlens in global (batch) int32");
      if (paged) w.line("Allocate block_table in global (batch, pages) int32");
      w.line("Let seqlen_k = cache_seqlens[b]");
    }
    const std::string kv_attr = paged ? " {paged: block_table}" : p.varlen && !kv_cache ? " {ragged: cu_seqlens_k}" : "";
    // ragged and packed (GQA): one attribute block on Q, O, LSE
    const std::string q_attr = !p.varlen ? "" : pack ? ", ragged: cu_seqlens_q}" : " {ragged: cu_seqlens_q}";
    if (p.split_keys) w.line("Let tiles_per_split = cdiv(cdiv(seqlen_k, BN), splits)");
    std::string oview = !p.split_keys ? qview
                        : pack        ? " with offset [b, split, kv_head] {pack: heads_q / heads_kv}"
                                      : " with offset [b, split, head]";
    std::string qv = qview;
    if (p.varlen && pack) qv.pop_back(), oview.pop_back();  // the closing brace comes with q_attr
    w.line("Allocate Q in global (seqlen_q, " + dqk + ") " + st + qv + q_attr);
    w.line("Allocate K in global (seqlen_k, " + dqk + ") " + st + " with offset [b, kv_head]" + kv_attr);
    if (vk) w.comment(" V is K's first " + dv + " columns (DeepSeek's absorbed MLA: one latent cache): no V in global memory");
    else w.line("Allocate V in global (seqlen_k, " + dv + ") " + st + " with offset [b, kv_head]" + kv_attr);
    w.line("Allocate O in global (seqlen_q, " + dv + ") " + out + oview + q_attr);
    if (p.return_lse) w.line("Allocate LSE in global (seqlen_q) fp32" + oview + q_attr);
    if (!decls.empty()) {
      w.comment(" variants: " + spec::describe(var) + " (docs/spec.md, Variants)");
      const size_t aux0 = (p.varlen ? (p.kv_cache == spec::KvCache::None ? 2 : 1) : 0) +
                          (p.kv_cache == spec::KvCache::None ? 0 : paged ? 2 : 1);  // varlen's and the KV cache's come first
      for (size_t i = 0; i < aux.size(); ++i) {
        std::string shape;
        for (const auto& d : aux[i].shape) shape += (shape.empty() ? "" : ", ") + d;
        w.comment(" aux[" + std::to_string(aux0 + i) + "]: " + aux[i].meaning);
        w.line("Allocate " + aux[i].name + " in global (" + shape + ") " + (aux[i].is_int ? "int32" : "fp32"));
      }
      for (const auto& d : decls) w.line(d);
    }
    w.line("Allocate Q in shared (BM, " + dqk + ") " + st);
    w.line("Allocate K in shared (BN, " + dqk + ") " + st + sched("stages: STAGES"));
    if (vk) w.line("Allocate V in shared (BN, " + dv + ") " + st + " {view: K}");
    else w.line("Allocate V in shared (BN, " + dv + ") " + st + sched("stages: STAGES"));
    if (vk) w.line("Allocate Pc in shared (BM, BN) " + st);
    if (!smem_operands) {
      w.line("Allocate Q in register (BM, " + dqk + ") " + st);
      w.line("Allocate K in register (BN, " + dqk + ") " + st);
      w.line("Allocate V in register (BN, " + dv + ") " + st);
    }
    w.line("Allocate O in register (BM, " + dv + ") fp32 init 0");
    w.line("Allocate m in register (BM) fp32 init -inf");
    w.line("Allocate l in register (BM) fp32 init 0");
    if (p.return_lse) w.line("Allocate LSE in register (BM) fp32");
    w.blank();
  }
  // Copy NAME [tile in coordinate [..]] from A to B — the tile part only in TL code.
  auto copy = [&](const std::string& name, const std::string& tile_coord, const char* from, const char* to,
                  const std::string& attrs = {}) {
    w.line("Copy " + name + (w.params() && !tile_coord.empty() ? " " + tile_coord : "") + " from " + from + " to " + to + attrs);
  };
  copy("Q", "(BM, " + dqk + ") in coordinate [m_block, 0]", "global", "shared", sched("async"));
  if (!smem_operands) copy("Q", "", "shared", "register");
  const std::string skip = skip_mask(p);
  std::string loop_attrs;
  if (!skip.empty()) loop_attrs = "skip: " + skip;
  // split columns: not pipelined (measured 0.64-0.75x the plain loop on an H200; likely because K's slot
  // is released half a tile later, leaving the next load half the time in a 2-stage ring that Q and
  // 2 x 72 KB of K fill; bench/results/2026-11-30-h200-mla-decode)
  if (schedule && !split_cols) loop_attrs += (loop_attrs.empty() ? "" : ", ") + std::string("overlap");
  std::string lo = loop_lo(p, pack), hi = loop_hi(p, pack);
  if (p.split_keys) {  // the part's tiles within the mask's
    lo = lo == "0" ? "split * tiles_per_split" : "max(" + lo + ", split * tiles_per_split)";
    hi = "min(" + hi + ", (split + 1) * tiles_per_split)";
  }
  w.line(w.params() ? "for j = " + lo + ": " + hi + (loop_attrs.empty() ? "" : " {" + loop_attrs + "}") : "for j = 0: N");
  w.indent();
  copy("K", "(BN, " + dqk + ") in coordinate [j, 0]", "global", "shared", sched(kv_copy));
  if (!smem_operands) copy("K", "", "shared", "register");
  w.line("Compute GEMM Q, K^T and get S" + sched(vk ? "wait: Q, wait: K" : "wait: Q, wait: K, release: K"));
  const std::string at = w.params() ? " at [m_block, j]" : "";
  const std::vector<std::string> scores = spec::score_order(var);
  if (scores.empty()) {
    w.line("Compute Multiply S, softmax_scale * log2e");
  } else {
    // Score modifications see the natural-log score; the exp2-domain factor comes after them.
    w.line("Compute Multiply S, softmax_scale");
    for (const auto& name : scores) w.line("Compute Modify S" + at + " with " + name);
    w.line("Compute Multiply S, log2e");
  }
  w.line("Compute Mask S" + at + " with " + tile_mask_text(p));
  for (const auto& name : spec::mask_order(var)) w.line("Compute Mask S" + at + " with " + name);
  w.line("Compute RowMax S and get m_tile");
  w.line("Compute Max m, m_tile and get m_new");
  w.line("Compute Subtract m, m_new and get alpha");
  w.line("Compute Exp2 alpha");
  w.line("Compute Subtract S, m_new and get P");
  w.line("Compute Exp2 P");
  w.line("Compute RowSum P and get l_tile");
  w.line("Compute Rescale l, alpha");
  w.line("Compute Add l, l_tile");
  w.line("Compute Rescale O, alpha");
  w.line("Compute Convert P and get Pc " + st);
  if (vk) {  // the warpgroups' columns of P meet in shared memory; V is K's slot, released after this GEMM
    copy("Pc", "", "register", "shared");
    w.line("Compute GEMM Pc, V and accumulate O" + sched("release: K"));
  } else {
    if (w.params()) w.line("Reshape Pc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)");
    copy("V", "(BN, " + dv + ") in coordinate [j, 0]", "global", "shared", sched(kv_copy));
    if (!smem_operands) copy("V", "", "shared", "register");
    w.line("Compute GEMM Pc, V and accumulate O" + sched("wait: V, release: V"));
  }
  w.line("Compute Max m, m_new");
  w.dedent();
  w.line("end");
  if (p.return_lse) {
    w.line("Compute Log2 l and get LSE");
    w.line("Compute Add LSE, m");
    w.line("Compute Multiply LSE, ln2");
  }
  w.line("Compute Normalize O, l");
  // A persistent block's O store completes in the background while its next tile starts.
  copy("O", "(BM, " + dv + ") in coordinate [m_block, 0]", "register", "global", persistent ? sched("async") : "");
  if (p.return_lse) copy("LSE", "(BM) in coordinate [m_block]", "register", "global");
  // Split keys: the parts are merged by the TL combine kernel, a second launch. The in-kernel merge
  // (TL `Merge split ... end`, one warpgroup per tile merging after the last part's store) is lowered
  // but measured 0.49-0.96x the two launches on an H200 (bench/results/2026-11-30-h200-merge): not written.
  return w.text();
}

}  // namespace

std::string kernel_name(const Problem& p) {
  std::string n = "flash_fwd_";
  for (char c : p.name) n += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(static_cast<unsigned char>(c))) : '_';
  if (p.name.empty()) n += "kernel";
  return n;
}

std::string sketch_text(const Problem& p, const Target& t) { return text(p, t, nullptr); }
std::vector<std::string> variant_declarations(const Problem& p) { return declarations(p); }
std::string skip_mask_name(const Problem& p) { return skip_mask(p); }
std::string code_text(const Problem& p, const Target& t, const TileConfig& tiles) { return text(p, t, &tiles); }

}  // namespace qattn::plan
