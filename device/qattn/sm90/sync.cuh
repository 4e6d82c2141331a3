// qattn device runtime, Hopper (sm90a): the synchronisation pieces of the TL schedule.
//   TL `Allocate X in shared ... {stages: N}` + `Copy X ... {async}` + `{wait: X}` / `{release: X}`
//   lower to a ring of N slots, each guarded by two mbarriers: `full` (the producer's TMA copy
//   landed: one arrive with the expected byte count) and `empty` (every consumer warpgroup is done
//   with the slot: one arrive per consumer warpgroup). The producer waits on `empty` with the
//   opposite parity (a fresh barrier counts as "previous phase complete"), so the first N copies
//   never wait.
//   TL `Role consumer ... pingpong` lowers to two named barriers that hand the tensor cores from
//   one consumer warpgroup to the other (see `Pingpong`).
// The mbarrier and named-barrier instructions: ptx.cuh.
#pragma once
#include <cstdint>

#include "qattn/sm90/ptx.cuh"

namespace qattn::sm90 {

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

// Waits for phase `phase` of an mbarrier: one try first (the common case: the phase is complete),
// the retry loop only when it is not, so the fast path is one instruction and a branch.
__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t phase) {
  if (!ptx::mbar_try_wait(bar, phase)) ptx::mbar_wait(bar, phase);
}

// A TL ring: `Allocate X in shared (ROWS, COLS) {stages: S}` filled by `{async}` Copies. Slot s holds
// kSlotElems elements at X + s * kSlotElems and is guarded by full[s] (the producer's TMA copy
// landed: one arrive with the expected bytes) and empty[s] (one arrive per consumer warpgroup). The
// barriers are 2 * kStages mbarriers in shared memory (kBarrierBytes).
template <int kStages, int kSlotElems>
struct Ring {
  static constexpr int kBarrierBytes = 16 * kStages;
  uint64_t* bar;
  __device__ __forceinline__ uint64_t* full(int s) const { return bar + s; }
  __device__ __forceinline__ uint64_t* empty(int s) const { return bar + kStages + s; }
  __device__ __forceinline__ void init(int consumers) const {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(full(s), 1);
      ptx::mbar_init(empty(s), consumers);
    }
  }
  template <class Element>
  __device__ __forceinline__ Element* slot(Element* base, RingPos pos) const {
    return base + pos.slot * kSlotElems;
  }
  // Producer, TL `Copy X ... from global to shared {async}`: waits (the whole warp) until slot pos
  // is free, then the leader expects `bytes` on its full barrier; returns that barrier for the copy.
  __device__ __forceinline__ uint64_t* acquire(RingPos pos, int bytes, bool leader) const {
    wait_phase(empty(pos.slot), pos.phase ^ 1u);  // a fresh barrier counts as released
    if (leader) ptx::mbar_arrive_expect_tx(full(pos.slot), bytes);
    return full(pos.slot);
  }
  // Consumer, TL `{wait: X}`: the copy into slot pos has landed.
  __device__ __forceinline__ void wait(RingPos pos) const { wait_phase(full(pos.slot), pos.phase); }
  // Consumer, TL `{release: X}`: the warpgroup is done with slot pos (its leader arrives); pos moves on.
  __device__ __forceinline__ void release(RingPos& pos, bool leader) const {
    if (leader) ptx::mbar_arrive(empty(pos.slot));
    pos.advance(kStages);
  }
};

// Named barrier ids: 0 is __syncthreads; ours, each range one id per consumer warpgroup (at most 3):
// ping-pong 1-2, epilogue 3-5, a V tile's zeroed tail 6-8 (the ranges overlapped before 2026-11-29:
// with 3 consumer warpgroups, warpgroup 2's epilogue and warpgroup 0's tail shared id 5); 9: the
// producer warps of a producer that issues its copies from several warps (the tile index they share,
// TileExchange::share, and a paged tile's copies, load_tile_paged).
// 10: the consumer warpgroups of `split columns` (split.cuh), which share every row.
enum : int { kBarPingpongBase = 1, kBarEpilogueBase = 3, kBarTailBase = 6, kBarProducer = 9, kBarSplit = 10 };
static_assert(kBarEpilogueBase >= kBarPingpongBase + 2 && kBarTailBase >= kBarEpilogueBase + 3 &&
                  kBarProducer >= kBarTailBase + 3 && kBarSplit > kBarProducer && kBarSplit < 16,
              "named barrier ranges overlap (at most 3 consumer warpgroups, 16 ids)");

// TL Grid `{persistent}`: the producer warp hands the block's k-th tile index to the consumer
// warpgroups in shared slot k mod 2, guarded by two mbarriers per slot: `full` (the producer wrote
// the index: one arrive, release) and `empty` (every consumer thread read it). A consumer
// warpgroup waits only for the producer, never for the other consumer warpgroup, so at a tile
// boundary the two keep their ping-pong offset (one starts its next tile's GEMMs while the other
// finishes its epilogue). The producer publishes after issuing the tile's first copies, so they
// overlap the previous tile's end; its last index (>= num_tiles) means "no more tiles".
template <int kConsumers>
struct TileExchange {
  // Shared memory: 2 index slots, then the mbarriers full[2], empty[2] (8-byte aligned).
  static constexpr int kBytes = 8 + 4 * 8;
  __device__ __forceinline__ static uint64_t* bar(int* slots) { return reinterpret_cast<uint64_t*>(slots + 2); }
  __device__ __forceinline__ static void init(int* slots) {
    for (int i = 0; i < 2; ++i) {
      ptx::mbar_init(&bar(slots)[i], 1);                       // full: the producer's leader
      ptx::mbar_init(&bar(slots)[2 + i], 128 * kConsumers);    // empty: every consumer thread
    }
  }
  __device__ __forceinline__ static void publish(int* slots, int k, int tile, bool leader) {
    const int i = k & 1;
    ptx::mbar_wait(&bar(slots)[2 + i], uint32_t((k >> 1) & 1) ^ 1u);  // a fresh slot counts as read
    if (leader) {
      *reinterpret_cast<volatile int*>(&slots[i]) = tile;
      ptx::mbar_arrive(&bar(slots)[i]);
    }
  }
  // A producer of several warps (`threads` threads): the leader's next tile index, the block's k-th,
  // read by every producer warp. It goes through slot k mod 2, where publish() will put the same
  // index: the leader's warp waits for the slot as publish() does (the consumers read its previous
  // index long before), the leader writes it, all read it after a named barrier. The next write to
  // the slot is the (k + 2)-th tile's, after two more of these barriers, which every producer warp
  // passes only after reading this one. Only the leader's warp waits on the exchange's mbarriers,
  // here and in publish(): a phase parity names the phase only while the waiter is at most one phase
  // behind, and the other producer warps are not held back by the consumers: once the leader has
  // published tile k the consumers receive it and complete the slot's next phase, and a warp still
  // on its way to the same wait would then wait for tile k + 2, which the leader never publishes
  // without it (the four-warp producer's intermittent hang: bench/results/2026-11-29-h200-paged16).
  __device__ __forceinline__ static int share(int* slots, int k, int tile, bool leader, int threads) {
    const int i = k & 1;
    if (threadIdx.x < 32) {  // the leader's warp (warpgroup 0's first), whole: converged at the bar.sync
      ptx::mbar_wait(&bar(slots)[2 + i], uint32_t((k >> 1) & 1) ^ 1u);
      if (leader) *reinterpret_cast<volatile int*>(&slots[i]) = tile;
    }
    ptx::bar_sync(kBarProducer, threads);
    return *reinterpret_cast<volatile int*>(&slots[i]);
  }
  __device__ __forceinline__ static int receive(int* slots, int k) {
    const int i = k & 1;
    ptx::mbar_wait(&bar(slots)[i], uint32_t((k >> 1) & 1));
    const int tile = *reinterpret_cast<volatile int*>(&slots[i]);
    ptx::mbar_arrive(&bar(slots)[2 + i]);
    return tile;
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
      if (wg == 1) ptx::bar_arrive(kBarPingpongBase + 0, 256);
    }
  }
  __device__ __forceinline__ static void wait_turn(int wg) {
    if constexpr (active) ptx::bar_sync(kBarPingpongBase + wg, 256);
  }
  __device__ __forceinline__ static void pass_turn(int wg) {
    if constexpr (active) ptx::bar_arrive(kBarPingpongBase + (1 - wg), 256);
  }
  // The last pass of warpgroup 1 is never consumed by warpgroup 0: drain it so both barriers end
  // the block balanced.
  __device__ __forceinline__ static void finish(int wg) {
    if constexpr (active) {
      if (wg == 0) ptx::bar_sync(kBarPingpongBase + 0, 256);
    }
  }
};

}  // namespace qattn::sm90
