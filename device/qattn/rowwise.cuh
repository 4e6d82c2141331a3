// qattn device runtime: row-distributed register tiles, for the kernels whose TL works on rows
// without GEMMs (the combine of split-key attention, src/backend/combine).
//
// A TL register tile (ROWS, COLS) is spread over the block's WARPS warps: warp w owns the tile rows
// w, w + WARPS, ...; in a row, lane l owns the VEC consecutive columns at (k * 32 + l) * VEC for
// k = 0, 1, ... (32 lanes cover 32 * VEC columns per step, so a warp's accesses to one row are
// contiguous). A thread's share is a Tile (ROWS / WARPS, COLS / 32) of fp32; a TL row vector (ROWS)
// is a Vec of the thread's rows (the same values in every lane of a warp).
//
// No CuTe or CUTLASS here: a generated combine compiles in about a second instead of the ten that
// cute/tensor.hpp alone costs nvcc (the first call of a key split waits for it). The scalar
// semantics are the one definition in ops.cuh (TL's -inf rules, fast exp / log).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "qattn/ops.cuh"

namespace qattn::rows {

template <int ROWS, int COLS, int WARPS>
struct RowTiling {
  static_assert(ROWS % WARPS == 0, "the tile's rows are dealt to the warps evenly");
  static_assert(COLS % 32 == 0, "a row is dealt to the 32 lanes evenly");
  static constexpr int kRows = ROWS / WARPS;  // rows per thread
  static constexpr int kCols = COLS / 32;     // columns per thread
  static constexpr int kVec = kCols % 4 == 0 ? 4 : kCols % 2 == 0 ? 2 : 1;  // consecutive columns per access
  static constexpr int kThreads = 32 * WARPS;
  // (modulo WARPS: the warps of a consumer warpgroup of a larger block deal a tile as a block of its own)
  __device__ __forceinline__ static int warp() { return int(threadIdx.x) / 32 % WARPS; }
  __device__ __forceinline__ static int lane() { return int(threadIdx.x) % 32; }
  __device__ __forceinline__ static int row(int i) { return warp() + i * WARPS; }  // the tile row of the thread's row i
  __device__ __forceinline__ static int col(int k) { return (k * 32 + lane()) * kVec; }  // first column of chunk k
};

// A thread's share of a (ROWS, COLS) tile: R rows of C columns.
template <int R, int C>
struct Tile {
  static constexpr int kRows = R, kCols = C;
  float v[R][C];
  __device__ __forceinline__ float& operator()(int i, int k) { return v[i][k]; }
  __device__ __forceinline__ float operator()(int i, int k) const { return v[i][k]; }
};
// A thread's rows of a (ROWS) row vector.
template <int R>
struct Vec {
  static constexpr int kRows = R;
  float v[R];
  __device__ __forceinline__ float& operator()(int i) { return v[i]; }
  __device__ __forceinline__ float operator()(int i) const { return v[i]; }
};

template <class Tiling>
using TileOf = Tile<Tiling::kRows, Tiling::kCols>;
template <class Tiling>
using VecOf = Vec<Tiling::kRows>;

template <int R, int C>
__device__ __forceinline__ void fill(Tile<R, C>& x, float a) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < C; ++k) x(i, k) = a;
}
template <int R>
__device__ __forceinline__ void fill(Vec<R>& x, float a) {
#pragma unroll
  for (int i = 0; i < R; ++i) x(i) = a;
}

// ---- storage types ----------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N consecutive elements, accessed as one (aligned to their size: the host checks the pointers and strides)
template <class T, int N>
struct alignas(sizeof(T) * N) Chunk {
  T x[N];
};

// ---- copies --------------------------------------------------------------------------------------
// The chunk at `p` when `in`, zeros otherwise, by one predicated load. No branch: with `in ? load :
// 0` the compiler put each load behind a branch on `in`, so an unrolled loop's loads did not overlap
// (the 16-part decoding combine waited for each part's row in turn, 0.25 us a part on an H200:
// bench/results/2026-11-29-h200-combine-loads). A row that is not `in` is not read at all. Weak loads:
// ptxas hoists them above an unrolled loop's math (strong ones, ld.global.cg, it did not).
template <class T, int N>
__device__ __forceinline__ Chunk<T, N> load_or_zero(const Chunk<T, N>* p, bool in) {
  constexpr int kBytes = int(sizeof(Chunk<T, N>));
  static_assert(kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16, "a chunk is 2, 4, 8 or 16 bytes");
  union {
    Chunk<T, N> c;
    uint32_t w[kBytes >= 4 ? kBytes / 4 : 1];
    unsigned short h;
  } u;
  const int pred = in ? 1 : 0;
  if constexpr (kBytes == 16) {
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n"
                 " mov.b32 %3, 0;\n @q ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
                 : "=r"(u.w[0]), "=r"(u.w[1]), "=r"(u.w[2]), "=r"(u.w[3])
                 : "l"(p), "r"(pred));
  } else if constexpr (kBytes == 8) {
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %3, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n"
                 " @q ld.global.v2.u32 {%0, %1}, [%2];\n}"
                 : "=r"(u.w[0]), "=r"(u.w[1])
                 : "l"(p), "r"(pred));
  } else if constexpr (kBytes == 4) {
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n mov.b32 %0, 0;\n @q ld.global.u32 %0, [%1];\n}"
                 : "=r"(u.w[0])
                 : "l"(p), "r"(pred));
  } else {
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n mov.b16 %0, 0;\n @q ld.global.u16 %0, [%1];\n}"
                 : "=h"(u.h)
                 : "l"(p), "r"(pred));
  }
  return u.c;
}

// Where row r of a global view starts (elements from its base): r * row_stride, or with GQA
// packing (`{pack: G}`: row r is query r / G of the group's head r % G) (r / G) * row_stride +
// (r % G) * head_stride.
struct RowAddr {
  int64_t row_stride = 0, head_stride = 0;
  int pack = 1;
  __device__ __forceinline__ RowAddr(int64_t rs) : row_stride(rs) {}
  __device__ __forceinline__ RowAddr(int64_t rs, int64_t hs, int g) : row_stride(rs), head_stride(hs), pack(g) {}
  __device__ __forceinline__ int64_t operator()(int r) const {
    return pack == 1 ? int64_t(r) * row_stride : int64_t(r / pack) * row_stride + int64_t(r % pack) * head_stride;
  }
};

// TL `Copy X (ROWS, COLS) in coordinate [m, 0] from global to register`: the tile rows row0 ..
// row0 + ROWS - 1 of a (rows, COLS) global view with row stride `row_stride` (elements), converted
// to fp32; rows past `rows` read as 0 (and are not read).
template <class Tiling, class T>
__device__ __forceinline__ void load_tile(TileOf<Tiling>& x, const T* base, RowAddr at, int row0, int rows) {
  constexpr int V = Tiling::kVec;
#pragma unroll
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    const bool in = r < rows;
#pragma unroll
    for (int k = 0; k < Tiling::kCols / V; ++k) {
      const Chunk<T, V> c = load_or_zero(reinterpret_cast<const Chunk<T, V>*>(base + at(r) + Tiling::col(k)), in);
#pragma unroll
      for (int e = 0; e < V; ++e) x(i, k * V + e) = to_float(c.x[e]);
    }
  }
}

// TL `Copy X (ROWS, COLS) in coordinate [m, 0] from register to global`: rounded to T (nearest
// even); rows past `rows` are not written.
template <class Tiling, class T>
__device__ __forceinline__ void store_tile(const TileOf<Tiling>& x, T* base, RowAddr at, int row0, int rows) {
  constexpr int V = Tiling::kVec;
#pragma unroll
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    if (r >= rows) continue;
#pragma unroll
    for (int k = 0; k < Tiling::kCols / V; ++k) {
      Chunk<T, V> c;
#pragma unroll
      for (int e = 0; e < V; ++e) c.x[e] = from_float<T>(x(i, k * V + e));
      *reinterpret_cast<Chunk<T, V>*>(base + at(r) + Tiling::col(k)) = c;
    }
  }
}

// TL `Copy X (ROWS) in coordinate [m] from global to register`: one fp32 value per row (stride
// `stride` between rows); rows past `rows` read as 0.
template <class Tiling>
__device__ __forceinline__ void load_vec(VecOf<Tiling>& x, const float* base, RowAddr at, int row0, int rows) {
#pragma unroll
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    x(i) = load_or_zero(reinterpret_cast<const Chunk<float, 1>*>(base + at(r)), r < rows).x[0];
  }
}

// TL `Copy X (ROWS) in coordinate [m] from register to global`: written by lane 0 of the warp that
// owns the row; nothing when `base` is NULL (an optional output the caller did not ask for).
template <class Tiling>
__device__ __forceinline__ void store_vec(const VecOf<Tiling>& x, float* base, RowAddr at, int row0, int rows) {
  if (base == nullptr || Tiling::lane() != 0) return;
#pragma unroll
  for (int i = 0; i < Tiling::kRows; ++i) {
    const int r = row0 + Tiling::row(i);
    if (r < rows) base[at(r)] = x(i);
  }
}

// ---- Computes (TL semantics: the functors of ops.cuh) -----------------------------------------------
// Z = X op Y, same shape (tiles or row vectors). Z may alias X.
template <class Op, int R, int C>
__device__ __forceinline__ void ew(const Tile<R, C>& x, const Tile<R, C>& y, Tile<R, C>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < C; ++k) z(i, k) = Op{}(x(i, k), y(i, k));
}
template <class Op, int R>
__device__ __forceinline__ void ew(const Vec<R>& x, const Vec<R>& y, Vec<R>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i) z(i) = Op{}(x(i), y(i));
}
// Z = X op r, r a row vector broadcast along the columns of the tile X.
template <class Op, int R, int C>
__device__ __forceinline__ void ew_rows(const Tile<R, C>& x, const Vec<R>& r, Tile<R, C>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < C; ++k) z(i, k) = Op{}(x(i, k), r(i));
}
// Z = X op s, s a scalar.
template <class Op, int R, int C>
__device__ __forceinline__ void ew_scalar(const Tile<R, C>& x, float s, Tile<R, C>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < C; ++k) z(i, k) = Op{}(x(i, k), s);
}
template <class Op, int R>
__device__ __forceinline__ void ew_scalar(const Vec<R>& x, float s, Vec<R>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i) z(i) = Op{}(x(i), s);
}
// Z = fn(X), element-wise.
template <class Fn, int R, int C>
__device__ __forceinline__ void map(const Tile<R, C>& x, Tile<R, C>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < C; ++k) z(i, k) = Fn{}(x(i, k));
}
template <class Fn, int R>
__device__ __forceinline__ void map(const Vec<R>& x, Vec<R>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i) z(i) = Fn{}(x(i));
}
// TL `Compute Rescale X, a`: row i of X times a(i) (a row vector or a scalar).
template <int R, int C>
__device__ __forceinline__ void rescale(Tile<R, C>& x, const Vec<R>& a) {
  ew_rows<op::Mul>(x, a, x);
}
template <int R>
__device__ __forceinline__ void rescale(Vec<R>& x, const Vec<R>& a) {
  ew<op::Mul>(x, a, x);
}
template <class X>
__device__ __forceinline__ void rescale_scalar(X& x, float a) {
  ew_scalar<op::Mul>(x, a, x);
}
// TL `Compute Normalize O, l`: row i of O divided by l(i); a row with l(i) = 0 becomes 0.
template <int R, int C>
__device__ __forceinline__ void normalize(Tile<R, C>& x, const Vec<R>& l) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float inv = (l(i) == 0.f || l(i) != l(i)) ? 0.f : 1.f / l(i);
#pragma unroll
    for (int k = 0; k < C; ++k) x(i, k) *= inv;
  }
}

// TL `Compute RowMax | RowSum X and get Z` (ACCUMULATE: `and accumulate Z`, max / +): the thread's
// columns, then the 32 lanes (butterfly shuffles).
template <bool MAX, bool ACCUMULATE, int R, int C>
__device__ __forceinline__ void row_reduce_lanes(const Tile<R, C>& x, Vec<R>& z) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    float a = x(i, 0);
#pragma unroll
    for (int k = 1; k < C; ++k) a = MAX ? fmaxf(a, x(i, k)) : a + x(i, k);
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) {
      const float b = __shfl_xor_sync(0xffffffffu, a, m);
      a = MAX ? fmaxf(a, b) : a + b;
    }
    z(i) = ACCUMULATE ? (MAX ? fmaxf(z(i), a) : z(i) + a) : a;
  }
}

}  // namespace qattn::rows
