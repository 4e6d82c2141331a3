#include "plan/budget.h"

#include "hw/sm90_policy.h"

#include <algorithm>
#include <string>

namespace qattn::plan {

namespace {


int consumer_threads(const Target& t, const TileConfig& c) {
  if (t.sm >= 90) return c.consumer_wgs() * 128;  // one warpgroup per 64 rows (or sharing them); the producer is extra
  return c.warps * 32;
}

int elem_per_reg(const Problem& p) { return 4 / p.bytes(); }

}  // namespace

int register_cap(const Problem& p, const Target& t, const TileConfig& c) {
  if (t.sm < 90) return t.regs_per_thread;
  // setmaxnreg: the producer warpgroup keeps few registers and hands the rest to the consumers
  // (the sm90 policy's split, which the TL writer and the lowering use too).
  return hw::sm90::register_split(c.consumer_wgs(), c.persistent, p.kv_cache == spec::KvCache::Paged).consumer;
}

Budget estimate(const Problem& p, const Target& t, const TileConfig& c) {
  Budget b;
  const int eb = p.bytes();
  const int64_t q = int64_t(c.bm) * p.d_qk * eb;
  const int64_t kv = int64_t(c.bn) * (p.d_qk + p.d_v) * eb;
  const int64_t o_stage = t.sm >= 90 ? int64_t(c.bm) * p.d_v * 2 : 0;  // 16-bit output staging
  b.smem_bytes = std::max(q, o_stage) + int64_t(c.stages) * kv;
  // sm90: the kernel's own layout (hw/sm90_policy.h): tiles padded to 64 columns, the ring
  // mbarriers, the tile exchange, alignment; O staged in Q's tile (its smallest footprint), or in its
  // own where it is wider than Q (d_v > d_qk).
  if (t.sm >= 90 && c.bm > 0 && c.bn > 0 && c.stages > 0)
    b.smem_bytes = c.split_columns > 1 ? hw::sm90::smem_plan_split(c.bm, c.bn, p.d_qk, c.stages, eb, c.persistent).total
                                       : hw::sm90::smem_plan(c.bm, c.bn, p.d_qk, p.d_v, c.stages, eb,
                                                             hw::sm90::o_wider_than_q(p.d_qk, p.d_v), c.persistent).total;

  // Alignment first: a misaligned configuration is not a configuration.
  const int kgran = (p.dtype == tl::DType::F8E4M3 || p.dtype == tl::DType::F8E5M2) ? 32 : 16;
  if (c.bm <= 0 || c.bn <= 0 || c.warps <= 0 || c.stages <= 0) {
    b.why_not = "tile sizes, warps and stages must be positive";
    return b;
  }
  if (p.d_qk % kgran != 0 || p.d_v % kgran != 0) {
    b.why_not = "head dims " + std::to_string(p.d_qk) + "/" + std::to_string(p.d_v) + " are not multiples of " +
                std::to_string(kgran) + " (the MMA K granularity for this dtype)";
    return b;
  }
  if (c.bn % kgran != 0) {
    b.why_not = "BN=" + std::to_string(c.bn) + " is not a multiple of " + std::to_string(kgran) +
                " (BN is the K dimension of the P*V GEMM)";
    return b;
  }
  if (t.sm >= 90) {
    if (p.v_from_k != (c.split_columns > 1)) {
      b.why_not = p.v_from_k ? "V as a view of K is lowered with split-columns consumers only" : "split columns need V as a view of K";
      return b;
    }
    if (const std::string why = hw::sm90::tile_problem(c.bm, c.bn, p.d_qk, p.d_v, c.split_columns); !why.empty()) {
      b.why_not = why;
      return b;
    }
    if (c.warps != 4 * (c.consumer_wgs() + 1)) {
      b.why_not = "warps must be 4 per consumer warpgroup plus one producer warpgroup";
      return b;
    }
  } else if (c.bm % (16 * c.warps) != 0) {
    b.why_not = "BM=" + std::to_string(c.bm) + " is not a multiple of 16 x " + std::to_string(c.warps) +
                " warps (mma.sync gives each warp 16-row slices)";
    return b;
  }

  // Registers per consumer thread.
  const int threads = consumer_threads(t, c);
  const int o_acc = c.bm * p.d_v / threads;
  const int s_acc = c.bm * c.bn / threads;
  int regs = 0;
  if (t.sm >= 90) {
    const int p_regs = s_acc / elem_per_reg(p);
    regs = o_acc + s_acc + p_regs + 24;
  } else {
    regs = o_acc + s_acc + 16 + 40;
  }
  b.regs_per_thread = regs;

  if (b.smem_bytes > t.smem_per_block) {
    b.why_not = "needs " + kb(b.smem_bytes) + " of shared memory (Q " + kb(q) + " + " + std::to_string(c.stages) +
                " x K/V " + kb(kv) + "), the GPU allows " + kb(t.smem_per_block) + " per block";
    return b;
  }
  const int cap = register_cap(p, t, c);
  if (regs > cap) {
    b.why_not = "needs about " + std::to_string(regs) + " registers per thread (O " + std::to_string(o_acc) + " + S " +
                std::to_string(s_acc) + " + operands), the cap is " + std::to_string(cap);
    return b;
  }
  // Registers held by one block: on sm90 setmaxnreg gives each consumer warpgroup the cap and the
  // producer warpgroup its share of the split (24-48 per thread); elsewhere every thread holds its
  // estimate.
  const int64_t reg_block = t.sm >= 90 ? int64_t(threads) * cap + 128 * hw::sm90::register_split(c.consumer_wgs(), c.persistent, p.kv_cache == spec::KvCache::Paged).producer
                                       : int64_t(c.warps) * 32 * regs;
  int by_smem = static_cast<int>(t.smem_per_sm / std::max<int64_t>(b.smem_bytes, 1));
  int by_regs = static_cast<int>(t.regs_per_sm / std::max<int64_t>(reg_block, 1));
  b.blocks_per_sm = std::min(by_smem, by_regs);
  if (b.blocks_per_sm < 1) {
    b.why_not = "one block needs more registers (" + std::to_string(reg_block) + ") than an SM has";
    return b;
  }
  b.fits = true;
  return b;
}

std::vector<Candidate> enumerate_candidates(const Problem& p, const Target& t) {
  std::vector<Candidate> out;
  const std::vector<int> bms = t.sm >= 90 ? std::vector<int>{64, 128, 192} : std::vector<int>{64, 128};
  for (int bm : bms) {
    for (int bn = 16; bn <= 256; bn += 16) {
      std::vector<int> warp_opts;
      if (t.sm >= 90) {
        warp_opts = {4 * (bm / 64 + 1)};
      } else {
        warp_opts = {4, 8};
      }
      for (int warps : warp_opts) {
        for (int stages : {1, 2}) {
          TileConfig c{bm, bn, warps, stages, "enumerated"};
          Budget b = estimate(p, t, c);
          if (!b.fits) continue;
          // Score: tile area (work per K/V byte loaded) times blocks in flight, lightly preferring
          // two stages on architectures with asynchronous copies.
          double score = double(bm) * bn * std::min(b.blocks_per_sm, 2);
          if (stages == 2 && (t.cp_async || t.tma)) score *= 1.1;
          out.push_back(Candidate{c, b, score});
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  return out;
}

TileConfig smallest_candidate(const Problem& p, const Target& t) {
  if (t.sm >= 90) return TileConfig{64, 16, 8, 1, "smallest"};
  return TileConfig{64, 16, 4, 1, "smallest"};
}

}  // namespace qattn::plan
