// qattn device runtime, Hopper (sm90a): the vocabulary the sm90 emitter (src/backend/sm90/emit.cc)
// composes a warp-specialised kernel from, one TL statement at a time. The shape is FlashAttention-3's
// and ThunderKittens': a producer warpgroup that loads (TMA into mbarrier rings), consumer warpgroups
// that compute (wgmma + the softmax in registers) and store, a tile scheduler.
//   sync.cuh       rings of shared buffers (Ring, RingPos), ping-pong, the persistent tile exchange
//   tma.cuh        tensor maps (host) and tile copies (device)
//   wgmma.cuh      shared-memory descriptors and the wgmma calls
//   tile.cuh       the consumer's register tiles and row vectors: the TL element-wise, row and
//                  conversion Computes, GEMM issue (gemm_ss, gemm_rs) and wait
//   score.cuh      the score stage: which queries a thread's rows hold, Mask, Modify, key tile order
//   scheduler.cuh  kernel parameters, work tiles, one block per tile or a persistent grid
//   epilogue.cuh   O through shared memory and TMA, row vectors (LSE)
#pragma once
#include <cstdint>
#include <initializer_list>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include "qattn/sm90/epilogue.cuh"
#include "qattn/sm90/scheduler.cuh"
#include "qattn/sm90/score.cuh"
#include "qattn/sm90/sync.cuh"
#include "qattn/sm90/tile.cuh"
#include "qattn/sm90/tma.cuh"
#include "qattn/sm90/wgmma.cuh"

namespace qattn::sm90 {

// The dynamic shared memory, 1024-byte aligned (the 128-byte swizzle repeats every 1024 bytes).
__device__ __forceinline__ unsigned char* smem_base() {
  extern __shared__ unsigned char smem_raw[];
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// TL `Role producer warpgroups 1 registers R` / `Role consumer ... registers R`: setmaxnreg (the
// kernel is __launch_bounds__(threads, 1), so the reallocation takes effect).
template <int R>
__device__ __forceinline__ void producer_registers() {
  cutlass::arch::warpgroup_reg_dealloc<R>();
}
template <int R>
__device__ __forceinline__ void consumer_registers() {
  cutlass::arch::warpgroup_reg_alloc<R>();
}

// The producer's tensor maps, fetched ahead of their first copy.
__device__ __forceinline__ void prefetch_maps(std::initializer_list<const CUtensorMap*> maps) {
  for (const CUtensorMap* m : maps) cute::prefetch_tma_descriptor(m);
}

// TL `Copy X (ROWS, COLS) in coordinate [r, 0] from global to shared {async}` (the producer warp):
// waits until ring slot pos is free, then the leader issues the TMA copy of rows row0 ..
// row0 + ROWS - 1 of (head, batch) into it; pos moves on.
template <int ROWS, int COLS, int S, int E, class Element>
__device__ __forceinline__ void load_tile(const Ring<S, E>& ring, RingPos& pos, const CUtensorMap* map, Element* base, int row0,
                                          int head, int batch, bool leader) {
  uint64_t* bar = ring.acquire(pos, tile_bytes<ROWS, COLS, Element>(), leader);
  if (leader) tma_load_tile<ROWS, COLS>(map, bar, ring.slot(base, pos), row0, head, batch);
  pos.advance(S);
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
