// qattn device runtime: the epilogue stores.
//   store_tile: TL `Copy O (BM, d) in coordinate [m_block, 0] from register to global`: the fp32
//     accumulator is rounded to O's global dtype, staged through shared memory (swizzled, 4-byte
//     stores from the accumulator layout) and written with 16-byte stores, rows past the end of the
//     global view skipped.
//   store_rows: TL `Copy LSE (BM) in coordinate [m_block] from register to global`: one value per
//     row, written by the first thread of the quad that owns it; rows past the end skipped.
#pragma once
#include <cute/tensor.hpp>

#include "qattn/copy.cuh"
#include "qattn/layout.cuh"
#include "qattn/softmax.cuh"

namespace qattn {
using namespace cute;

// acc: the (ROWS, COLS) accumulator (MMA, MMA_M, MMA_N); mX: the global view (rows, COLS);
// smem: ROWS * COLS elements of staging space that no thread reads any more once every thread has
// arrived here (a __syncthreads is issued before it is written).
template <int THREADS, int ROWS, int COLS, class TiledMma, class AccEngine, class AccLayout, class GEngine, class GLayout>
__device__ __forceinline__ void store_tile(TiledMma const& mma, Tensor<AccEngine, AccLayout> const& acc,
                                           Tensor<GEngine, GLayout> const& mX, int tile_row, void* smem, int tid) {
  using To = cute::remove_cvref_t<typename GEngine::value_type>;
  static_assert(sizeof(To) == 2, "O must be a 16-bit type");
  Tensor rX = convert<To>(acc);                                                               // (MMA, MMA_M, MMA_N)
  Tensor sX = make_tensor(make_smem_ptr(reinterpret_cast<To*>(smem)), smem_layout<To, ROWS, COLS>());  // (ROWS, COLS)
  auto r2s = make_tiled_copy_C(Copy_Atom<UniversalCopy<uint32_t>, To>{}, mma);
  auto thr_r2s = r2s.get_thread_slice(tid);
  Tensor tXrX = thr_r2s.retile_S(rX);
  Tensor tXsX = thr_r2s.partition_D(sX);
  __syncthreads();
  cute::copy(r2s, tXrX, tXsX);
  __syncthreads();

  auto s2g_tiled = make_g2s_copy<To, THREADS, g2s_threads_per_row<To, COLS>(), false>();
  auto s2g = s2g_tiled.get_thread_slice(tid);
  Tensor gX = local_tile(mX, Shape<Int<ROWS>, Int<COLS>>{}, make_coord(tile_row, 0));  // (ROWS, COLS)
  Tensor tXsX2 = s2g.partition_S(sX);                                                  // (CPY, CPY_M, CPY_K)
  Tensor tXgX = s2g.partition_D(gX);
  Tensor tXcX = s2g.partition_D(make_identity_tensor(Shape<Int<ROWS>, Int<COLS>>{}));
  Tensor tXrX2 = make_fragment_like(tXsX2);
  cute::copy(s2g_tiled, tXsX2, tXrX2);
  const int rows_left = int(size<0>(mX)) - tile_row * ROWS;
  CUTE_UNROLL
  for (int m = 0; m < size<1>(tXrX2); ++m) {
    if (get<0>(tXcX(0, m, 0)) < rows_left) cute::copy(s2g_tiled, tXrX2(_, m, _), tXgX(_, m, _));
  }
}

// r: a row vector of the ROWS-row accumulator tiles; mX: the global vector (rows).
template <int ROWS, class TiledMma, class REngine, class RLayout, class GEngine, class GLayout>
__device__ __forceinline__ void store_rows(TiledMma const& mma, Tensor<REngine, RLayout> const& r,
                                           Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<ROWS>, _8>{}));  // (MMA, MMA_M, 1) -> (row, col)
  auto cr = rows_view(c);
  const int rows_left = int(size<0>(mX)) - tile_row * ROWS;
  if (tid % 4 == 0) {
    CUTE_UNROLL
    for (int i = 0; i < size<0>(cr); ++i) {
      const int row = get<0>(cr(i, 0));
      if (row < rows_left) mX(tile_row * ROWS + row) = r(i);
    }
  }
}

}  // namespace qattn
