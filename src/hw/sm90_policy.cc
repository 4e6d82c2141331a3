#include "hw/sm90_policy.h"

#include <algorithm>

namespace qattn::hw::sm90 {

RegisterSplit register_split(int consumer_warpgroups, bool persistent, bool paged) {
  if (consumer_warpgroups >= 3) return {32, 160};  // the paged producer does not spill at 32
  RegisterSplit s = persistent ? RegisterSplit{40, 232} : RegisterSplit{24, 240};
  if (paged) {
    s.producer += 8;
    const int pool = (1 + consumer_warpgroups) * launch_registers(1 + consumer_warpgroups);
    const int per_consumer = (pool - s.producer) / std::max(consumer_warpgroups, 1) / 8 * 8;
    s.consumer = std::min(s.consumer, per_consumer);
  }
  return s;
}

SmemPlan smem_plan(int bm, int bn, int d_qk, int d_v, int stages, int elem_bytes, bool separate_o, bool persistent) {
  SmemPlan p;
  p.q = int64_t(bm) * padded_cols(d_qk) * elem_bytes;
  p.k_slot = int64_t(bn) * padded_cols(d_qk) * elem_bytes;
  p.v_slot = int64_t(bn) * padded_cols(d_v) * elem_bytes;
  p.o = separate_o ? int64_t(bm) * padded_cols(d_v) * elem_bytes : 0;
  p.barriers = 16 * (1 + 2 * int64_t(stages)) + (persistent ? kTileExchangeBytes : 0);
  p.total = kAlignSlack + p.q + stages * (p.k_slot + p.v_slot) + p.o + p.barriers;
  return p;
}

SmemPlan smem_plan_split(int bm, int bn, int d_qk, int stages, int elem_bytes, bool persistent) {
  SmemPlan p;
  p.q = int64_t(bm) * padded_cols(d_qk) * elem_bytes;
  p.k_slot = int64_t(bn) * padded_cols(d_qk) * elem_bytes;
  p.v_slot = 0;  // a view of K's slot
  p.o = int64_t(bm) * padded_cols(bn) * elem_bytes + kSplitExchangeBytes;  // the P tile and the row exchange
  p.barriers = 16 * (1 + int64_t(stages)) + (persistent ? kTileExchangeBytes : 0);
  p.total = kAlignSlack + p.q + stages * p.k_slot + p.o + p.barriers;
  return p;
}

bool wgmma_n_ok(int n) { return n >= 8 && n <= 256 && n % 8 == 0; }

std::string tile_problem(int bm, int bn, int d_qk, int d_v, int split_columns) {
  if (split_columns > 1) {
    const int n = split_columns;
    if (bm != kRowsPerConsumer) return "split columns: BM = " + std::to_string(bm) + " (the warpgroups share the 64 rows of one wgmma tile: BM = 64)";
    if (n != 2 || bn % (16 * n) != 0 || !wgmma_n_ok(bn / n))
      return "split columns over " + std::to_string(n) + " warpgroups: BN = " + std::to_string(bn) + " is not " + std::to_string(n) +
             " score slices of a multiple of 16 columns";
    if (d_qk % 64 != 0 || d_qk > kMaxSplitHeadDim || d_v % (64 * n) != 0 || d_v > d_qk || !wgmma_n_ok(d_v / n))
      return "split columns: head dims (" + std::to_string(d_qk) + ", " + std::to_string(d_v) + ") are not lowered: d_qk a multiple of 64 up to " +
             std::to_string(kMaxSplitHeadDim) + ", d_v at most d_qk in " + std::to_string(n) + " slices of a multiple of 64 up to 256 columns";
    return "";
  }
  if (bm % kRowsPerConsumer != 0 || bm < 64 || bm > 192)
    return "BM = " + std::to_string(bm) + " rows cannot be split over 64-row consumer warpgroups (BM is 64, 128 or 192)";
  if (!wgmma_n_ok(bn) || bn % 16 != 0)
    return "BN = " + std::to_string(bn) + " is not a multiple of 16 up to 256 (the N of the S = Q K^T wgmma and the K of P V)";
  if (!wgmma_n_ok(d_v) || d_qk > 256 || d_qk < 16 || d_qk % 16 != 0)
    return "head dims (" + std::to_string(d_qk) + ", " + std::to_string(d_v) +
           ") are not lowered: d_qk a multiple of 16 up to 256, d_v a multiple of 8 up to 256";
  return "";
}

}  // namespace qattn::hw::sm90
