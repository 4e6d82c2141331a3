// qattn device runtime: the TL element-wise, row and conversion Computes on register tiles.
// A 2-D register tile is an mma accumulator fragment ((2,2), MMA_M, MMA_N); a TL row vector (BM)
// holds one value per tile row this thread owns (2 * MMA_M of them), in the order of
// rows_view(tile) mode 0. A row is spread over the 4 threads of a quad (lane % 4): row reductions
// finish with two __shfl_xor_sync (1, 2).
// TL arithmetic (docs/tl.md): IEEE, except that -inf - -inf and -inf + inf give -inf; a row
// broadcast Subtract uses 0 for a row value of -inf (exactly TL's result wherever the tile value is
// -inf, i.e. on every fully masked row; see docs/translation.md).
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include "qattn/layout.cuh"
#include "qattn/ops.cuh"

namespace qattn {
using namespace cute;

// ---- scalar functors (TL semantics): qattn::op, ops.cuh -------------------------------------------

// ---- row vectors ----------------------------------------------------------------------------------
// A row vector for the rows of accumulator `acc` (any N): (2 * MMA_M) values.
template <class T, class Acc>
__device__ __forceinline__ auto make_rows(Acc const& acc) {
  using R = decltype(size<0>(acc_rowcol(acc.layout())));
  return make_tensor<T>(Shape<R>{});
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

// TL `Compute RowMax X and get Z` (accumulate: Z = max(Z, ...)). `scale` is a pending positive
// factor of X (the softmax scale folded into the exponent, see ew_rows): max(c*x) = c*max(x).
template <bool ACCUMULATE, class X, class Z>
__device__ __forceinline__ void row_max(X const& x, Z& z, float scale = 1.f) {
  auto xr = rows_view(x);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(xr); ++i) {
    float m = xr(i, 0);
    CUTE_UNROLL
    for (int k = 1; k < size<1>(xr); ++k) m = fmaxf(m, xr(i, k));
    m = quad_max(m) * scale;
    z(i) = ACCUMULATE ? fmaxf(z(i), m) : m;
  }
}

// TL `Compute RowSum X and get Z` (accumulate: Z += ...).
template <bool ACCUMULATE, class X, class Z>
__device__ __forceinline__ void row_sum(X const& x, Z& z, float scale = 1.f) {
  auto xr = rows_view(x);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(xr); ++i) {
    float s = 0.f;
    CUTE_UNROLL
    for (int k = 0; k < size<1>(xr); ++k) s += xr(i, k);
    s = quad_sum(s) * scale;
    z(i) = ACCUMULATE ? z(i) + s : s;
  }
}

// ---- element-wise -------------------------------------------------------------------------------
// Z = X op s (s a scalar); X and Z of one shape (2-D tile or row vector). Z may alias X.
template <class Op, class X, class Z>
__device__ __forceinline__ void ew_scalar(X const& x, float s, Z& z, float xscale = 1.f) {
  CUTE_UNROLL
  for (int i = 0; i < size(x); ++i) z(i) = Op{}(x(i) * xscale, s);
}

// Z = X op Y, same shape.
template <class Op, class X, class Y, class Z>
__device__ __forceinline__ void ew(X const& x, Y const& y, Z& z, float xscale = 1.f) {
  CUTE_UNROLL
  for (int i = 0; i < size(x); ++i) z(i) = Op{}(x(i) * xscale, y(i));
}

// Z = (xscale * X) op r, r a row vector broadcast along the columns of the 2-D tile X.
// Subtract with a pending scale is one FFMA per element: x * c - r (the online softmax exponent).
template <class Op, class X, class R, class Z>
__device__ __forceinline__ void ew_rows(X const& x, R const& r, Z& z, float xscale = 1.f) {
  auto xr = rows_view(x);
  auto zr = rows_view(z);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(xr); ++i) {
    if constexpr (std::is_same_v<Op, op::Sub>) {
      const float ri = r(i) == -INFINITY ? 0.f : r(i);
      CUTE_UNROLL
      for (int k = 0; k < size<1>(xr); ++k) zr(i, k) = fmaf(xr(i, k), xscale, -ri);
    } else {
      CUTE_UNROLL
      for (int k = 0; k < size<1>(xr); ++k) zr(i, k) = Op{}(xr(i, k) * xscale, r(i));
    }
  }
}

// Z = fn(xscale * X), element-wise (2-D tile or row vector).
template <class Fn, class X, class Z>
__device__ __forceinline__ void map(X const& x, Z& z, float xscale = 1.f) {
  CUTE_UNROLL
  for (int i = 0; i < size(x); ++i) z(i) = Fn{}(x(i) * xscale);
}

// TL `Compute Rescale X, a`: row i of X (2-D tile or row vector) times a(i).
template <class X, class R>
__device__ __forceinline__ void rescale(X& x, R const& a) {
  if constexpr (decltype(rank(x))::value == 1) {
    CUTE_UNROLL
    for (int i = 0; i < size(x); ++i) x(i) *= a(i);
  } else {
    auto xr = rows_view(x);
    CUTE_UNROLL
    for (int i = 0; i < size<0>(xr); ++i) {
      CUTE_UNROLL
      for (int k = 0; k < size<1>(xr); ++k) xr(i, k) *= a(i);
    }
  }
}
template <class X>
__device__ __forceinline__ void rescale_scalar(X& x, float a) {
  CUTE_UNROLL
  for (int i = 0; i < size(x); ++i) x(i) *= a;
}

// TL `Compute Normalize O, l`: row i of O divided by l(i); a row with l(i) = 0 becomes 0.
// `xscale` is a pending factor of O (fp8: the V descale).
template <class X, class R>
__device__ __forceinline__ void normalize(X& x, R const& l, float xscale = 1.f) {
  auto xr = rows_view(x);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(xr); ++i) {
    const float inv = (l(i) == 0.f || l(i) != l(i)) ? 0.f : xscale / l(i);
    CUTE_UNROLL
    for (int k = 0; k < size<1>(xr); ++k) xr(i, k) *= inv;
  }
}

// TL `Compute Convert X and get Z DTYPE`: a new register tensor of X's layout in type To
// (round to nearest even; fp8 e4m3 saturates to +-448).
template <class To, class X>
__device__ __forceinline__ auto convert(X const& x, float xscale = 1.f) {
  using From = typename X::value_type;
  constexpr int N = decltype(size(x))::value;
  Tensor y = make_tensor<To>(x.layout());
  cutlass::Array<From, N> src;
  CUTE_UNROLL
  for (int i = 0; i < N; ++i) src[i] = x(i) * xscale;
  cutlass::NumericArrayConverter<To, From, N, cutlass::FloatRoundStyle::round_to_nearest> cvt;
  cutlass::Array<To, N> dst = cvt(src);
  CUTE_UNROLL
  for (int i = 0; i < N; ++i) y(i) = dst[i];
  return y;
}

}  // namespace qattn
