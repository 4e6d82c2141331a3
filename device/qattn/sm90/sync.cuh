// qattn device runtime, Hopper (sm90a): the synchronisation pieces of the TL schedule.
//   TL `Allocate X in shared ... {stages: N}` + `Copy X ... {async}` + `{wait: X}` / `{release: X}`
//   lower to a ring of N slots, each guarded by two mbarriers: `full` (the producer's TMA copy
//   landed: one arrive with the expected byte count) and `empty` (every consumer warpgroup is done
//   with the slot: one arrive per consumer warpgroup). The producer waits on `empty` with the
//   opposite parity (a fresh barrier counts as "previous phase complete"), so the first N copies
//   never wait.
//   TL `Role consumer ... pingpong` lowers to two named barriers that hand the tensor cores from
//   one consumer warpgroup to the other (see `Pingpong`).
// The mbarrier and named-barrier instructions are CUTLASS's wrappers (cutlass/arch/barrier.h).
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

namespace qattn::sm90 {

using FullBarrier = cutlass::arch::ClusterTransactionBarrier;  // TMA completion: arrive + tx bytes
using EmptyBarrier = cutlass::arch::ClusterBarrier;            // consumer release

// One ring of N slots: slot and parity of the k-th use.
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++slot == stages) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

// Named barrier ids: 0 is __syncthreads; 1..6 are ours (epilogue: one per consumer warpgroup).
enum : int { kBarPingpongBase = 1, kBarEpilogueBase = 3, kBarTile = 6 };

// TL Grid `{persistent}`: the producer warp hands the block's k-th tile index to the consumer
// warpgroups in shared slot k mod 2 and all of them meet at one named barrier (a full sync of the
// producer warp and the consumers, so the slot is rewritten only after every consumer has read
// it). The producer publishes after issuing the tile's first copies, so they overlap the previous
// tile's end; its last index (>= num_tiles) means "no more tiles".
template <int kConsumers>
struct TileExchange {
  static constexpr int kThreads = 32 + 128 * kConsumers;
  __device__ __forceinline__ static void publish(int* slots, int k, int tile, bool leader) {
    if (leader) slots[k & 1] = tile;
    sync();
  }
  __device__ __forceinline__ static int receive(const int* slots, int k) {
    sync();
    return slots[k & 1];
  }
  // `barrier.sync` (not the warp-aligned `bar.sync`): the producer warp's lanes poll their
  // mbarriers independently and need not be converged here. The memory clobber keeps the slot's
  // store and load on their sides of the barrier.
  __device__ __forceinline__ static void sync() {
    asm volatile("barrier.sync %0, %1;" : : "r"(int(kBarTile)), "r"(kThreads) : "memory");
  }
};

// TL `Role consumer warpgroups 2 ... pingpong`: consumer warpgroup w may issue its GEMMs only after
// the other one has issued its own (the tensor cores alternate; one warpgroup's softmax runs under
// the other's GEMMs). Each warpgroup syncs on its barrier and arrives on the other's.
template <int kConsumers, bool kEnabled>
struct Pingpong {
  static constexpr bool active = kEnabled && kConsumers == 2;
  __device__ __forceinline__ static void start(int wg) {
    if constexpr (active) {
      if (wg == 1) cutlass::arch::NamedBarrier::arrive(256, kBarPingpongBase + 0);
    }
  }
  __device__ __forceinline__ static void wait_turn(int wg) {
    if constexpr (active) cutlass::arch::NamedBarrier::sync(256, kBarPingpongBase + wg);
  }
  __device__ __forceinline__ static void pass_turn(int wg) {
    if constexpr (active) cutlass::arch::NamedBarrier::arrive(256, kBarPingpongBase + (1 - wg));
  }
  // The last pass of warpgroup 1 is never consumed by warpgroup 0: drain it so both barriers end
  // the block balanced.
  __device__ __forceinline__ static void finish(int wg) {
    if constexpr (active) {
      if (wg == 0) cutlass::arch::NamedBarrier::sync(256, kBarPingpongBase + 0);
    }
  }
};

}  // namespace qattn::sm90
