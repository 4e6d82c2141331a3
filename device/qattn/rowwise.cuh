// qattn device runtime: row-distributed register tiles, for the kernels whose TL works on rows
// without GEMMs (the combine of split-key attention, src/backend/combine).
//
// A TL register tile (ROWS, COLS) is spread over the block's WARPS warps: warp w owns the tile rows
// w, w + WARPS, ...; in a row, lane l owns the VEC consecutive columns at (k * 32 + l) * VEC for
// k = 0, 1, ... (32 lanes cover 32 * VEC columns per step, so a warp's loads of one row are
// contiguous). A thread's share is a plain CuTe register tensor (ROWS / WARPS, COLS / 32), whose
// rank-2 layout rows_view() takes as it is: the element-wise and row Computes of softmax.cuh (ew,
// ew_rows, ew_scalar, map, rescale, normalize) apply unchanged. A TL row vector (ROWS) holds the
// values of the thread's rows (the same in every lane of a warp).
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

#include "qattn/layout.cuh"
#include "qattn/ops.cuh"

namespace qattn {
using namespace cute;

template <int ROWS, int COLS, int WARPS>
struct RowTiling {
  static_assert(ROWS % WARPS == 0, "the tile's rows are dealt to the warps evenly");
  static_assert(COLS % 32 == 0, "a row is dealt to the 32 lanes evenly");
  static constexpr int kRows = ROWS / WARPS;  // rows per thread
  static constexpr int kCols = COLS / 32;     // columns per thread
  static constexpr int kVec = kCols % 4 == 0 ? 4 : kCols % 2 == 0 ? 2 : 1;  // consecutive columns per access
  static constexpr int kThreads = 32 * WARPS;
  __device__ __forceinline__ static int warp() { return int(threadIdx.x) / 32; }
  __device__ __forceinline__ static int lane() { return int(threadIdx.x) % 32; }
  __device__ __forceinline__ static int row(int i) { return warp() + i * WARPS; }  // the tile row of the thread's row i
  __device__ __forceinline__ static int col(int k) { return (k * 32 + lane()) * kVec; }  // first column of chunk k
};

template <class Tiling>
__device__ __forceinline__ auto row_tile() {
  return make_tensor<float>(Shape<Int<Tiling::kRows>, Int<Tiling::kCols>>{});  // (rows, cols) of this thread
}
template <class Tiling>
__device__ __forceinline__ auto row_vec() {
  return make_tensor<float>(Shape<Int<Tiling::kRows>>{});
}

template <class X>
__device__ __forceinline__ void fill(X& x, float v) {
  CUTE_UNROLL
  for (int i = 0; i < size(x); ++i) x(i) = v;
}

// TL `Copy X (ROWS, COLS) in coordinate [m, 0] from global to register`: the tile rows row0 ..
// row0 + ROWS - 1 of a (rows, COLS) global view with row stride `row_stride` (elements), converted
// to fp32; rows past `rows` read as 0.
template <class Tiling, class T, class X>
__device__ __forceinline__ void load_tile(X& x, const T* base, int64_t row_stride, int row0, int rows) {
  using Chunk = cutlass::Array<T, Tiling::kVec>;
  cutlass::NumericArrayConverter<float, T, Tiling::kVec> cvt;
  CUTE_UNROLL
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    CUTE_UNROLL
    for (int k = 0; k < Tiling::kCols / Tiling::kVec; ++k) {
      cutlass::Array<float, Tiling::kVec> v;
      if (r < rows) {
        v = cvt(*reinterpret_cast<const Chunk*>(base + int64_t(r) * row_stride + Tiling::col(k)));
      } else {
        v.fill(0.f);
      }
      CUTE_UNROLL
      for (int e = 0; e < Tiling::kVec; ++e) x(i, k * Tiling::kVec + e) = v[e];
    }
  }
}

// TL `Copy X (ROWS, COLS) in coordinate [m, 0] from register to global`: rounded to T (nearest
// even); rows past `rows` are not written.
template <class Tiling, class T, class X>
__device__ __forceinline__ void store_tile(X const& x, T* base, int64_t row_stride, int row0, int rows) {
  using Chunk = cutlass::Array<T, Tiling::kVec>;
  cutlass::NumericArrayConverter<T, float, Tiling::kVec, cutlass::FloatRoundStyle::round_to_nearest> cvt;
  CUTE_UNROLL
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    if (r >= rows) continue;
    CUTE_UNROLL
    for (int k = 0; k < Tiling::kCols / Tiling::kVec; ++k) {
      cutlass::Array<float, Tiling::kVec> v;
      CUTE_UNROLL
      for (int e = 0; e < Tiling::kVec; ++e) v[e] = x(i, k * Tiling::kVec + e);
      *reinterpret_cast<Chunk*>(base + int64_t(r) * row_stride + Tiling::col(k)) = cvt(v);
    }
  }
}

// TL `Copy X (ROWS) in coordinate [m] from global to register`: one fp32 value per row (stride
// `stride` between rows); rows past `rows` read as 0.
template <class Tiling, class X>
__device__ __forceinline__ void load_vec(X& x, const float* base, int64_t stride, int row0, int rows) {
  CUTE_UNROLL
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    x(i) = r < rows ? base[int64_t(r) * stride] : 0.f;
  }
}

// TL `Copy X (ROWS) in coordinate [m] from register to global`: written by lane 0 of the warp that
// owns the row; nothing when `base` is NULL (an optional output the caller did not ask for).
template <class Tiling, class X>
__device__ __forceinline__ void store_vec(X const& x, float* base, int64_t stride, int row0, int rows) {
  if (base == nullptr || Tiling::lane() != 0) return;
  CUTE_UNROLL
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    if (r < rows) base[int64_t(r) * stride] = x(i);
  }
}

// TL `Compute RowMax | RowSum X and get Z` (ACCUMULATE: `and accumulate Z`, max / +) on a
// row-distributed tile: the thread's columns, then the 32 lanes (butterfly shuffles).
template <bool MAX, bool ACCUMULATE, class X, class Z>
__device__ __forceinline__ void row_reduce_lanes(X const& x, Z& z) {
  CUTE_UNROLL
  for (int i = 0; i < size<0>(x); ++i) {
    float a = x(i, 0);
    CUTE_UNROLL
    for (int k = 1; k < size<1>(x); ++k) a = MAX ? fmaxf(a, x(i, k)) : a + x(i, k);
    CUTE_UNROLL
    for (int m = 16; m >= 1; m /= 2) {
      const float b = __shfl_xor_sync(0xffffffffu, a, m);
      a = MAX ? fmaxf(a, b) : a + b;
    }
    z(i) = ACCUMULATE ? (MAX ? fmaxf(z(i), a) : z(i) + a) : a;
  }
}

}  // namespace qattn
