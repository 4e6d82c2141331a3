// The rules engine's backward pass (docs/planner.md, "The backward pass"; docs/tl.md, "The backward
// pass"): a spec -> the TL sketch and TL code of FlashAttention-2's backward, one block per key tile
// walking the query tiles that see it. Tiles come from a small rules table with a reason per row;
// the program is parsed, checked and compared with its sketch like the forward's, and plan::verify
// interprets it against the fp64 gradients.
#include <algorithm>
#include <cctype>

#include "hw/target.h"
#include "plan/plan.h"
#include "plan/sketch.h"
#include "spec/variants.h"

namespace qattn::plan {
namespace {

// The warps along M of a register tile of `rows` rows (src/backend/bwd: min(WARPS, rows / 16); the
// rest of the warps split its columns).
int warps_m(int rows, int warps) { return std::max(1, std::min(warps, rows / 16)); }

// D = rowsum(dO * O) by a Phase (a row-wise kernel of its own, once per query row, launched first)
// where its (BM, d_v) tile fits the row-wise lowering (at most 64 values a thread); else in the loop.
bool d_by_phase(const Problem& p, const TileConfig& c) {
  return p.d_v % 32 == 0 && c.bm <= 128 && c.warps > 0 && c.bm % c.warps == 0 && (c.bm / c.warps) * (p.d_v / 32) <= 64;
}

// The warps along the rows of the register tiles (`{warps_m: N}`; 0: the lowering's default
// min(WARPS, rows / 16)): `scores` for S, dP, dO, O, LSE, D (BM rows), `kv` for dK, dV (BN rows),
// `dq` for dQ. FlashAttention-2's sm80 layouts for 64 x 128 tiles on 8 warps: S, dP, dQ, dO, O 2 x 4
// (32 x 32 per warp at d128) and dK, dV 4 x 2 (32 x 64); 128 x 128 tiles 4 x 2 throughout: fewer
// shared bytes per MMA than 16-row strips (H200 bf16: 1.06-1.09x at d128, 1.01-1.04x at d64,
// bench/results/2026-11-27-h200-bwd-warps). d256's 64 x 64 tiles: dK, dV and dQ 2 x 4 (32 x 64 per
// warp instead of 16 x 128; FlashAttention-2's d256 layouts), the scores 4 x 2 (H200 bf16: 1.07-1.08x,
// bench/results/2026-11-29-h200-mma-sm90-flags).
struct BwdLayouts {
  int scores = 0, kv = 0, dq = 0;
};
BwdLayouts backward_layouts(const Problem& p, const TileConfig& c) {
  BwdLayouts l;
  if (c.warps == 8 && c.bm == 64 && c.bn == 128) l = {2, 4, 2};
  if (c.warps == 8 && c.bm == 128 && c.bn == 128) l = {4, 4, 4};
  if (c.warps == 8 && c.bm == 64 && c.bn == 64 && p.d_qk == p.d_v && p.d_qk > 128) l = {0, 2, 2};
  // a layout every tile of its role splits into (the lowering: rows a multiple of 16 x the warps along
  // M, columns of 16 x the warps along N); else that role keeps the default (e.g. dQ at d96 / d160:
  // 96 / 160 columns over 4 warps are not multiples of 16, over the default 2 they are)
  auto fits = [&](int rows, int cols, int wm) {
    if (wm == 0) return true;
    return c.warps % wm == 0 && rows % (16 * wm) == 0 && cols % (16 * (c.warps / wm)) == 0;
  };
  if (!fits(c.bm, c.bn, l.scores) || (!d_by_phase(p, c) && !fits(c.bm, p.d_v, l.scores))) l.scores = 0;
  if (!fits(c.bn, p.d_qk, l.kv) || !fits(c.bn, p.d_v, l.kv)) l.kv = 0;
  if (!fits(c.bm, p.d_qk, l.dq)) l.dq = 0;
  return l;
}

// Shared bytes of the backward's buffers: K, V (BN rows), Q, dO (BM rows), P and dS (BM, BN) in the
// storage dtype, LSE (BM) fp32; with D by a Phase its (BM) fp32 slot, else O (BM rows) and the scratch
// of D's row sum when the (BM, d) tiles are split over warps along N; each rounded to 128 bytes; plus
// the bias table's gradient (NB fp32, `aux_grad`).
int64_t backward_smem(const Problem& p, const TileConfig& c) {
  auto r = [](int64_t b) { return (b + 127) / 128 * 128; };
  const int64_t e = p.bytes();
  const int wm = backward_layouts(p, c).scores, wn = c.warps / (wm ? wm : warps_m(c.bm, c.warps));
  const bool phase = d_by_phase(p, c);
  const int64_t ring = std::max(1, c.stages);  // Q, dO (O), LSE (D): rings the loop fills one query tile ahead
  const int64_t slot = r(c.bm * p.d_qk * e) + r(c.bm * p.d_v * e) + r(c.bm * 4) + (phase ? r(c.bm * 4) : r(c.bm * p.d_v * e));
  return r(c.bn * p.d_qk * e) + r(c.bn * p.d_v * e) + ring * slot + 2 * r(c.bm * c.bn * e) +
         (!phase && wn > 1 ? r(int64_t(wn) * c.bm * 4) : 0) +
         (p.aux_grad && p.variants.relative_bias ? r(int64_t(*p.variants.relative_bias) * 4) : 0);
}

// The backward's tile rule for the mma.sync lowering (src/backend/bwd), by head dim; then the query
// tile's loads double-buffered where the shared memory takes it.
TileConfig backward_tiles(const Problem& p, const Target& t);
TileConfig backward_rule(const Problem& p, const Target& t) {
  TileConfig c = backward_tiles(p, t);
  TileConfig two = c;
  two.stages = 2;
  if (c.warps == 8 && std::max(p.d_qk, p.d_v) <= 128 && backward_smem(p, two) <= t.smem_per_block) {
    c.stages = 2;
    c.reason += "; the query tile's inputs in rings of 2 slots (`{stages: 2}`): query tile i + 1 loads during all of tile i, with no "
                "barrier before each load (H200 bf16: 1.01-1.03x one slot at d64 / d128; the A100's TL run on an H200 1.03-1.09x, "
                "bench/results/2026-11-29-h200-bwd-sm80; not measured for larger head dims, which keep one slot)";
  }
  return c;
}

// The transposed form (docs/planner.md, "The backward pass"): S^T = K Q^T with the keys along the
// rows, so P^T and dS^T are the register A operands of dV += P^T dO and dK += dS^T Q and only dS^T
// goes through shared memory (for dQ = dS K) — FlashAttention-3's orientation. On sm90 every GEMM of
// it is a wgmma (src/backend/bwd/wgmma.cc): 64 key rows per warpgroup, BN = 128 on two warpgroups;
// BM = 64 at d128 (dQ split along d, 64 columns per warpgroup) and 128 at d64 (dQ split along its
// rows); D = rowsum(dO * O) by a Phase (a row-wise kernel launched first) read like LSE. d_qk and d_v
// may differ (64 / 128 either way: BM = 64 where either is 128). Other head dims (MLA 192/128, d256)
// take the natural form (on wgmma where backward_natural_wgmma says so, else on mma.sync).
bool backward_transposed(const Problem& p, const Target& t) {
  return t.sm == 90 && (p.d_qk == 64 || p.d_qk == 128) && (p.d_v == 64 || p.d_v == 128);
}

// The natural form on wgmma (sm90, d256): S = Q K^T and dP = dO V^T split over the two warpgroups
// along the keys (32 each), P and dS through shared memory, dV += P^T dO, dK += dS^T Q and dQ = dS K
// split along d (each warpgroup its 128 columns of a 64-row tile): every GEMM a wgmma, dK / dV 64
// registers each a thread. The transposed form's dK, dV (64 key rows a warpgroup, all of d) would
// take 256 registers at d256, and its dQ halves of MLA's 192 columns do not start on a swizzle atom.
bool backward_natural_wgmma(const Problem& p, const Target& t) {
  return t.sm == 90 && ((p.d_qk == 256 && p.d_v == 256) || (p.d_qk == 192 && (p.d_v == 192 || p.d_v == 128)));
}

// BN = 128 where dK and dV of 128 key rows (64 a warpgroup, split along M) and dQ's half fit the
// registers (MLA 192/128: 96 + 64 + 48 a thread); else 64 key rows, dK and dV split along d too.
TileConfig backward_tiles_wgn(const Problem& p) {
  TileConfig c;
  c.warps = 8, c.bm = 64, c.bn = p.d_v <= 128 ? 128 : 64, c.stages = 2;
  const std::string dims = p.d_qk == p.d_v ? "d" + std::to_string(p.d_qk) : std::to_string(p.d_qk) + "/" + std::to_string(p.d_v);
  const bool narrow = (p.d_qk / 2) % 64 != 0 || (c.bn == 64 && (p.d_v / 2) % 64 != 0);
  c.reason = "backward " + dims + " on sm90, natural form on wgmma: BM=64, BN=" + std::to_string(c.bn) +
             ", S and dP split over two warpgroups along the keys, dQ along d" +
             (narrow ? " (its halves of " + std::to_string(p.d_qk / 2) + " columns read from tiles of the 64-byte swizzle)" : "") +
             ", P and dS through shared memory, Q, dO, LSE and D in rings of 2 slots; " +
             (c.bn == 128 ? "dK and dV 64 key rows a warpgroup (H200 bf16 MLA 192/128: 1.28-1.42x the natural form on mma.sync, "
                            "1.36-1.58x 64 key rows; bench/results/2026-11-30-h200-bwd-mla-wgmma)"
                          : "dK and dV split along d, 64 key rows (H200 bf16: d256 1.28-1.34x the natural form on mma.sync, "
                            "bench/results/2026-11-30-h200-bwd-d256-wgmma; d192 1.10-1.15x, bench/results/2026-11-30-h200-bwd-mla-wgmma)");
  return c;
}

TileConfig backward_tiles_t(const Problem& p) {
  TileConfig c;
  c.warps = 8, c.bn = 128, c.bm = std::max(p.d_qk, p.d_v) == 64 ? 128 : 64, c.stages = 2;
  const std::string dims = p.d_qk == p.d_v ? "d" + std::to_string(p.d_qk) : std::to_string(p.d_qk) + "/" + std::to_string(p.d_v);
  c.reason = "backward " + dims + " on sm90, transposed form (S^T = K Q^T, FlashAttention-3's orientation): " +
             "BN=128 keys on two warpgroups (64 rows of every product each), BM=" + std::to_string(c.bm) +
             " queries; every GEMM a wgmma (P^T and dS^T from registers), dS^T staged in shared memory for dQ; D = rowsum(dO * O) by "
             "a Phase before the main kernel (H200 bf16: 1.20-1.26x D in the loop at d128, 0.98-1.06x at d64; "
             "bench/results/2026-11-27-h200-bwd-phase); Q, dO, LSE and D in rings of 2 slots";
  return c;
}

TileConfig backward_tiles(const Problem& p, const Target& t) {
  TileConfig c;
  c.stages = 1;
  const int d = std::max(p.d_qk, p.d_v);
  c.warps = 8, c.bm = 128, c.bn = 128;
  if (d <= 64 && backward_smem(p, c) <= t.smem_per_block) {
    c.reason = "backward d" + std::to_string(d) + ": BM=BN=128 over 8 warps, every tile 4 x 2 warps (`{warps_m: 4}`; dS is read back "
               "from shared for dQ); H200 bf16: 1.10-1.12x the 64 x 128 tiles (bench/results/2026-11-27-h200-bwd-warps)";
    return c;
  }
  c.bm = 64;
  if (d <= 192 && backward_smem(p, c) <= t.smem_per_block) {
    c.reason = "backward d" + std::to_string(d) + ": BM=64, BN=128 over 8 warps (FlashAttention-2's sm80 shape): dK and dV (128 x d) "
               "4 x 2 warps, the (64, 128) scores and (64, d) tiles 2 x 4 (`{warps_m: N}`; dS is read back from shared for dQ)"
               "; twice the keys per block of 64 x 64 halve dQ's atomic adds and the Q/dO/O loads "
               "(H200 bf16: 1.23-1.27x the 64 x 64 tiles of 4 warps at d128, MLA 192/128 1.61-1.65x; "
               "bench/results/2026-11-27-h200-bwd-warps)";
    return c;
  }
  c.bn = 64;
  if (d > 128 && backward_smem(p, c) <= t.smem_per_block) {
    c.reason = "backward d" + std::to_string(d) + ": BM=BN=64 over 8 warps, the scores 4 x 2 warps (dS is read back from "
               "shared for dQ): dK and dV (64 x d) fit the registers without spills at d256 (H200 bf16: "
               "1.57x 4 warps at d256, 1.08x at MLA 192/128; bench/results/2026-11-27-h200-bwd-warps); at d256 dK, dV and dQ "
               "2 x 4 (`{warps_m: 2}`, FlashAttention-2's layouts: 1.07-1.08x; bench/results/2026-11-29-h200-mma-sm90-flags)";
    return c;
  }
  c.warps = 4, c.bn = 64;
  c.reason = "backward d" + std::to_string(d) + ": BM=BN=64 over 4 warps (16 rows each): " + t.name +
             "'s shared memory per block does not take the larger tiles of 8 warps (measured on H200s only)";
  return c;
}

std::string kernel_name_bwd(const Problem& p) {
  std::string n = "flash_bwd_";
  for (char ch : p.name) n += std::isalnum(static_cast<unsigned char>(ch)) ? char(std::tolower(static_cast<unsigned char>(ch))) : '_';
  if (p.name.empty()) n += "kernel";
  return n;
}

class BwdWriter {
 public:
  explicit BwdWriter(bool code) : code_(code) {}
  void line(const std::string& s) { out_ += std::string(depth_ * 2, ' ') + s + "\n"; }
  void comment(const std::string& s) { line("#" + s); }
  void blank() { out_ += "\n"; }
  void indent() { ++depth_; }
  void dedent() { --depth_; }
  bool code() const { return code_; }
  std::string text() const { return out_; }

 private:
  bool code_;
  std::string out_;
  int depth_ = 0;
};

std::string bwd_mask_name(const Problem& p) {
  using K = tl::MaskSpec::Kind;
  switch (p.mask) {
    case K::Causal: return "causal";
    case K::CausalTopLeft: return "causal_top_left";
    case K::Window: return "window(window_left, window_right)";
    default: return "none";
  }
}

// The query tiles that see key tile n_block (the loop's bounds), per mask.
std::string query_lo(const Problem& p) {
  using K = tl::MaskSpec::Kind;
  switch (p.mask) {
    case K::Causal: return "max(0, (n_block * BN + seqlen_q - seqlen_k) / BM)";
    case K::CausalTopLeft: return "n_block * BN / BM";
    case K::Window: return "max(0, (n_block * BN + seqlen_q - seqlen_k - window_right) / BM)";
    default: return "0";
  }
}
std::string query_hi(const Problem& p) {
  if (p.mask == tl::MaskSpec::Kind::Window)
    return "min(cdiv(seqlen_q, BM), ((n_block + 1) * BN - 1 + seqlen_q - seqlen_k + window_left) / BM + 1)";
  return "cdiv(seqlen_q, BM)";
}

// The main Grid's order (its first axis varies fastest, docs/translation.md): the query heads first
// for a causal MHA backward in Hopper's wgmma forms, so that the blocks of key tile 0, which walk the
// most query tiles, all run before any of tile 1 and the last wave holds the shortest blocks (H200
// bf16 kernel to kernel over the parent's programs, b16-b2 at s1k-s8k: d128 1.005-1.035x, softcap
// 1.009-1.040x, d64 1.021-1.029x, d256 1.007-1.030x, MLA 1.036-1.060x; b1 s16k 0.98-1.03x;
// bench/results/2026-12-01-h200-bwd-order). Not without a
// mask (the blocks' work is flat: 0.968-0.991x, the heads' shared query tiles leave L2), not for GQA /
// MQA (their fp32 dK / dV additions: h64/8 0.91-0.97x), not for prefix-LM or mask_mod (not measured) nor
// `{ordered}` additions. With causal documents too: a document's key tiles are not ordered by their
// work, but with the key tiles first the last wave held the last (head, batch) rows' uneven blocks, 52 us of SM tail
// at b4 s4k where the heads first leave 5 (d128 MHA: 1.014-1.032x over the key tiles first at s4k-s8k, 0.997x at s2k;
// bench/results/2026-12-01-h200-bwd-doc-loads).
bool heads_first_grid(const Problem& p, bool hopper_form) {
  using K = tl::MaskSpec::Kind;
  const spec::Variants& v = p.variants;
  const bool masks_ok = !v.any_mask() || (v.document && !v.prefix_lm && v.mask_mod.empty());
  return hopper_form && p.heads_q == p.heads_kv && (p.mask == K::Causal || p.mask == K::CausalTopLeft) && masks_ok &&
         !p.deterministic;
}

// One statement list for both stages: the sketch (no tiles) and the code.
std::string backward_text(const Problem& p, const Target& t, const TileConfig* tiles, bool tr, bool phase_d, bool wgn) {
  BwdWriter w(tiles != nullptr);
  const bool same_d = p.d_qk == p.d_v;
  const std::string dqk = same_d ? "d" : "d_qk", dv = same_d ? "d" : "d_v";
  const std::string st = tl::to_string(p.dtype);
  // dK and dV: stored once by the block that owns them (MHA) or added by the query heads of a kv head
  // (GQA / MQA: fp32 outputs, zero at launch).
  const bool accumulate_kv = p.heads_q != p.heads_kv;
  // the register tiles' warp layouts (the code only): `{warps_m: N}` on the statements that make them
  const BwdLayouts layouts = tiles && !tr && !wgn ? backward_layouts(p, *tiles) : BwdLayouts{};
  auto warps_attr = [](int n) { return n ? " {warps_m: " + std::to_string(n) + "}" : std::string(); };
  const std::string wq = warps_attr(layouts.scores), wk = warps_attr(layouts.kv), wdq = warps_attr(layouts.dq);
  const std::string dk_t = accumulate_kv ? "fp32" : st;
  const std::string kv_store = accumulate_kv ? " and accumulate" : "";
  if (w.code()) {
    w.comment(" TL code (stage 1b): " + p.name + " backward for sm" + std::to_string(t.sm) + " (" + t.name + ")");
    w.comment(" tiles: " + tiles->reason);
  } else {
    w.comment(" TL sketch (stage 1a): " + p.name + " backward");
    w.comment(" statements only: stage 1b adds Allocate, tile shapes, coordinates, loop bounds and Reshape");
  }
  w.line("Kernel " + kernel_name_bwd(p) + " backward with mask " + bwd_mask_name(p));
  const spec::Variants& var = p.variants;
  std::vector<std::string> decls = variant_declarations(p);
  const std::vector<std::string> scores = spec::score_order(var);
  // the spec's aux_grad: the fp32 input whose gradient a Score's `Compute Gradient` accumulates
  auto grad_input = [&](const std::string& score) -> std::string {
    if (!p.aux_grad) return "";
    return score == "alibi" ? "alibi_slopes" : score == "relpos" ? "rel_bias" : "";
  };
  // A score modification can make the rows past seqlen_q (zero-filled queries, LSE 0) overflow: P of
  // such a row is exp(modified score) and meets dO's zero rows as inf * 0. Those rows are hidden.
  if (!scores.empty()) decls.push_back("Mask query_rows = q_idx < seqlen_q");
  if (w.code()) {
    w.line("Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, " +
           (same_d ? "d = " + std::to_string(p.d_qk) : "d_qk = " + std::to_string(p.d_qk) + ", d_v = " + std::to_string(p.d_v)));
    w.line("Const BM = " + std::to_string(tiles->bm) + ", BN = " + std::to_string(tiles->bn) + ", WARPS = " + std::to_string(tiles->warps));
    if (var.relative_bias) w.line("Const NB = " + std::to_string(*var.relative_bias));
    if (phase_d) w.blank();
  }
  if (phase_d) {
    auto copy = [&](const std::string& name, const std::string& tile, const char* from, const char* to) {
      w.line("Copy " + name + (w.code() ? " " + tile : "") + " from " + from + " to " + to);
    };
    if (w.code()) w.comment(" D = rowsum(dO * O) once per query row: a kernel of its own over the query tiles, launched first");
    w.line("Phase dot_do_o");
    w.indent();
    if (w.code()) {
      w.line("Grid m = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch");
      w.line("Allocate O in global (seqlen_q, " + dv + ") " + st + " with offset [b, head]");
      w.line("Allocate dO in global (seqlen_q, " + dv + ") " + st + " with offset [b, head]");
      w.line("Allocate D in global (seqlen_q) fp32 with offset [b, head]");
      w.line("Allocate O in register (BM, " + dv + ") fp32");
      w.line("Allocate dO in register (BM, " + dv + ") fp32");
    }
    copy("O", "(BM, " + dv + ") in coordinate [m, 0]", "global", "register");
    copy("dO", "(BM, " + dv + ") in coordinate [m, 0]", "global", "register");
    w.line("Compute Multiply dO, O and get dOO");
    w.line("Compute RowSum dOO and get D");
    copy("D", "(BM) in coordinate [m]", "register", "global");
    w.dedent();
    w.line("end");
  }
  if (!w.code() && !decls.empty()) {
    w.comment(" variants: " + spec::describe(var));
    for (const auto& d : decls) w.line(d);
  }
  if (w.code()) {
    w.comment(" one block per key tile and query head; the loop walks the query tiles that see the key tile");
    if (heads_first_grid(p, tr || wgn)) {
      w.comment(" the heads first: every head's key tile 0 (its block walks the most query tiles) runs before any tile 1,");
      w.comment(" so the last wave holds the shortest blocks");
      w.line("Grid head = 0: heads_q, n_block = 0: cdiv(seqlen_k, BN), b = 0: batch");
    } else {
      w.line("Grid n_block = 0: cdiv(seqlen_k, BN), head = 0: heads_q, b = 0: batch");
    }
    w.line("Let kv_head = head / (heads_q / heads_kv)");
    w.blank();
    w.line("Allocate Q in global (seqlen_q, " + dqk + ") " + st + " with offset [b, head]");
    w.line("Allocate K in global (seqlen_k, " + dqk + ") " + st + " with offset [b, kv_head]");
    w.line("Allocate V in global (seqlen_k, " + dv + ") " + st + " with offset [b, kv_head]");
    w.line("Allocate O in global (seqlen_q, " + dv + ") " + st + " with offset [b, head]");
    w.line("Allocate dO in global (seqlen_q, " + dv + ") " + st + " with offset [b, head]");
    w.line("Allocate LSE in global (seqlen_q) fp32 with offset [b, head]");
    if (phase_d) w.line("Allocate D in global (seqlen_q) fp32 with offset [b, head]");
    w.comment(" dQ: every key block adds its share (fp32, zero at launch)");
    w.line("Allocate dQ in global (seqlen_q, " + dqk + ") fp32 with offset [b, head]");
    if (accumulate_kv)
      w.comment(" dK, dV: the heads_q / heads_kv query heads of a kv head add their shares (fp32, zero at launch)");
    w.line("Allocate dK in global (seqlen_k, " + dqk + ") " + dk_t + " with offset [b, kv_head]");
    w.line("Allocate dV in global (seqlen_k, " + dv + ") " + dk_t + " with offset [b, kv_head]");
    if (!decls.empty()) {
      w.comment(" variants: " + spec::describe(var) + " (docs/spec.md, Variants); the gradient passes through each Score by "
                "its derivative (Compute Derivative)");
      const std::vector<spec::AuxInput> aux = spec::aux_inputs(var);
      for (size_t i = 0; i < aux.size(); ++i) {
        std::string shape;
        for (const auto& dd : aux[i].shape) shape += (shape.empty() ? "" : ", ") + dd;
        w.comment(" aux[" + std::to_string(i) + "]: " + aux[i].meaning);
        w.line("Allocate " + aux[i].name + " in global (" + shape + ") " + (aux[i].is_int ? "int32" : "fp32"));
      }
      for (const auto& a : aux)  // the spec's aux_grad: the gradients of the fp32 inputs (Compute Gradient)
        if (p.aux_grad && !a.is_int) {
          std::string shape;
          for (const auto& dd : a.shape) shape += (shape.empty() ? "" : ", ") + dd;
          w.comment(" the gradient of " + a.name + " (fp32, zero at launch; daux[] of the C ABI): each block adds its sums");
          w.line("Allocate d" + a.name + " in global (" + shape + ") fp32");
        }
      for (const auto& d : decls) w.line(d);
    }
    w.line("Allocate K in shared (BN, " + dqk + ") " + st);
    w.line("Allocate V in shared (BN, " + dv + ") " + st);
    const std::string ring = tiles->stages > 1 ? " {stages: " + std::to_string(tiles->stages) + "}" : "";
    if (tiles->stages > 1) w.comment(" the query tile's inputs: rings of " + std::to_string(tiles->stages) + " slots, filled one tile ahead");
    w.line("Allocate Q in shared (BM, " + dqk + ") " + st + ring);
    w.line("Allocate dO in shared (BM, " + dv + ") " + st + ring);
    if (!phase_d) w.line("Allocate O in shared (BM, " + dv + ") " + st + ring);
    w.line("Allocate LSE in shared (BM) fp32" + ring);
    if (phase_d) w.line("Allocate D in shared (BM) fp32" + ring);
    if (!phase_d) {
      w.line("Allocate dO in register (BM, " + dv + ") " + st + wq);
      w.line("Allocate O in register (BM, " + dv + ") " + st + wq);
    }
    // the transposed form with 128 query columns on Hopper (d64): LSE and D read from their ring slot
    // where `St - LSE^T` and `dPt - D^T` use them, not held in 32 registers each across the products
    // (H200 bf16 d64: 116-124 B of spills -> none, 1.06-1.09x; bench/results/2026-11-30-h200-bwd-lazy-cols)
    const bool at_use = tr && t.sm == 90 && tiles->bm >= 128 && tiles->stages > 1 && phase_d;
    if (at_use) w.comment(" LSE and D read from shared memory where they are used (`{at_use}`): 32 registers each at BM = 128");
    w.line("Allocate LSE in register (BM) fp32" + wq + (at_use ? " {at_use}" : ""));
    if (phase_d) w.line("Allocate D in register (BM) fp32" + wq + (at_use ? " {at_use}" : ""));
    if (tr) {
      w.comment(" dS^T is read transposed by dQ = dS K: staged in shared memory");
      w.line("Allocate dStc in shared (BN, BM) " + st);
    } else {
      w.comment(" P and dS are read transposed (P^T dO, dS^T Q): staged in shared memory");
      w.line("Allocate Pc in shared (BM, BN) " + st);
      w.line("Allocate dSc in shared (BM, BN) " + st);
    }
    w.line("Allocate dK in register (BN, " + dqk + ") fp32 init 0" + wk);
    w.line("Allocate dV in register (BN, " + dv + ") fp32 init 0" + wk);
    w.blank();
  }
  auto copy = [&](const std::string& name, const std::string& tile, const char* from, const char* to, const std::string& tail = {}) {
    w.line("Copy " + name + (w.code() && !tile.empty() ? " " + tile : "") + " from " + from + " to " + to + tail);
  };
  copy("K", "(BN, " + dqk + ") in coordinate [n_block, 0]", "global", "shared");
  copy("V", "(BN, " + dv + ") in coordinate [n_block, 0]", "global", "shared");
  // whole query tiles the mask hides: the bounds (causal, window), and `{skip: NAME}` for a Mask with
  // an `empty when` clause (documents, prefix-LM, a mask_mod): the kernel never loads those tiles
  const std::string skip = skip_mask_name(p);
  w.line(w.code() ? "for i = " + query_lo(p) + ": " + query_hi(p) + (skip.empty() ? "" : " {skip: " + skip + "}") : "for i = 0: M");
  w.indent();
  copy("Q", "(BM, " + dqk + ") in coordinate [i, 0]", "global", "shared");
  copy("dO", "(BM, " + dv + ") in coordinate [i, 0]", "global", "shared");
  if (phase_d) {
    copy("LSE", "(BM) in coordinate [i]", "global", "shared");
    copy("D", "(BM) in coordinate [i]", "global", "shared");
    copy("LSE", "", "shared", "register");
  } else {
    copy("O", "(BM, " + dv + ") in coordinate [i, 0]", "global", "shared");
    copy("LSE", "(BM) in coordinate [i]", "global", "shared");
    copy("dO", "", "shared", "register");
    copy("O", "", "shared", "register");
    copy("LSE", "", "shared", "register");
    if (w.code()) w.comment(" D = rowsum(dO * O), first: dO and O are dead before the scores are live");
    w.line("Compute Multiply dO, O and get dOO");
    w.line("Compute RowSum dOO and get Di");
  }
  // The scores' scale, each Score (its input kept for the derivative: the chain rule) and the masks,
  // on the score tile `x` (`^T`: held transposed, keys along its rows)
  auto score_and_mask = [&](const std::string& x, const std::string& t) {
    const std::string at = w.code() ? " at [i, n_block]" : "";
    if (scores.empty()) {
      w.line("Compute Multiply " + x + ", softmax_scale * log2e");
    } else {
      w.line("Compute Multiply " + x + ", softmax_scale");
      for (size_t k = 0; k < scores.size(); ++k) {
        w.line("Compute Convert " + x + " and get " + x + std::to_string(k) + " fp32");
        w.line("Compute Modify " + x + t + at + " with " + scores[k]);
      }
      w.line("Compute Multiply " + x + ", log2e");
    }
    w.line("Compute Mask " + x + t + at + " with " + (p.mask == tl::MaskSpec::Kind::None ? std::string("bounds") : bwd_mask_name(p)));
    for (const auto& name : spec::mask_order(var)) w.line("Compute Mask " + x + t + at + " with " + name);
    if (!scores.empty()) w.line("Compute Mask " + x + t + at + " with query_rows");
  };
  if (tr) {
    // the transposed form: St = S^T (keys along the rows); the Mask, Modify and Derivative read it as
    // the (queries, keys) tile `St^T`, LSE and D broadcast down its columns (`LSE^T`)
    const std::string att = w.code() ? " at [i, n_block]" : "";
    w.line("Compute GEMM K, Q^T and get St");
    // dP^T next: on wgmma both products run while P^T is computed (the lowering waits for St only)
    w.line("Compute GEMM V, dO^T and get dPt");
    score_and_mask("St", "^T");
    if (w.code()) w.comment(" P^T recomputed from the forward's LSE (one value per column), in the exp2 domain");
    w.line("Compute Multiply LSE, log2e");
    w.line("Compute Subtract St, LSE^T and get Pt");
    w.line("Compute Exp2 Pt");
    w.line("Compute Convert Pt and get Ptc " + st);
    if (w.code()) w.line("Reshape Ptc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)");
    w.line("Compute GEMM Ptc, dO and accumulate dV");
    if (phase_d) {
      if (w.code()) w.comment(" D into registers where it is used: its columns are not live across the products");
      copy("D", "", "shared", "register");
    }
    w.line("Compute Subtract dPt, D^T and get dSt");
    w.line("Compute Multiply dSt, Pt");
    for (size_t k = scores.size(); k-- > 0;) {
      if (const std::string t = grad_input(scores[k]); !t.empty())
        w.line("Compute Gradient dSt^T, St" + std::to_string(k) + "^T and accumulate d" + t + att + " with " + scores[k]);
      w.line("Compute Derivative dSt^T, St" + std::to_string(k) + "^T" + att + " with " + scores[k]);
    }
    w.line("Compute Convert dSt and get dStc " + st);
    copy("dStc", "", "register", "shared");
    // dQ first: its atomic adds to global run while dK's product does
    w.line("Compute GEMM dStc^T, K and get dQ");
    if (w.code()) w.line("Reshape dStc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)");
    w.line("Compute GEMM dStc, Q and accumulate dK");
  } else {
    w.line("Compute GEMM Q, K^T and get S" + wq);
    // on wgmma dP's product runs while P is computed (the lowering waits for S only)
    if (wgn) w.line("Compute GEMM dO, V^T and get dP");
    const std::string at = w.code() ? " at [i, n_block]" : "";
    score_and_mask("S", "");
    if (w.code()) w.comment(" P recomputed from the forward's LSE, in the exp2 domain");
    w.line("Compute Multiply LSE, log2e");
    w.line("Compute Subtract S, LSE and get P");
    w.line("Compute Exp2 P");
    w.line("Compute Convert P and get Pc " + st);
    copy("Pc", "", "register", "shared");
    if (!wgn) w.line("Compute GEMM dO, V^T and get dP" + wq);
    if (phase_d) {
      if (w.code()) w.comment(" D into registers where it is used");
      copy("D", "", "shared", "register");
      w.line("Compute Subtract dP, D and get dS");
    } else {
      w.line("Compute Subtract dP, Di and get dS");
    }
    w.line("Compute Multiply dS, P");
    for (size_t k = scores.size(); k-- > 0;) {
      if (const std::string t = grad_input(scores[k]); !t.empty())
        w.line("Compute Gradient dS, S" + std::to_string(k) + " and accumulate d" + t + at + " with " + scores[k]);
      w.line("Compute Derivative dS, S" + std::to_string(k) + at + " with " + scores[k]);
    }
    w.line("Compute Convert dS and get dSc " + st);
    copy("dSc", "", "register", "shared");
    // dV's product after dS is stored (FlashAttention-2's order): one barrier makes P and dS visible
    // together, and P^T dO's fragments are not live beside dP and dS (the A100's d64 / d128 TL run on
    // an H200: 1.01-1.07x dV right after P's store, 1.01-1.05x with the rings, spills 8-40 B -> 0-8 B;
    // MLA 192/128 and d256 1.00-1.01x; bench/results/2026-11-29-h200-bwd-sm80)
    w.line("Compute GEMM Pc^T, dO and accumulate dV");
    w.line("Compute GEMM dSc^T, Q and accumulate dK");
    if (w.code() && (layouts.scores ? layouts.scores : warps_m(tiles->bm, tiles->warps)) < tiles->warps) {
      w.comment(" dS is split over warps along its columns: each warp reads its rows of it back from shared");
      copy("dSc", "", "shared", "register");
    } else if (w.code()) {
      w.line("Reshape dSc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)");
    }
    w.line("Compute GEMM dSc, K and get dQ" + wdq);
  }
  w.line("Compute Multiply dQ, softmax_scale");
  // deterministic: every addition into a tile in the blocks' order (`{ordered}`, the code only)
  const std::string ordered = w.code() && p.deterministic ? " {ordered}" : "";
  copy("dQ", "(BM, " + dqk + ") in coordinate [i, 0]", "register", "global", " and accumulate" + ordered);
  w.dedent();
  w.line("end");
  w.line("Compute Multiply dK, softmax_scale");
  const std::string kv_tail = kv_store + (accumulate_kv ? ordered : "");
  copy("dK", "(BN, " + dqk + ") in coordinate [n_block, 0]", "register", "global", kv_tail);
  copy("dV", "(BN, " + dv + ") in coordinate [n_block, 0]", "register", "global", kv_tail);
  return w.text();
}

}  // namespace

Budget backward_budget(const Problem& p, const Target& t, const TileConfig& c) {
  Budget b;
  b.smem_bytes = backward_smem(p, c);
  // every register tile of R rows (BM or BN) takes min(WARPS, R / 16) warps along M, the rest along
  // its columns (BN for the scores, d for the (BM, d) tiles)
  auto splits = [&](int rows, int cols) {
    if (rows <= 0 || rows % 16) return false;
    const int wm = warps_m(rows, c.warps);
    return c.warps % wm == 0 && rows % (16 * wm) == 0 && cols % (16 * (c.warps / wm)) == 0;
  };
  const bool rows = c.warps > 0 && c.warps <= 16 && c.bn > 0 && splits(c.bm, c.bn) && splits(c.bm, std::min(p.d_qk, p.d_v)) &&
                    splits(c.bn, std::min(p.d_qk, p.d_v));
  b.fits = rows && b.smem_bytes <= t.smem_per_block;
  if (!rows)
    b.why_not = "BM and BN must be multiples of 16 x a divisor of WARPS, and the columns of a tile split over warps along N "
                "multiples of 16 x those warps";
  else if (!b.fits)
    b.why_not = std::to_string(b.smem_bytes) + " bytes of shared memory per block, " + t.name + " has " +
                std::to_string(t.smem_per_block);
  b.blocks_per_sm = b.smem_bytes > 0 ? std::max<int64_t>(1, t.smem_per_sm / b.smem_bytes) : 1;
  return b;
}

std::optional<Plan> make_backward_plan(const spec::AttentionSpec& s, const hw::GpuFacts& g, support::DiagSink& diags,
                                       const PlanOptions& opts) {
  Plan plan;
  plan.problem = make_problem(s);
  plan.target = make_target(g);
  const Problem& p = plan.problem;
  const Target& t = plan.target;
  if (!hw::validate_for_gpu(s, g, diags)) return std::nullopt;
  if (p.dtype != tl::DType::F16 && p.dtype != tl::DType::BF16) {
    diags.error("PLAN0502", {}, std::string("the backward pass takes fp16 or bf16, not ") + tl::to_string(p.dtype),
                "use --dtype bf16 (training runs in 16-bit)");
    return std::nullopt;
  }
  if (t.sm < 80) {
    diags.error("PLAN0503", {}, "the backward pass is lowered for sm80 and newer (mma.sync m16n8k16, cp.async); " + t.name +
                                    " is sm" + std::to_string(t.sm),
                "plan for --gpu a100, l40s, h100 or h200");
    return std::nullopt;
  }
  const bool tr = opts.bwd_form == 2 || (opts.bwd_form == 0 && backward_transposed(p, t));
  // the natural form on wgmma unless the mma.sync form is asked for (--bwd-form natural-mma)
  const bool wgn = !tr && opts.bwd_form != 3 && backward_natural_wgmma(p, t);
  TileConfig tiles = tr ? backward_tiles_t(p) : wgn ? backward_tiles_wgn(p) : backward_rule(p, t);
  if (opts.bm) tiles.bm = opts.bm;
  if (opts.bn) tiles.bn = opts.bn;
  if (opts.warps) tiles.warps = opts.warps;
  if (opts.stages) tiles.stages = opts.stages;
  if (opts.bm || opts.bn || opts.warps || opts.stages) tiles.reason = "set by the user (--tiles)";
  Budget b = backward_budget(p, t, tiles);
  if (!b.fits) {
    diags.error("PLAN0102", {}, "backward tiles BM=" + std::to_string(tiles.bm) + " BN=" + std::to_string(tiles.bn) + " warps=" +
                                    std::to_string(tiles.warps) + " need " + std::to_string(b.smem_bytes) +
                                    " bytes of shared memory (" + t.name + ": " + std::to_string(t.smem_per_block) +
                                    ") and tile rows that are multiples of 16 * warps",
                "use smaller tiles (--tiles 64,64,4) or a smaller head dim");
    return std::nullopt;
  }
  plan.tiles = tiles;
  plan.budget = b;
  const bool phase_d = d_by_phase(p, tiles);
  if (phase_d && !tr && !(opts.bm || opts.bn || opts.warps || opts.stages))
    tiles.reason += "; D = rowsum(dO * O) by a Phase before the main kernel (H200 bf16: 1.07-1.11x D in the loop for MLA "
                    "192/128, d256 and this form at d128; bench/results/2026-11-27-h200-bwd-phase)";
  plan.tiles = tiles;
  plan.sketch = backward_text(p, t, nullptr, tr, phase_d, wgn);
  plan.code = backward_text(p, t, &tiles, tr, phase_d, wgn);
  support::DiagSink inner("code.tl");
  if (!check_written(plan.sketch, plan.code, inner)) {
    for (const auto& d : inner.all()) diags.add(d);
    if (p.variants.custom()) {
      diags.error("PLAN0302", {}, "the spec's score_mod / mask_mod does not check in the backward TL (see above)",
                  "a score_mod is differentiated symbolically: + - * / tanh exp exp2 log of score (abs, min, max, floor and "
                  "clamp of the score have no derivative everywhere)");
      return std::nullopt;
    }
    diags.error("PLAN0901", {}, "internal error: the rules engine wrote backward TL that fails verification",
                "please report this with the spec and the GPU");
    return std::nullopt;
  }
  plan.report = "# Plan: " + p.name + " backward on " + t.name + "\n\n" + "- tiles: BM=" + std::to_string(tiles.bm) +
                " BN=" + std::to_string(tiles.bn) + " warps=" + std::to_string(tiles.warps) + " (" + tiles.reason + ")\n" +
                "- shared memory: " + std::to_string(b.smem_bytes) + " bytes per block\n" +
                "- dK, dV: " + (p.heads_q != p.heads_kv ? "fp32, accumulated by the query heads of a kv head (GQA)" : "stored once per key tile (MHA)") +
                "; dQ: fp32, accumulated by every key block\n" +
                (heads_first_grid(p, tr || wgn)
                     ? "- blocks: the query heads first (`Grid head, n_block, b`): every head's key tile 0, the longest block of a "
                       "causal backward, runs before any tile 1 and the last wave holds the shortest (H200 bf16: 1.005-1.060x at "
                       "b16-b2, s1k-s8k; bench/results/2026-12-01-h200-bwd-order)" +
                       std::string(p.variants.document ? "; with documents, the key tiles first left the last (head, batch) rows' uneven blocks "
                                                         "to the last wave (52 us of SM tail at b4 s4k, 5 us with the heads first; "
                                                         "bench/results/2026-12-01-h200-bwd-doc-loads)"
                                                       : "") +
                       "\n"
                     : "- blocks: the key tiles first (`Grid n_block, head, b`)\n");
  return plan;
}

}  // namespace qattn::plan
