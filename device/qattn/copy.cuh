// qattn device runtime: copies between memory levels.
//  - global -> shared tiles: 16-byte accesses, cp.async on sm80+ (asynchronous, committed in
//    groups by the caller) or ld.global.v4 + st.shared.v4 on sm75; rows past the end of the
//    global view are zero-filled (TL: "elements outside the global view read as zero").
//  - shared -> register operand fragments: ldmatrix, inside the GEMMs (gemm.cuh).
//  - fp8 V^T: 8-bit data has no ldmatrix.trans, so V is transposed in shared memory, in the key
//    order of the sm89 P reshape (layout.cuh).
#pragma once
#include <cute/tensor.hpp>

#include "qattn/layout.cuh"

namespace qattn {
using namespace cute;

// Threads per tile row: the largest power of two <= 8 that divides the row's 16-byte chunks, so a
// warp reads whole 128-byte segments.
template <class T, int COLS>
constexpr int g2s_threads_per_row() {
  constexpr int chunks = COLS * int(sizeof(T)) / 16;
  return chunks % 8 == 0 ? 8 : chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
}

// The tiled copy for (rows, cols) tiles of T moved by THREADS threads, 16 bytes per access, TPR
// threads per row (g2s_threads_per_row of the narrowest tile it moves).
template <class T, int THREADS, int TPR, bool ASYNC>
CUTE_HOST_DEVICE constexpr auto make_g2s_copy() {
  constexpr int kElems = 16 / int(sizeof(T));
  static_assert(THREADS % TPR == 0, "threads must cover whole rows");
  using Op = conditional_t<ASYNC, SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, UniversalCopy<uint128_t>>;
  return make_tiled_copy(Copy_Atom<Op, T>{},
                         Layout<Shape<Int<THREADS / TPR>, Int<TPR>>, Stride<Int<TPR>, _1>>{},
                         Layout<Shape<_1, Int<kElems>>>{});
}

// A loader of (ROWS, COLS) tiles of the global view `mX` (rows, COLS) into shared tiles: this
// thread's part of every tile is partitioned once, so a load costs one offset (tile_row * ROWS *
// row_stride) on a base pointer kept in registers. Rows at or past the view's end are zero-filled.
// With cp.async the copy is only issued: the caller commits it (qattn::commit) and waits for it
// (qattn::wait) before the tile is read.
template <int ROWS, int COLS, class TiledCopy, class GEngine, class GLayout>
__device__ __forceinline__ auto tile_loader(TiledCopy const& tiled_copy, Tensor<GEngine, GLayout> const& mX, int tid) {
  auto thr = tiled_copy.get_thread_slice(tid);
  Tensor tXgX = thr.partition_S(local_tile(mX, Shape<Int<ROWS>, Int<COLS>>{}, make_coord(_, 0)));  // (CPY, CPY_M, CPY_K, TILES)
  Tensor tXcX = thr.partition_S(make_identity_tensor(Shape<Int<ROWS>, Int<COLS>>{}));  // (CPY, CPY_M, CPY_K) -> (row, col)
  const int rows = int(size<0>(mX));
  return [=](int tile_row, auto&& sX) {
    Tensor tXsX = thr.partition_D(sX);  // (CPY, CPY_M, CPY_K)
    const int rows_left = rows - tile_row * ROWS;
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tXsX); ++m) {
      if (get<0>(tXcX(0, m, 0)) < rows_left) {
        cute::copy(tiled_copy, tXgX(_, m, _, tile_row), tXsX(_, m, _));
      } else {
        cute::clear(tXsX(_, m, _));
      }
    }
  };
}

// One tile: tile_loader(...)(tile_row, sX).
template <class TiledCopy, class GEngine, class GLayout, class SEngine, class SLayout>
__device__ __forceinline__ void copy_g2s(TiledCopy const& tiled_copy, Tensor<GEngine, GLayout> const& mX, int tile_row,
                                         Tensor<SEngine, SLayout> const& sX, int tid) {
  constexpr int ROWS = decltype(size<0>(sX))::value;
  constexpr int COLS = decltype(size<1>(sX))::value;
  tile_loader<ROWS, COLS>(tiled_copy, mX, tid)(tile_row, sX);
}

// A paged K / V view (TL `{paged: T}`, docs/tl.md "KV caches"): row r of the sequence is row
// r % page_size of page table[r / page_size] of the cache (num_pages, page_size, heads, COLS);
// `base` points at this head's row 0 of page 0. `rows` is the sequence's key count. A block-table
// entry outside 0 .. num_pages - 1 gives no row (it reads as zeros, as TMA's out-of-range boxes do on
// sm90): a corrupt table cannot make the kernel read outside the cache.
template <class T, int COLS>
struct PagedMatrix {
  const T* base;
  int rows;
  int64_t row_stride, page_stride;
  const int* table;
  int page_size, num_pages;
  __device__ __forceinline__ const T* row(int r) const {
    const int page = __ldg(table + r / page_size);
    if (page < 0 || page >= num_pages) return nullptr;
    return base + int64_t(page) * page_stride + int64_t(r % page_size) * row_stride;
  }
};
template <class T, int COLS>
__device__ __forceinline__ PagedMatrix<T, COLS> paged_matrix(const void* p, int64_t offset, int rows, int64_t row_stride,
                                                             int64_t page_stride, const int* table, int page_size,
                                                             int num_pages) {
  return PagedMatrix<T, COLS>{static_cast<const T*>(p) + offset, rows, row_stride, page_stride, table, page_size, num_pages};
}

// tile_loader for a paged view: each thread's rows are looked up in the block table (one read per
// row and tile); rows at or past the sequence's key count, or on a page outside the cache, are
// zero-filled, whatever the page holds.
template <int ROWS, int COLS, class TiledCopy, class T, int C>
__device__ __forceinline__ auto tile_loader(TiledCopy const& tiled_copy, PagedMatrix<T, C> const& mX, int tid) {
  static_assert(C == COLS, "the paged view's columns are the tile's");
  auto thr = tiled_copy.get_thread_slice(tid);
  Tensor tXcX = thr.partition_S(make_identity_tensor(Shape<Int<ROWS>, Int<COLS>>{}));  // (CPY, CPY_M, CPY_K) -> (row, col)
  return [=](int tile_row, auto&& sX) {
    Tensor tXsX = thr.partition_D(sX);  // (CPY, CPY_M, CPY_K)
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tXsX); ++m) {
      const int r = tile_row * ROWS + get<0>(tXcX(0, m, 0));
      const T* src = r < mX.rows ? mX.row(r) : nullptr;
      if (src != nullptr) {
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tXsX); ++k)
          cute::copy(tiled_copy, make_tensor(make_gmem_ptr(src + get<1>(tXcX(0, m, k))), make_layout(shape(tXsX(_, m, k)))),
                     tXsX(_, m, k));
      } else {
        cute::clear(tXsX(_, m, _));
      }
    }
  };
}
template <class TiledCopy, class T, int C, class SEngine, class SLayout>
__device__ __forceinline__ void copy_g2s(TiledCopy const& tiled_copy, PagedMatrix<T, C> const& mX, int tile_row,
                                         Tensor<SEngine, SLayout> const& sX, int tid) {
  constexpr int ROWS = decltype(size<0>(sX))::value;
  constexpr int COLS = decltype(size<1>(sX))::value;
  tile_loader<ROWS, COLS>(tiled_copy, mX, tid)(tile_row, sX);
}

// Commit the copies issued since the last commit as one group / wait until at most N groups are
// in flight. No-ops where copies are synchronous (sm75).
__device__ __forceinline__ void commit() { cute::cp_async_fence(); }
template <int N>
__device__ __forceinline__ void wait() { cute::cp_async_wait<N>(); }

// Shared -> register, whole operand fragment (used when an A operand stays in registers for the
// whole loop, e.g. Q on sm75): ldmatrix through the tiled copy that matches the MMA.
template <class SmemAtom, class TiledMma, class SEngine, class SLayout, class Frag>
__device__ __forceinline__ void copy_s2r_A(TiledMma const& mma, Tensor<SEngine, SLayout> const& sA, Frag& tCrA, int tid) {
  auto copy_a = make_tiled_copy_A(SmemAtom{}, mma);
  auto thr_a = copy_a.get_thread_slice(tid);
  Tensor tCsA = thr_a.partition_S(sA);
  Tensor tCrA_view = thr_a.retile_D(tCrA);
  cute::copy(copy_a, tCsA, tCrA_view);
}

// fp8 V (BN, D) -> V^T (D, BN) in shared memory, keys in the sm89 reshape order: column kk of V^T
// holds key fp8_key_of_logical(kk). Each thread moves 4x4-byte blocks: four 32-bit loads of four
// key rows, a byte transpose (prmt), four 32-bit stores.
template <int THREADS, class VEngine, class VLayout, class TEngine, class TLayout>
__device__ __forceinline__ void transpose_v_fp8(Tensor<VEngine, VLayout> const& sV, Tensor<TEngine, TLayout>&& sVt, int tid) {
  constexpr int BN = decltype(size<0>(sV))::value;
  constexpr int D = decltype(size<1>(sV))::value;
  constexpr int kBlocks = (BN / 4) * (D / 4);
  static_assert(BN % 16 == 0 && D % 4 == 0, "fp8 V tile must be a multiple of 16 keys and 4 columns");
  CUTE_UNROLL
  for (int blk = tid; blk < kBlocks; blk += THREADS) {
    const int kk = (blk % (BN / 4)) * 4;  // logical key of V^T
    const int d = (blk / (BN / 4)) * 4;
    uint32_t r[4];
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i) {
      r[i] = *reinterpret_cast<uint32_t const*>(&sV(fp8_key_of_logical(kk + i), d));
    }
    // r[i] byte c = V[key(kk+i)][d+c]; out[c] byte i = V[key(kk+i)][d+c]
    const uint32_t lo01 = __byte_perm(r[0], r[1], 0x5140), hi01 = __byte_perm(r[0], r[1], 0x7362);
    const uint32_t lo23 = __byte_perm(r[2], r[3], 0x5140), hi23 = __byte_perm(r[2], r[3], 0x7362);
    uint32_t out[4];
    out[0] = __byte_perm(lo01, lo23, 0x5410);
    out[1] = __byte_perm(lo01, lo23, 0x7632);
    out[2] = __byte_perm(hi01, hi23, 0x5410);
    out[3] = __byte_perm(hi01, hi23, 0x7632);
    CUTE_UNROLL
    for (int c = 0; c < 4; ++c) {
      *reinterpret_cast<uint32_t*>(&sVt(d + c, kk)) = out[c];
    }
  }
}
template <int THREADS, class VEngine, class VLayout, class TEngine, class TLayout>
__device__ __forceinline__ void transpose_v_fp8(Tensor<VEngine, VLayout> const& sV, Tensor<TEngine, TLayout>& sVt, int tid) {
  transpose_v_fp8<THREADS>(sV, std::move(sVt), tid);
}

}  // namespace qattn
