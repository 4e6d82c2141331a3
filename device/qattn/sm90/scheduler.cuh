// qattn device runtime, Hopper (sm90a): the kernel parameters and the tile scheduler.
//   TL `Grid m_block = .., head = .., b = ..`            one work tile per Grid point; the launch
//       is 1-D, m_block fastest (blocks running together share one head's K and V in L2); with a
//       causal mask the longest query rows start first (kReverseM)
//   TL `Grid ... {persistent}`                           one block per SM walks the tiles: the
//       producer warp takes the next tile from a global counter and hands its index to the
//       consumer warpgroups through mbarriers (sync.cuh, TileExchange), after issuing the tile's
//       first copies, so the next tile's loads run under this tile's last GEMMs and epilogue; a
//       ragged launch's leader fetches past its dead tiles (next_live_tile, Scheduler::next)
#pragma once
#include <cstdint>

#include "qattn/intmath.cuh"
#include "qattn/sm90/params.h"
#include "qattn/sm90/sync.cuh"

namespace qattn::sm90 {

// A work tile: the TL Grid point (m_block, head or kv-head group, batch).
struct TileCoord {
  int m_block, head, batch;
  int split = 0;  // TL `s = 0: splits` (split keys): the part of the keys
};

// Tile t of the 1-D launch -> its Grid point: m_block fastest; kReverseM: the last m_block first.
// TL {pack}: m_block counts packed rows (pack per query) and `head` is the head group. kSplit (TL
// `s = 0: splits`): the parts of one sequence's keys are adjacent batch entries (b * splits + s).
template <int BM, bool kReverseM, bool kPack, bool kSplit = false>
__device__ __forceinline__ TileCoord tile_coord(int t, Params const& p) {
  const int pack = kPack ? p.pack : 1;
  const int m_blocks = (p.seqlen_q * pack + BM - 1) / BM, heads = p.heads_q / pack;
  TileCoord c;
  c.m_block = t % m_blocks;
  if (kReverseM) c.m_block = m_blocks - 1 - c.m_block;
  t /= m_blocks;
  c.head = t % heads;
  c.batch = t / heads;
  if constexpr (kSplit) {
    c.split = c.batch % p.splits;
    c.batch /= p.splits;
  }
  return c;
}

// A ragged launch's dead tile t (TL {ragged}: its query tile lies past its sequence's `live` ones):
// the first later tile that may be live (intmath.cuh). The Grid's first axis is sized by the longest
// sequence, so a short one leaves most of its group's tiles (its kv head and batch entry) dead.
template <int BM, bool kReverseM, bool kPack>
__device__ __forceinline__ int next_live_tile(int t, int live, Params const& p) {
  const int pack = kPack ? p.pack : 1;
  return qattn::next_live_tile(t, (p.seqlen_q * pack + BM - 1) / BM, live, kReverseM);
}

// Which work tiles a block runs. One block per tile: tile blockIdx.x. Persistent: tiles from the
// global counter, handed from the producer warp to the consumers (k counts the block's tiles). A
// producer that issues its copies from kProducerWarps > 1 warps (paged KV caches) shares each fetched
// index with its other warps through the exchange (TileExchange::share). kSkips (ragged launches):
// the producer's leader moves the counter past runs of dead tiles (next), so the counter is reset by
// the last block to finish (the blocks done, counter [1]) instead of by the launch's last fetch.
template <bool kPersistent, int kConsumers, int kProducerWarps = 1, bool kSkips = false>
struct Scheduler {
  using Exchange = TileExchange<kConsumers>;
  static constexpr int kBytes = kPersistent ? Exchange::kBytes : 0;
  int* slots;  // persistent: the exchange's shared memory
  __device__ __forceinline__ void init() const {
    if constexpr (kPersistent) Exchange::init(slots);
  }
  // ---- producer warp
  // True when t is past the last tile (persistent: the consumers are told so).
  // The producer warp that talks to the consumers: with several producer warps, the leader's only
  // (TileExchange::share says why the others must not wait on the exchange).
  __device__ __forceinline__ static bool exchange_warp() { return kProducerWarps == 1 || threadIdx.x < 32; }
  __device__ __forceinline__ bool done(int t, int k, bool leader, Params const& p) const {
    if (t < p.num_tiles) return false;
    if constexpr (kPersistent) {
      if (exchange_warp()) Exchange::publish(slots, k, t, leader);
    }
    return true;
  }
  // Hands tile t (the block's k-th) to the consumers, once: after its first copies are issued.
  __device__ __forceinline__ void publish(int k, int t, bool leader, bool& published) const {
    if constexpr (kPersistent) {
      if (!published && exchange_warp()) Exchange::publish(slots, k, t, leader);
    }
    published = true;
  }
  // The block's next tile (its k-th): first come, first served. Every finished tile fetches once, so
  // a launch makes num_tiles fetches; the last one resets the counter for the next launch.
  // `warps`: the producer warps that take part (TileExchange::share), at most kProducerWarps.
  // kSkips: `dead(t)` is -1 for a tile that may be live, else the first later tile that may be
  // (next_live_tile): the leader moves the counter there and fetches again, so dead tiles reach
  // neither the other producer warps nor the consumers.
  template <class Dead = int (*)(int)>
  __device__ __forceinline__ int next(bool leader, Params const& p, int k, int warps = 1, Dead dead = nullptr) const {
    if constexpr (kPersistent) {
      int x = 0;
      if (leader) {
        for (;;) {
          x = atomicAdd(p.tile_counter, 1);
          if constexpr (kSkips) {
            // the block's last fetch: the last block to make it resets both counters (every block
            // has fetched for the last time, and each one's skips came before its fetches)
            if (int(gridDim.x) + x >= p.num_tiles) {
              __threadfence();
              if (atomicAdd(p.tile_counter + 1, 1) == int(gridDim.x) - 1) {
                atomicExch(p.tile_counter, 0);
                atomicExch(p.tile_counter + 1, 0);
              }
              break;
            }
            const int to = dead(int(gridDim.x) + x);
            if (to < 0) break;
            atomicMax(p.tile_counter, to - int(gridDim.x));
          } else {
            if (x == p.num_tiles - 1) atomicExch(p.tile_counter, 0);
            break;
          }
        }
      }
      if constexpr (kProducerWarps > 1) {
        if (warps > 1) return Exchange::share(slots, k, int(gridDim.x) + x, leader, 32 * warps);
      }
      return int(gridDim.x) + __shfl_sync(0xffffffffu, x, 0);
    } else {
      return p.num_tiles;
    }
  }
  // ---- consumer warpgroups: the block's k-th tile (>= num_tiles: none left)
  __device__ __forceinline__ int receive(int k, Params const& p) const {
    if constexpr (kPersistent) return Exchange::receive(slots, k);
    else return k == 0 ? int(blockIdx.x) : p.num_tiles;
  }
};

}  // namespace qattn::sm90
