// The rules engine's combine step (docs/planner.md, "The combine step"; docs/tl.md, "Combining
// partial results"): a spec -> the TL sketch and TL code of the kernel that merges the partial
// results of a split over the keys (FlashDecoding's second kernel; the ring's merge) by their LSE.
// One statement list for both stages, parsed, checked and compared with its sketch like the
// forward's; plan::verify interprets it against the fp64 merge.
#include <cctype>

#include "hw/target.h"
#include "plan/plan.h"
#include "plan/sketch.h"

namespace qattn::plan {
namespace {

// Rows per block and warps: a row's d_v values go over the 32 lanes of a warp (runs of up to 4
// consecutive columns); measured on an H200 (bench/results/2026-11-26-h200-combine, combine_tiles):
// at one query row, blocks of one warp and one row beat 4-row blocks by 1.1-2.3x (the grid is
// batch x heads blocks either way; idle warps only cost); at 4096 rows, 4 rows per warp (four loads in
// flight per lane) beat one row per warp by 2.2x and 4 warps of one row each by 1.45x. The parts loop
// of the decoding merge in blocks of 16 (`{unroll: 16}`: the split's largest count, 16, in one block of
// loads, fewer parts in one block of each power of two below): the 16-part merge of one token 2.47 us
// on an H200 against 2.68 in blocks of 8 and 6.08 with the rolled remainder and branchy loads before
// (bench/results/2026-11-29-h200-combine-loads); no unroll on the 4-row tiling (slower there with the
// old loads, bench/results/2026-11-26-h100-combine-unroll).
TileConfig combine_rule(const Problem& p) {
  TileConfig c;
  c.bn = 0;
  c.warps = 1;
  c.stages = 1;
  const std::string dv = "d_v " + std::to_string(p.d_v) + " over the 32 lanes";
  if (p.seqlen_q > 0 && p.seqlen_q <= 64) {
    c.bm = 1;
    c.unroll = 16;
    c.reason = "combine of short query sequences (seqlen_q " + std::to_string(p.seqlen_q) + " <= 64: decoding's key split): one row per "
               "block of one warp (" + dv + "); batch x heads x seqlen_q blocks; the parts loop in blocks of 16 (up to 16 parts' "
               "loads in flight: the 16-part merge 2.5x faster than one part at a time)";
  } else {
    c.bm = 4;
    c.reason = "combine of long query sequences (seqlen_q " + (p.seqlen_q > 0 ? std::to_string(p.seqlen_q) : std::string("not stated")) +
               "): 4 rows per block of one warp (" + dv + "), four rows' loads in flight per lane";
  }
  return c;
}

std::string kernel_name_combine(const Problem& p) {
  std::string n = "combine_";
  for (char ch : p.name) n += std::isalnum(static_cast<unsigned char>(ch)) ? char(std::tolower(static_cast<unsigned char>(ch))) : '_';
  if (p.name.empty()) n += "kernel";
  return n;
}

// The merge, online like the forward's softmax: a running max m of the parts' LSEs, the running sum
// l of exp(LSE_part - m), O rescaled by exp(m_old - m_new) whenever m grows.
std::string combine_text(const Problem& p, const Target& t, const TileConfig* tiles) {
  const bool code = tiles != nullptr;
  const std::string dt = tl::to_string(p.out_dtype);  // the forward's O: each part's output
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  if (code) {
    line("# TL code (stage 1b): " + p.name + " combine for sm" + std::to_string(t.sm) + " (" + t.name + ")");
    line("# tiles: " + tiles->reason);
  } else {
    line("# TL sketch (stage 1a): " + p.name + " combine");
    line("# statements only: stage 1b adds Allocate, tile shapes, coordinates and the loop bounds");
  }
  line("Kernel " + kernel_name_combine(p) + " combine");
  if (code) {
    line("Dim batch, heads_q, seqlen_q, splits, d_v = " + std::to_string(p.d_v));
    line("Const BM = " + std::to_string(tiles->bm) + ", WARPS = " + std::to_string(tiles->warps));
    line("# one block per BM query rows of a head; the loop walks the parts");
    line("Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch");
    line("");
    line("Allocate O in global (seqlen_q, d_v) " + dt + " with offset [b, head]");
    line("Allocate LSE in global (seqlen_q) fp32 with offset [b, head]");
    line("Allocate O in register (BM, d_v) fp32 init 0");
    line("Allocate m in register (BM) fp32 init -inf");
    line("Allocate l in register (BM) fp32 init 0");
    line("");
  }
  line(code ? "for s = 0: splits" + (tiles->unroll > 1 ? " {unroll: " + std::to_string(tiles->unroll) + "}" : std::string())
             : "for s = 0: S");
  const std::string in = "  ";
  if (code) {
    line(in + "Allocate O_part in global (seqlen_q, d_v) " + dt + " with offset [b, s, head]");
    line(in + "Allocate LSE_part in global (seqlen_q) fp32 with offset [b, s, head]");
    line(in + "Allocate O_part in register (BM, d_v) fp32");
    line(in + "Allocate LSE_part in register (BM) fp32");
    line(in + "Copy O_part (BM, d_v) in coordinate [m_block, 0] from global to register");
    line(in + "Copy LSE_part (BM) in coordinate [m_block] from global to register");
  } else {
    line(in + "Copy O_part from global to register");
    line(in + "Copy LSE_part from global to register");
  }
  line(in + "Compute Max m, LSE_part and get m_new");
  line(in + "Compute Subtract m, m_new and get alpha");
  line(in + "Compute Exp alpha");
  line(in + "Compute Subtract LSE_part, m_new and get w");
  line(in + "Compute Exp w");
  line(in + "Compute Rescale l, alpha");
  line(in + "Compute Add l, w");
  line(in + "Compute Rescale O, alpha");
  line(in + "Compute Rescale O_part, w");
  line(in + "Compute Add O, O_part");
  line(in + "Compute Max m, m_new");
  line("end");
  line("Compute Normalize O, l");
  line("Compute Log l and get LSE");
  line("Compute Add LSE, m");
  line(code ? "Copy O (BM, d_v) in coordinate [m_block, 0] from register to global" : "Copy O from register to global");
  line(code ? "Copy LSE (BM) in coordinate [m_block] from register to global" : "Copy LSE from register to global");
  return o;
}

}  // namespace

std::optional<Plan> make_combine_plan(const spec::AttentionSpec& s, const hw::GpuFacts& g, support::DiagSink& diags,
                                      const PlanOptions& opts) {
  Plan plan;
  plan.problem = make_problem(s);
  plan.target = make_target(g);
  const Problem& p = plan.problem;
  const Target& t = plan.target;
  if (!hw::validate_for_gpu(s, g, diags)) return std::nullopt;
  if (p.d_v % 32 != 0 || p.d_v > 1024) {
    diags.error("PLAN0601", {}, "the combine deals a row of d_v = " + std::to_string(p.d_v) + " values to the 32 lanes of a warp",
                "the combine is planned for head dims that are multiples of 32 (64, 96, 128, 192, 256, 512)");
    return std::nullopt;
  }
  TileConfig tiles = combine_rule(p);
  if (opts.bm) tiles.bm = opts.bm;
  if (opts.warps) tiles.warps = opts.warps;
  if (opts.bm || opts.warps) tiles.reason = "set by the user (--tiles)";
  if (tiles.bm < 1 || tiles.bm > 64 || tiles.warps < 1 || tiles.warps > 16 || tiles.bm % tiles.warps != 0) {
    diags.error("PLAN0102", {}, "combine rows BM=" + std::to_string(tiles.bm) + " over " + std::to_string(tiles.warps) +
                                    " warps: the rows (at most 64) are a multiple of the warps (1 to 16)",
                "use --tiles 4,0,4 (BM, unused, warps)");
    return std::nullopt;
  }
  plan.tiles = tiles;
  plan.budget.smem_bytes = 0;
  plan.budget.fits = true;
  plan.budget.blocks_per_sm = std::max(1, 2048 / (32 * tiles.warps));
  plan.sketch = combine_text(p, t, nullptr);
  plan.code = combine_text(p, t, &tiles);
  support::DiagSink inner("code.tl");
  if (!check_written(plan.sketch, plan.code, inner)) {
    for (const auto& d : inner.all()) diags.add(d);
    diags.error("PLAN0901", {}, "internal error: the rules engine wrote combine TL that fails verification",
                "please report this with the spec and the GPU");
    return std::nullopt;
  }
  plan.report = "# Plan: " + p.name + " combine on " + t.name + "\n\n" + "- tiles: BM=" + std::to_string(tiles.bm) +
                " warps=" + std::to_string(tiles.warps) + (tiles.unroll > 1 ? " unroll=" + std::to_string(tiles.unroll) : std::string()) +
                " (" + tiles.reason + ")\n" +
                "- O_part and O: " + tl::to_string(p.out_dtype) + " (the forward's output dtype); LSE_part and LSE: fp32\n" +
                "- merge: online over the parts (running max of the LSEs, weights exp(LSE_part - m)); a row with every "
                "part empty gives O = 0, LSE = -inf\n";
  return plan;
}

}  // namespace qattn::plan
