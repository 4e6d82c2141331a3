// qattn device runtime: the TL `Compute Mask S at [r, c] with M` on a score tile.
// The tile's element (i, k) is query row0 + i against key col0 + k (row0 = r * rows(S),
// col0 = c * cols(S)); keys the mask hides become -inf. With off = seqlen_k - seqlen_q:
//   bounds           k < seqlen_k (and k >= 0)
//   causal           also k <= q + off   (bottom-right aligned)
//   causal_top_left  also k <= q
//   window(L, R)     also q + off - L <= k <= q + off + R
// Query rows past seqlen_q are not masked (TL: computed, never stored). MaskKind is the pipeline's
// one mask vocabulary (include/qattn/kinds.h); the device takes Bounds, Causal, CausalTopLeft and
// Window (a kernel without a mask uses Bounds; None would mean the same, Named never comes here).
// On a tile that the mask leaves whole, masking is the identity: tile_needs_mask() says so from
// the tile's corners (one uniform branch per tile), and apply_mask() skips such tiles.
#pragma once
#include <cute/tensor.hpp>

#include "qattn/kinds.h"
#include "qattn/layout.cuh"

namespace qattn {
using namespace cute;

struct MaskArgs {
  int seqlen_q, seqlen_k;
  int left = 0, right = 0;  // Window only
};

template <MaskKind K>
__device__ __forceinline__ bool key_visible(int q, int k, MaskArgs const& a) {
  static_assert(K != MaskKind::Named, "a Named mask is a TL declaration, not a device mask kind");
  const int off = a.seqlen_k - a.seqlen_q;
  bool ok = k >= 0 && k < a.seqlen_k;
  if constexpr (K == MaskKind::Causal) ok = ok && k <= q + off;
  if constexpr (K == MaskKind::CausalTopLeft) ok = ok && k <= q;
  if constexpr (K == MaskKind::Window) ok = ok && k >= q + off - a.left && k <= q + off + a.right;
  return ok;
}

// A window row's visible keys as one range [lo, hi] (empty when lo > hi): the k with
// key_visible<Window>(q, k, a).
struct ColRange {
  int lo, hi;
};
__device__ __forceinline__ ColRange window_cols(int q, MaskArgs const& a) {
  const int off = a.seqlen_k - a.seqlen_q;
  return {max(0, q + off - a.left), min(a.seqlen_k - 1, q + off + a.right)};
}

// True when some key of the (ROWS, COLS) tile at (row0, col0) is hidden from some query row.
template <MaskKind K>
__device__ __forceinline__ bool tile_needs_mask(int row0, int col0, int rows, int cols, MaskArgs const& a) {
  const int off = a.seqlen_k - a.seqlen_q;
  const int last_col = col0 + cols - 1, last_row = row0 + rows - 1;
  bool need = col0 < 0 || last_col >= a.seqlen_k;
  if constexpr (K == MaskKind::Causal) need = need || last_col > row0 + off;
  if constexpr (K == MaskKind::CausalTopLeft) need = need || last_col > row0;
  if constexpr (K == MaskKind::Window) need = need || last_col > row0 + off + a.right || col0 < last_row + off - a.left;
  return need;
}

// Masks the (M, N) accumulator tile `s` (MMA, MMA_M, MMA_N) at element origin (row0, col0); `tid`
// picks this thread's coordinates through the TiledMMA. T: the tile holds the keys along its rows
// (TL `Compute Mask St^T at [r, c]`): row0 is then its first query and col0 its first key, and each
// element is tested on its own.
template <MaskKind K, int M, int N, bool T = false, class TiledMma, class SEngine, class SLayout>
__device__ __forceinline__ void apply_mask(TiledMma const& mma, Tensor<SEngine, SLayout>& s, int row0, int col0,
                                           MaskArgs const& a, int tid) {
  auto sr = rows_view(s);
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));  // (MMA, MMA_M, MMA_N) -> (row, col)
  auto cr = rows_view(c);
  if (!tile_needs_mask<K>(row0, col0, T ? N : M, T ? M : N, a)) return;
  if constexpr (T) {
    CUTE_UNROLL
    for (int i = 0; i < size<0>(sr); ++i) {
      const int k = col0 + get<0>(cr(i, 0));
      CUTE_UNROLL
      for (int j = 0; j < size<1>(sr); ++j)
        if (!key_visible<K>(row0 + get<1>(cr(i, j)), k, a)) sr(i, j) = -INFINITY;
    }
    return;
  }
  CUTE_UNROLL
  for (int i = 0; i < size<0>(sr); ++i) {
    const int q = row0 + get<0>(cr(i, 0));
    if constexpr (K == MaskKind::Window) {
      // the row's visible keys as one range relative to the tile, once per row: each element is then
      // two compares of its column against it (a window's bounds are launch arguments; H200, sm80
      // d128: 2.5% faster than the per-element test, bench/results/2026-11-26-h200-launch-args)
      const ColRange r = window_cols(q, a);
      const int lo_t = r.lo - col0, hi_t = r.hi - col0;
      CUTE_UNROLL
      for (int k = 0; k < size<1>(sr); ++k) {
        const int col = get<1>(cr(i, k));
        if (col < lo_t || col > hi_t) sr(i, k) = -INFINITY;
      }
    } else {  // causal and bounds: the per-element test (the range form spills at d64 causal: 1-1.5% slower)
      CUTE_UNROLL
      for (int k = 0; k < size<1>(sr); ++k) {
        if (!key_visible<K>(q, col0 + get<1>(cr(i, k)), a)) sr(i, k) = -INFINITY;
      }
    }
  }
}

}  // namespace qattn
