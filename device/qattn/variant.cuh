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
// The scalar functions a declaration may call (aux_at, fast_tanh, ...): scalar.cuh.
#pragma once
#include <cute/tensor.hpp>

#include "qattn/layout.cuh"
#include "qattn/scalar.cuh"

namespace qattn {
using namespace cute;

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
