// qattn device runtime, Hopper (sm90a): the kernel parameters and the tile scheduler.
//   TL `Grid m_block = .., head = .., b = ..`            one work tile per Grid point; the launch
//       is 1-D, m_block fastest (blocks running together share one head's K and V in L2); with a
//       causal mask the longest query rows start first (kReverseM)
//   TL `Grid ... {persistent}`                           one block per SM walks the tiles: the
//       producer warp takes the next tile from a global counter and hands its index to the
//       consumer warpgroups through mbarriers (sync.cuh, TileExchange), after issuing the tile's
//       first copies, so the next tile's loads run under this tile's last GEMMs and epilogue; a
//       ragged launch numbers its live tiles only (DenseTiles)
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

// The sum of v over lanes 0 .. this one (the whole warp, converged).
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o *= 2) {
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// A ragged launch's live work tiles, numbered densely (TL {ragged}: the Grid's first axis is sized
// by the longest sequence, so a short sequence's group holds mostly tiles past its queries): sequence
// b has live(b) x heads x splits of them (live(b): the Grid's first extent with the sequence's
// count, Scope::live_blocks), in the launch's order (qattn::ragged_tile). The producer's first warp
// holds 32 sequences at a time: their running counts in shared memory (`ends`, written by the
// warp's lanes together), so a block's increasing tile numbers read the sequences' lengths again
// only when they pass those 32, and the warp's own state stays the same in every lane: the
// producer's loop keeps its tile values on the uniform datapath (with the counts in each lane's
// registers it did not, and 32 sequences of 512 ran 2.5% slower; H200,
// bench/results/2026-11-30-h200-varlen-dense-tiles). Warp-collective: the whole warp, converged.
struct DenseTiles {
  static constexpr int kBytes = 32 * 4;
  int* ends;             // shared: [i] the tiles of the sequences up to and including first + i
  int first = 0;         // the first sequence in hand
  int before = 0;        // the tiles of the sequences before it
  bool loaded = false;   // ends holds the 32 from `first`
  // Live tile t -> its tile of the 1-D launch (tile_coord); p.num_tiles when t is past the last.
  // A launch whose longest sequence fits one 64-row query tile (decoding: p.seqlen_q is the longest
  // count) has one Grid tile per sequence, head and part, live unless the sequence is empty: its
  // numbers are the Grid's own (an empty sequence's tile is handed on and skipped, as a block's first
  // tile may be), so nothing is read or decoded before a block's first copies: decoding through
  // attention_varlen 0.5-1.5% closer to attention_with_kvcache's time on every row (MQA 1.02-1.04x,
  // was 1.03-1.05x; H200, bench/results/2026-12-01-h200-varlen-static). Compiled into the 64-row tiles (the decoding
  // tile's) only: the 128-row kernels' producer loops keep their code (code added there moved
  // equal-length prefill by 2.5-7%, bench/results/2026-11-30-h200-varlen-dense-tiles).
  template <int BM, bool kReverseM, bool kPack, bool kSplit, class Live>
  __device__ __forceinline__ int tile(int t, Params const& p, Live live) {
    const int pack = kPack ? p.pack : 1, heads = p.heads_q / pack, splits = kSplit ? p.splits : 1;
    if constexpr (BM == 64) {
      if (static_cast<long long>(p.seqlen_q) * pack <= BM) return t < p.num_tiles ? t : p.num_tiles;
    }
    if ((!loaded || t >= ends[31]) && !advance(t, p, live, heads * splits)) return p.num_tiles;
    int k = 0;  // the sequences in hand wholly before t (< 32: t < ends[31])
#pragma unroll
    for (int s = 16; s > 0; s /= 2)
      if (ends[k + s - 1] <= t) k += s;
    const int start = k == 0 ? before : ends[k - 1];  // sequence first + k's first tile; ends[k] - start > 0 of them
    return qattn::ragged_tile(first + k, t - start, (ends[k] - start) / (heads * splits), heads, splits,
                              (p.seqlen_q * pack + BM - 1) / BM, kReverseM);
  }
  // The next 32 sequences until t's is in hand; false past the last sequence.
  template <class Live>
  __device__ __forceinline__ bool advance(int t, Params const& p, Live live, int per) {
    for (;;) {
      if (loaded) {
        before = ends[31];
        first += 32;
      }
      if (first >= p.batch) return false;
      const int b = first + int(threadIdx.x % 32);
      const int e = before + warp_inclusive_sum(b < p.batch ? live(b) * per : 0);
      __syncwarp();  // every lane has read the previous counts
      ends[threadIdx.x % 32] = e;
      __syncwarp();
      loaded = true;
      if (t < ends[31]) return true;
    }
  }
};

// Which work tiles a block runs. One block per tile: tile blockIdx.x. Persistent: tiles from the
// global counter, handed from the producer warp to the consumers (k counts the block's tiles). A
// producer that issues its copies from kProducerWarps > 1 warps (paged KV caches) shares each fetched
// number with its other warps through the exchange (TileExchange::share). kDense (ragged launches):
// the counter numbers the live tiles only (DenseTiles: each producer warp turns a number into its
// tile), and the last block to finish resets the counter pair (the blocks done, counter [1]): the
// fetches past the last live tile do not add up to num_tiles.
template <bool kPersistent, int kConsumers, int kProducerWarps = 1, bool kDense = false>
struct Scheduler {
  using Exchange = TileExchange<kConsumers>;
  static constexpr int kBytes = kPersistent ? Exchange::kBytes + (kDense ? DenseTiles::kBytes : 0) : 0;
  int* slots;  // persistent: the exchange's shared memory
  __device__ __forceinline__ void init() const {
    if constexpr (kPersistent) Exchange::init(slots);
  }
  // ---- producer warp
  // The producer warp that talks to the consumers: with several producer warps, the leader's only
  // (TileExchange::share says why the others must not wait on the exchange).
  __device__ __forceinline__ static bool exchange_warp() { return kProducerWarps == 1 || threadIdx.x < 32; }
  // kDense: DenseTiles' shared counts, after the exchange.
  __device__ __forceinline__ int* dense_counts() const { return slots + Exchange::kBytes / 4; }
  // The block's first tile: tile blockIdx.x (kDense: the live tile of that number, `tile(n)`, which
  // the first producer warp decodes and shares with the others).
  template <class Tile>
  __device__ __forceinline__ int first(bool leader, int warps, Tile tile) const {
    if constexpr (kPersistent && kDense) {
      if constexpr (kProducerWarps > 1) {
        if (warps > 1) {
          int t = 0;
          if (threadIdx.x < 32) t = tile(int(blockIdx.x));
          return Exchange::share(slots, 0, t, leader, 32 * warps);
        }
      }
      return tile(int(blockIdx.x));
    } else {
      return int(blockIdx.x);
    }
  }
  // True when t is past the last tile (persistent: the consumers are told so; kDense: the last block
  // to get here resets the counter pair, every block's fetches being done).
  __device__ __forceinline__ bool done(int t, int k, bool leader, Params const& p) const {
    if (t < p.num_tiles) return false;
    if constexpr (kPersistent) {
      if (exchange_warp()) Exchange::publish(slots, k, t, leader);
      if constexpr (kDense) {
        if (leader) {
          __threadfence();
          if (atomicAdd(p.tile_counter + 1, 1) == int(gridDim.x) - 1) {
            atomicExch(p.tile_counter, 0);
            atomicExch(p.tile_counter + 1, 0);
          }
        }
      }
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
  // kDense: the numbers count live tiles, `tile(n)` is the live tile of number n, decoded by the
  // first producer warp (done() resets).
  // (Fetching the next number as a tile begins, FlashAttention-3's prefetch, was 1.5-3% slower on an
  // H200: a block busy with a long tile holds the next one back; bench/results/2026-11-30-h200-varlen-dense-tiles.)
  template <class Tile = int (*)(int)>
  __device__ __forceinline__ int next(bool leader, Params const& p, int k, int warps = 1, Tile tile = nullptr) const {
    if constexpr (kPersistent) {
      int x = 0;
      if (leader) {
        x = atomicAdd(p.tile_counter, 1);
        if constexpr (!kDense) {
          if (x == p.num_tiles - 1) atomicExch(p.tile_counter, 0);
        }
      }
      if constexpr (kProducerWarps > 1) {
        if (warps > 1) {
          int t = int(gridDim.x) + x;
          if constexpr (kDense) {
            if (threadIdx.x < 32) t = tile(int(gridDim.x) + __shfl_sync(0xffffffffu, x, 0));
          }
          return Exchange::share(slots, k, t, leader, 32 * warps);
        }
      }
      const int n = int(gridDim.x) + __shfl_sync(0xffffffffu, x, 0);
      if constexpr (kDense) return tile(n);
      else return n;
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
