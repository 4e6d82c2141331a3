// Hopper (sm90a) kernel policy, in one place: the planner's resource model (plan/budget.cc), the TL
// writer (plan/tl_text.cc) and the sm90 lowering (backend/sm90/lower.cc) all call these, so the
// register split, the shared-memory formula and the tile rules cannot drift apart.
#pragma once
#include <cstdint>
#include <string>

namespace qattn::hw::sm90 {

// setmaxnreg per role (FlashAttention-3's split): 24 / 240 with 1-2 consumer warpgroups, 32 / 160
// with 3; a persistent grid's producer warp also runs the tile scheduler, which spills at 24, so
// 40 / 232 there. A paged KV cache's producer issues its copies from up to four warps that share
// the scheduler's tile index (load_tile_paged, TileExchange::share): 8 more there (it spilled at 24
// and at 40, ptxas -v; bench/results/2026-11-29-h200-paged-warps), the consumers giving up 8 where
// the roles' total needs it. That total must fit what the block's threads hold at launch
// (launch_registers).
struct RegisterSplit {
  int producer = 24, consumer = 240;
};
RegisterSplit register_split(int consumer_warpgroups, bool persistent, bool paged = false);
constexpr int kRegistersPerSm = 65536;
constexpr int kThreadsPerWarpgroup = 128;
// Registers per thread of a block of `warpgroups` warpgroups at launch: one block per SM, each
// thread 65536 / threads rounded down to the allocation unit of 8 (ptxas gives a kernel with
// setmaxnreg that many: 168 for 3 warpgroups), at most 256. setmaxnreg only moves these between the
// warpgroups: roles asking for more in total (128 x (producer + consumers x registers) above
// 128 x warpgroups x this) leave a consumer's setmaxnreg.inc waiting for ever, a hang
// (48 / 232 / 232 = 512 > 3 x 168: bench/results/2026-11-29-h200-paged-warps).
constexpr int launch_registers(int warpgroups, int64_t regs_per_sm = kRegistersPerSm) {
  const int r = int(regs_per_sm / (kThreadsPerWarpgroup * (warpgroups < 1 ? 1 : warpgroups)) / 8 * 8);
  return r < 256 ? r : 256;
}
constexpr int kRowsPerConsumer = 64;  // one consumer warpgroup owns 64 rows of the wgmma tile

// Shared memory of the kernel: the Q tile, `stages` slots of K and V, the O staging tile when it
// has its own (else it reuses Q's rows), 2 mbarriers per ring slot (Q, K, V), the persistent tile
// exchange, and 1024 bytes to align the base (the 128-byte swizzle repeats every 1024 bytes). Tiles
// are stored as column blocks of 64 elements, so head dims round up to 64.
struct SmemPlan {
  int64_t q = 0, k_slot = 0, v_slot = 0, o = 0, barriers = 0, total = 0;
};
constexpr int kAlignSlack = 1024;
constexpr int kTileExchangeBytes = 40;  // device/qattn/sm90/sync.cuh TileExchange::kBytes
constexpr int kDenseTilesBytes = 128;   // a ragged launch's 32 running tile counts (sm90/scheduler.cuh DenseTiles)
inline int padded_cols(int d) { return (d + 63) / 64 * 64; }
// O staged in Q's rows needs O no wider than Q: with d_v above d_qk (rounded up to 64) O has its own tile.
inline bool o_wider_than_q(int d_qk, int d_v) { return padded_cols(d_v) > padded_cols(d_qk); }
SmemPlan smem_plan(int bm, int bn, int d_qk, int d_v, int stages, int elem_bytes, bool separate_o, bool persistent);

// Why a tile shape cannot run on the sm90 kernel ("" when it can): BM a multiple of 64 up to 192
// (64-row consumer warpgroups, at most 3), BN a multiple of 16 up to 256 (the N of the S = Q K^T
// wgmma), head dims up to 256 with d_v a multiple of 8 (above d_qk too: O then stages in its own tile).
std::string tile_problem(int bm, int bn, int d_qk, int d_v, int split_columns = 1);

// Split columns (TL `Role consumer warpgroups N ... split columns`, DeepSeek's absorbed MLA: d_qk 576,
// d_v 512 as a view of K's first columns): N warpgroups share the BM = 64 rows; each holds BN / N
// score columns and d_v / N columns of O. Shared memory: Q, `stages` K slots (V is a view of them),
// the P tile (BM, BN) that the second GEMM reads, the warpgroups' row exchange, the barriers of Q's
// and K's rings, the persistent tile exchange and the alignment slack; O is staged in Q's rows.
constexpr int kSplitExchangeBytes = 2 * 2 * 64 * 4;  // 2 parities x 2 warpgroups x 64 rows of fp32 (1 KB: Q and 2 K stages
                                                      // of d 576 leave 2 KB of the 227 KB)
constexpr int kMaxSplitHeadDim = 576;                 // d_qk: DeepSeek's 512 latent + 64 rotary columns
SmemPlan smem_plan_split(int bm, int bn, int d_qk, int stages, int elem_bytes, bool persistent);
bool wgmma_n_ok(int n);  // a wgmma atom MMA_64xNx16 exists: N = 8..256 in steps of 8

}  // namespace qattn::hw::sm90
