// qattn device runtime, Hopper (sm90a): the stores of a consumer warpgroup's results.
//   TL `Copy O (BM, d) in coordinate [m_block, 0] from register to global`
//       store_o: the warpgroup's 64 rows of O, converted to O's dtype, staged in shared memory with
//       the 128-byte swizzle and written by one TMA store (rows past seqlen_q are dropped by the
//       copy engine). kDeferWait (a persistent block with its own O tile): the thread that issued
//       the store waits for the copy engine to have read the rows only before the next tile's
//       store rewrites them (finish_stores once before the block exits), so the warpgroup starts
//       its next tile meanwhile; otherwise it waits right after issuing.
//   TL `Copy LSE (BM) in coordinate [m_block] from register to global`
//       store_rows: one value per row, written by the quad's first thread (p.lse may be NULL)
#pragma once
#include <cstdint>

#include "qattn/sm90/ptx.cuh"
#include "qattn/sm90/score.cuh"
#include "qattn/sm90/sync.cuh"
#include "qattn/sm90/tile.cuh"
#include "qattn/sm90/tma.cuh"

namespace qattn::sm90 {

// The warpgroup's 64 rows of O into its staging rows (the 128-byte swizzle), converted to O's dtype.
// kPersistent: first, the previous tile's store (kDeferWait: its TMA store) must have read them.
template <int BM, int DV, bool kBf16, bool kPersistent, bool kDeferWait, int N, bool kPack, class Element>
__device__ __forceinline__ void stage_o(const float (&o)[N], Element* sO, const RowMap<kPack>& rows, int tid) {
  if constexpr (kPersistent) {
    if (kDeferWait && tid == 0) ptx::tma_store_wait<0>();
    ptx::bar_sync(kBarEpilogueBase + rows.wg, 128);
  }
  unsigned char* so = reinterpret_cast<unsigned char*>(sO);
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = pack2<kBf16>(o[4 * i + 2 * h], o[4 * i + 2 * h + 1]);
      *reinterpret_cast<uint32_t*>(so + swizzled_offset<BM>(rows.r + 8 * h, 8 * i + 2 * rows.c, 2)) = v;
    }
  }
}

template <int BM, int DV, bool kBf16, bool kPack, bool kPersistent, bool kDeferWait, int N, class Element>
__device__ __forceinline__ void store_o(const float (&o)[N], Element* sO, const RowMap<kPack>& rows, int tid,
                                        const CUtensorMap* map, int head, int batch, int row_base = 0) {
  static_assert(N == DV / 2, "O: a (64, DV) accumulator");
  stage_o<BM, DV, kBf16, kPersistent, kDeferWait>(o, sO, rows, tid);
  ptx::fence_async_shared();  // generic-proxy writes -> visible to the copy engine
  ptx::bar_sync(kBarEpilogueBase + rows.wg, 128);
  if (tid == 0) {
    const int row0 = row_base + rows.tile_row0 + 64 * rows.wg;
    if constexpr (kPack)
      tma_store_packed<BM, DV>(map, sO, 64 * rows.wg, row0, head, batch, rows.pack);
    else
      tma_store_rows<BM, DV>(map, sO, 64 * rows.wg, row0, head, batch);
    if constexpr (!kDeferWait) ptx::tma_store_wait<0>();  // the copy engine has read the staged rows
  }
}

// TL `Copy O ...` of a ragged O (`{ragged}`: packed sequences). A warpgroup whose 64 rows all lie
// within the sequence (rows below `valid`: its query count, times G when packed) stores them with
// store_o's TMA box at the sequence's first row `first` (a query) of the packed O; the one that holds
// the sequence's last rows stages them the same way and writes them with its threads, 16 bytes each,
// rows below `valid` only (the rows past it are the next sequence's, which a TMA box would
// overwrite). `out` is the sequence's row 0 of `head` (packed: of the group's first query head; row r
// of the tile is then query r / G of head r % G after it, `head_stride` apart). `part`: the map's
// batch entry (split keys: the part, whose rows follow the previous part's total rows; else 0).
template <int BM, int DV, bool kBf16, bool kPersistent, bool kDeferWait, int N, bool kPack, class Element>
__device__ __forceinline__ void store_o_ragged(const float (&o)[N], Element* sO, const RowMap<kPack>& rows, int tid,
                                               const CUtensorMap* map, int head, int first, Element* out, int64_t row_stride,
                                               int valid, int64_t head_stride = 0, int part = 0) {
  static_assert(N == DV / 2 && DV % 8 == 0, "O: a (64, DV) accumulator");
  if (rows.tile_row0 + 64 * rows.wg + 64 <= valid)  // uniform in the warpgroup
    return store_o<BM, DV, kBf16, kPack, kPersistent, kDeferWait>(o, sO, rows, tid, map, head, part, kPack ? first * rows.pack : first);
  stage_o<BM, DV, kBf16, kPersistent, kDeferWait>(o, sO, rows, tid);
  const unsigned char* so = reinterpret_cast<const unsigned char*>(sO);
  ptx::bar_sync(kBarEpilogueBase + rows.wg, 128);
  constexpr int kPieces = DV / 8;  // 16-byte pieces per row
#pragma unroll
  for (int i = tid; i < 64 * kPieces; i += 128) {
    const int r = 64 * rows.wg + i / kPieces, c = i % kPieces;
    const int q = rows.tile_row0 + r;
    if (q < valid) {
      Element* row = kPack ? out + int64_t(q / rows.pack) * row_stride + int64_t(q % rows.pack) * head_stride : out + int64_t(q) * row_stride;
      *reinterpret_cast<uint4*>(row + 8 * c) = *reinterpret_cast<const uint4*>(so + swizzled_offset<BM>(r, 8 * c, 2));
    }
  }
  ptx::bar_sync(kBarEpilogueBase + rows.wg, 128);  // every piece read before the rows are reused
}

// A row vector of a ragged LSE, (heads_q, total_q): the thread's two rows below `valid` (queries, times
// G when packed) at [head_of(row), start + query(row)].
template <bool kPack>
__device__ __forceinline__ void store_rows_at(float* out, const float (&x)[2], const RowMap<kPack>& rows, int head, int64_t total,
                                              int start, int valid) {
  if (out == nullptr || rows.c != 0) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = rows.tile_row0 + rows.r + 8 * h;
    if (row < valid) out[int64_t(rows.head_of(h, head)) * total + start + rows.query(row)] = x[h];
  }
}

// Before the block exits: the last deferred store has read shared memory.
template <bool kDeferWait>
__device__ __forceinline__ void finish_stores(int tid) {
  if (kDeferWait && tid == 0) ptx::tma_store_wait<0>();
}

// A row vector to global: out[(batch, head_of(row), query(row))] for the thread's two rows.
template <bool kPack>
__device__ __forceinline__ void store_rows(float* out, const float (&x)[2], const RowMap<kPack>& rows, int head, int batch,
                                           int heads_q, int seqlen_q) {
  if (out == nullptr || rows.c != 0) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int q = h == 0 ? rows.qa() : rows.qb();
    if (q < seqlen_q) out[(int64_t(batch) * heads_q + rows.head_of(h, head)) * seqlen_q + q] = x[h];
  }
}

}  // namespace qattn::sm90
