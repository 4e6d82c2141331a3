// qattn device runtime, Hopper (sm90a): the score stage of a consumer warpgroup's (64, BN) tile,
// element by element with the element's query and key index.
//   TL `Compute Mask S at [r, j] with M`      mask_tile: keys the work tile's Scope does not keep
//                                             become -inf (the kernel's mask and Mask declarations)
//   TL `Compute Modify S at [r, j] with NAME` for_each_score with the Score declaration
// The generated Scope (the TL names of one work tile) provides keep(q, k) and the declarations.
#pragma once
#include "qattn/scalar.cuh"

namespace qattn::sm90 {

// Which queries this consumer thread's rows hold in a work tile: the thread owns rows r and r + 8
// of its warpgroup's 64-row slice of the tile. With TL `{pack: G}` (GQA packing) tile row x is query
// x / G of head group * G + x % G; otherwise row x is query x. Computed at each use: without packing
// it folds to the row index and keeps no register.
template <bool kPack>
struct RowMap {
  int tile_row0;  // the work tile's first row (m_block * BM)
  int r;          // the thread's first row within the tile (64 wg + 16 warp + lane / 4); the second is r + 8
  int wg;         // the consumer warpgroup (its slice: rows 64 wg .. 64 wg + 63)
  int pack;       // G (1 without packing)
  int c;          // lane % 4: the thread's column pair within each 8-column group
  __device__ __forceinline__ RowMap(int m_block, int bm, int wg_, int tid, int pack_)
      : tile_row0(m_block * bm), r(64 * wg_ + tid / 4 % 8 + 16 * (tid / 32)), wg(wg_), pack(pack_), c(tid % 4) {}
  __device__ __forceinline__ int query(int row) const { return kPack ? row / pack : row; }
  __device__ __forceinline__ int qa() const { return query(tile_row0 + r); }
  __device__ __forceinline__ int qb() const { return query(tile_row0 + r + 8); }
  __device__ __forceinline__ int q_lo() const { return query(tile_row0 + 64 * wg); }
  __device__ __forceinline__ int q_hi() const { return query(tile_row0 + 64 * wg + 63); }
  // The query head of row h (0: r, 1: r + 8) of head (group) `head`.
  __device__ __forceinline__ int head_of(int h, int head) const { return kPack ? head * pack + (tile_row0 + r + 8 * h) % pack : head; }
};

// Calls f(x, q, k) for every element x (a reference) of this thread's part of a (64, N) score tile
// whose first key is col0.
template <bool kPack, int N, class F>
__device__ __forceinline__ void for_each_score(float (&s)[N], const RowMap<kPack>& rows, int col0, F&& f) {
  const int qa = rows.qa(), qb = rows.qb();
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const int k = col0 + 8 * i + 2 * rows.c;
#pragma unroll
    for (int e = 0; e < 4; ++e) f(s[4 * i + e], e >= 2 ? qb : qa, k + (e & 1));
  }
}

// TL `Compute Mask S at [m_block, j] with M` on key tile j (BN keys): a uniform branch skips tiles
// the Scope says the masks leave whole (tile_needs_mask: the warpgroup's queries x the tile's keys).
template <int BN, bool kPack, int N, class Scope>
__device__ __forceinline__ void mask_tile(float (&s)[N], const RowMap<kPack>& rows, int j, const Scope& v) {
  if (!v.tile_needs_mask(rows.q_lo(), rows.q_hi(), j)) return;
  for_each_score(s, rows, j * BN, [&](float& x, int q, int k) {
    if (!v.keep(q, k)) x = -INFINITY;
  });
}

// The next key tile below j that the loop visits (`{skip: M}`: tiles whose `empty when` clause
// holds are neither loaded nor computed); lo - 1 when there is none. Key tiles are visited in
// descending order, so the tiles a causal or window mask cuts come first. Four tiles' clauses a
// round (next_visible): the tiles before a document's start cost a quarter of the round trips.
template <class Scope>
__device__ __forceinline__ int prev_tile(int j, int lo, const Scope& v) {
  return next_visible<4, -1>(j, lo - 1, [&](int t) { return v.visible(t); });
}

}  // namespace qattn::sm90
