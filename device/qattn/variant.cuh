// qattn device runtime: attention variants declared in TL (docs/tl.md, "Score and Mask
// declarations"). The generated code turns each declaration into a device lambda over the
// element's indices; these helpers walk a thread's part of a score tile and call them.
//   apply_score: `Compute Modify S at [r, c] with NAME`   s = f(s, q, k) for every element
//   (each with T = true for a tile held transposed: `Compute Modify St^T at [r, c] with NAME`)
//   apply_keep:  `Compute Mask S at [r, c] with NAME`     hide keys where keep(q, k) is false and
//                keys past seqlen_k; a tile the declaration's `full when` clause classifies as full
//                only gets the bounds (and nothing at all when it ends before seqlen_k)
// Auxiliary tensors are read through aux_at, which clamps every index into its extent (TL's rule:
// rows past seqlen_q and keys past seqlen_k read the last entry).
#pragma once
#include <cute/tensor.hpp>

#include "qattn/layout.cuh"

namespace qattn {
using namespace cute;

template <class T>
__device__ __forceinline__ float aux_at(const T* __restrict__ p, int n0, int i0) {
  i0 = i0 < 0 ? 0 : (i0 >= n0 ? n0 - 1 : i0);
  return float(__ldg(p + i0));
}
template <class T>
__device__ __forceinline__ float aux_at(const T* __restrict__ p, int n0, int n1, int i0, int i1) {
  i0 = i0 < 0 ? 0 : (i0 >= n0 ? n0 - 1 : i0);
  i1 = i1 < 0 ? 0 : (i1 >= n1 ? n1 - 1 : i1);
  return float(__ldg(p + int64_t(i0) * n1 + i1));
}

// tanh with one MUFU instruction (sm75+): relative error ~2^-11, below bf16/fp16 resolution of P.
__device__ __forceinline__ float fast_tanh(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}

CUTE_HOST_DEVICE int iclamp(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
CUTE_HOST_DEVICE float fmodfloor(float a, float b) { return a - floorf(a / b) * b; }
CUTE_HOST_DEVICE float fclamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }

// Calls f(x, q, k) for every element x (a reference) of this thread's part of the (M, N) score
// tile whose first query is q0 and first key k0: q its query index, k its key index. T: the tile
// holds the keys along its rows (TL `St^T`, the backward's transposed form), the queries along its
// columns.
template <int M, int N, bool T = false, class TiledMma, class SEngine, class SLayout, class F>
__device__ __forceinline__ void for_each_score(TiledMma const& mma, Tensor<SEngine, SLayout>& s, int q0, int k0, int tid, F&& f) {
  auto sr = rows_view(s);
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  auto cr = rows_view(c);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(sr); ++i) {
    const int r = get<0>(cr(i, 0));
    CUTE_UNROLL
    for (int k = 0; k < size<1>(sr); ++k) {
      if constexpr (T) f(sr(i, k), q0 + get<1>(cr(i, k)), k0 + r);
      else f(sr(i, k), q0 + r, k0 + get<1>(cr(i, k)));
    }
  }
}

template <int M, int N, bool T = false, class TiledMma, class SEngine, class SLayout, class F>
__device__ __forceinline__ void apply_score(TiledMma const& mma, Tensor<SEngine, SLayout>& s, int q0, int k0, F&& f, int tid) {
  for_each_score<M, N, T>(mma, s, q0, k0, tid, [&](float& x, int q, int k) { x = f(x, q, k); });
}

template <int M, int N, bool T = false, class TiledMma, class SEngine, class SLayout, class F>
__device__ __forceinline__ void apply_keep(TiledMma const& mma, Tensor<SEngine, SLayout>& s, int q0, int k0, int seqlen_k, bool full,
                                           F&& keep, int tid) {
  if (full && k0 + (T ? M : N) <= seqlen_k) return;  // every key visible: no masking cost
  for_each_score<M, N, T>(mma, s, q0, k0, tid, [&](float& x, int q, int k) {
    if (k >= seqlen_k || (!full && !keep(q, k))) x = -INFINITY;
  });
}

}  // namespace qattn
