// qattn device runtime, Hopper (sm90a): the vocabulary the sm90 emitter (src/backend/sm90/emit.cc)
// composes a warp-specialised kernel from, one TL statement at a time. The shape is FlashAttention-3's
// and ThunderKittens': a producer warpgroup that loads (TMA into mbarrier rings), consumer warpgroups
// that compute (wgmma + the softmax in registers) and store, a tile scheduler.
//   ptx.cuh        the PTX instructions, each wrapped once (mbarrier, named barriers, fences,
//                  setmaxnreg, TMA); no CuTe / CUTLASS anywhere in a Hopper forward kernel
//   sync.cuh       rings of shared buffers (Ring, RingPos), ping-pong, the persistent tile exchange
//   tma.cuh        tile copies (the tensor maps: tensor_map.h, host)
//   wgmma.cuh      shared-memory descriptors, fences, commit / wait; the atoms: wgmma_atoms.cuh
//   tile.cuh       the consumer's register tiles and row vectors: the TL element-wise, row and
//                  conversion Computes, GEMM issue (gemm_ss, gemm_rs) and wait
//   score.cuh      the score stage: which queries a thread's rows hold, Mask, Modify, key tile order
//   scheduler.cuh  work tiles, one block per tile or a persistent grid (the parameters: params.h)
//   epilogue.cuh   O through shared memory and TMA, row vectors (LSE)
//   split.cuh      `split columns` consumers: rows combined, P staged, O += P V from a view of K
#pragma once
#include <cstdint>
#include <initializer_list>

#include "qattn/sm90/epilogue.cuh"
#include "qattn/sm90/ptx.cuh"
#include "qattn/sm90/scheduler.cuh"
#include "qattn/sm90/split.cuh"
#include "qattn/sm90/score.cuh"
#include "qattn/sm90/sync.cuh"
#include "qattn/sm90/tile.cuh"
#include "qattn/sm90/tma.cuh"
#include "qattn/sm90/wgmma.cuh"

namespace qattn::sm90 {

// The dynamic shared memory, 1024-byte aligned (wgmma.cuh smem_aligned: the 128-byte swizzle repeats
// every 1024 bytes, and accesses through it stay LDS / STS).
__device__ __forceinline__ unsigned char* smem_base() { return reinterpret_cast<unsigned char*>(smem_aligned()); }

// TL `Role producer warpgroups 1 registers R` / `Role consumer ... registers R`: setmaxnreg (the
// kernel is __launch_bounds__(threads, 1), so the reallocation takes effect).
template <int R>
__device__ __forceinline__ void producer_registers() {
  ptx::regs_dealloc<R>();
}
template <int R>
__device__ __forceinline__ void consumer_registers() {
  ptx::regs_alloc<R>();
}

// The producer's tensor maps, fetched ahead of their first copy.
__device__ __forceinline__ void prefetch_maps(std::initializer_list<const CUtensorMap*> maps) {
  for (const CUtensorMap* m : maps) ptx::tma_prefetch_map(m);
}

// TL `Copy X (ROWS, COLS) in coordinate [r, 0] from global to shared {async}` (the producer warp):
// waits until ring slot pos is free, then the leader issues the TMA copy of rows row0 ..
// row0 + ROWS - 1 of (head, batch) into it; pos moves on. `stream`: a TL `{stream}` copy on a launch
// that streams K / V (Params::kv_stream): an L2 evict-first hint.
template <int ROWS, int COLS, int S, int E, class Element>
__device__ __forceinline__ void load_tile(const Ring<S, E>& ring, RingPos& pos, const CUtensorMap* map, Element* base, int row0,
                                          int head, int batch, bool leader, bool stream = false) {
  uint64_t* bar = ring.acquire(pos, tile_bytes<ROWS, COLS, Element>(), leader);
  if (leader) tma_load_tile<ROWS, COLS>(map, bar, ring.slot(base, pos), row0, head, batch, stream);
  pos.advance(S);
}
// How many producer warps issue the copies of a paged ROWS-row tile: one per page it has, at most
// kWarps (pages divide the tile or the tile divides a page). The producer's warps past it return.
template <int ROWS, int kWarps>
__device__ __forceinline__ int paged_producer_warps(int page_size) {
  const int pages = page_size < ROWS ? ROWS / page_size : 1;
  return pages < kWarps ? pages : kWarps;
}
// A K / V tile of a paged KV cache (TL {paged}): rows row0 .. row0 + ROWS - 1 of the sequence whose
// block table row is `table`, one box of min(page_size, ROWS) rows per page (the map's box; pages
// divide the tile or the tile divides a page, make_params checks it). A copy takes its operands from
// uniform registers, so the boxes of one warp's lanes are issued one lane after the other: with the
// 8 pages (16 boxes) of a 128-row tile of 16-row pages, one warp issuing them all was the paged
// loads' limit (bench/results/2026-11-29-h200-paged-issue). So the producer's kWarps warps share the
// pages: page i to warp i mod `warps`, lane i / `warps`, with `warps` (at most kWarps) the number
// of pages a tile has (paged_producer_warps; the producer's other warps have returned: with pages of
// a tile or more, one warp: the emitted producer loop is then compiled with kWarps = 1, exactly the
// single-warp loop; the run-time warp count had cost up to 2.4% on short caches,
// bench/results/2026-11-29-h200-paged-single-warp). Every one of them waits for the
// slot and syncs, also those without a page in this tile (each use of a slot needs all of them, so
// none can be two phases behind the slot's barriers). Only the leader's warp copies Q and talks to the consumers
// through the tile exchange (TileExchange::share, Scheduler::exchange_warp): a slower warp waiting on
// those barriers could find them a phase further on, the hang of bench/results/2026-11-29-h200-paged16.
// Everything a lane's (first) box needs is ready before the wait for the slot: the block-table read,
// and the page and in-page row (two integer divisions by the run-time page size, about 30 dependent
// instructions), so that their latency runs under the wait instead of between the slot coming free
// and the copy. The leader sets the bytes the full barrier expects; the producer warps then sync (the
// warp, or named barrier kBarProducer) so that no copy lands before that. A page past the sequence's
// `rows` keys is not looked up: its box coordinate is num_pages, out of range, so the copy engine
// zero-fills it and still counts its bytes.
template <int ROWS, int COLS, int kWarps = 1, int S, int E, class Element>
__device__ __forceinline__ void load_tile_paged(const Ring<S, E>& ring, RingPos& pos, const CUtensorMap* map, Element* base,
                                                int row0, int head, const int* table, int page_size, int rows,
                                                int num_pages, bool leader, int warps = 1, bool stream = false) {
  const int box = page_size < ROWS ? page_size : ROWS;
  const int lane = int(threadIdx.x % 32), warp = kWarps > 1 ? int(threadIdx.x / 32) : 0;
  if constexpr (kWarps == 1) warps = 1;
  const int first = (lane * warps + warp) * box, step = 32 * warps * box;
  const int row = row0 + first, page_of_row = row / page_size, in_page = row - page_of_row * page_size;
  const int page0 = first < ROWS && row < rows ? __ldg(table + page_of_row) : num_pages;
  asm volatile("" ::"r"(in_page), "r"(page0));  // computed here: not sunk past the wait below
  uint64_t* bar = ring.acquire(pos, tile_bytes<ROWS, COLS, Element>(), leader);
  if (kWarps > 1 && warps > 1) ptx::bar_sync(kBarProducer, 32 * warps);  // the expected bytes are set before any copy lands
  else __syncwarp();
  Element* slot = ring.slot(base, pos);
  if (first < ROWS) tma_load_rows<ROWS, COLS>(map, bar, slot, first, in_page, head, page0, stream);
  for (int r = first + step; r < ROWS; r += step) {  // more pages than the warps' lanes (pages below ROWS / (32 warps) rows)
    const int rr = row0 + r;
    const int page = rr < rows ? __ldg(table + rr / page_size) : num_pages;
    tma_load_rows<ROWS, COLS>(map, bar, slot, r, rr % page_size, head, page, stream);
  }
  pos.advance(S);
}

// Rows `first` .. ROWS - 1 of a (ROWS, COLS) swizzled tile zeroed by the 128 threads of consumer
// warpgroup `wg` (a KV cache's V tile past the sequence's key count: the cache may hold anything
// there, NaN included, and P V multiplies it by P = 0). A row's 128-byte lines are whole in every
// column block, so the swizzle does not matter. The writes are fenced for wgmma (the async proxy)
// and the warpgroup syncs; both consumer warpgroups write the same zeros before either releases the
// slot. `first` is uniform across the warpgroup.
template <int ROWS, int COLS, class Element>
__device__ __forceinline__ void zero_rows_from(Element* tile, int first, int tid, int wg) {
  if (first >= ROWS) return;
  first = first < 0 ? 0 : first;
  constexpr int kBlocks = (COLS + 63) / 64;
  uint4* chunks = reinterpret_cast<uint4*>(tile);
  const int per_block = (ROWS - first) * 8;  // 16-byte chunks: 8 per 128-byte line
  for (int i = tid; i < kBlocks * per_block; i += 128)
    chunks[(i / per_block) * ROWS * 8 + first * 8 + i % per_block] = make_uint4(0u, 0u, 0u, 0u);
  ptx::fence_async_shared();
  ptx::bar_sync(kBarTailBase + wg, 128);
}

// The same through a packed (TL {pack}) 5-D map: row0 counts packed rows, `head` is the head group.
template <int ROWS, int COLS, int S, int E, class Element>
__device__ __forceinline__ void load_tile_packed(const Ring<S, E>& ring, RingPos& pos, const CUtensorMap* map, Element* base,
                                                 int row0, int head, int batch, bool leader, int pack) {
  uint64_t* bar = ring.acquire(pos, tile_bytes<ROWS, COLS, Element>(), leader);
  if (leader) tma_load_packed<ROWS, COLS>(map, bar, ring.slot(base, pos), row0, head, batch, pack);
  pos.advance(S);
}

}  // namespace qattn::sm90
