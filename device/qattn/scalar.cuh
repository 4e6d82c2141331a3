// qattn device runtime: the scalar functions of TL Score / Mask declarations (docs/tl.md, "Score and
// Mask declarations"), shared by every kernel family; no CuTe, so a Hopper kernel includes it alone.
//   aux_at      an auxiliary tensor's entry with every index clamped into its extent (TL's rule:
//               rows past seqlen_q and keys past seqlen_k read the last entry)
//   fast_tanh   one MUFU instruction
//   iclamp, fmodfloor, fclamp   TL's clamp / floor-modulo
//   next_visible  a `{skip: M}` loop's next visited tile (batched `empty when` reads)
#pragma once
#include <cmath>
#include <cstdint>

namespace qattn {

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

// A `{skip: M}` loop's next visited tile: the first t = j + kStep, j + 2 kStep, ... (kStep +1 or -1)
// that visible(t) accepts, or `end` (the loop's bound: hi going up, lo - 1 going down) when none is
// left. The next tile alone first (inside a document, the common case: one clause, as a plain walk);
// past an empty one, visible() is evaluated for kBatch tiles at a time: their `empty when` clauses
// read independent auxiliary entries, so a run of empty tiles (a document's far side: every tile past
// the key tile's last document) costs one memory round trip per kBatch tiles instead of one per tile.
// Tiles past `end` may be evaluated (their reads are clamped: aux_at) but are never returned.
template <int kBatch, int kStep, class F>
__device__ __forceinline__ int next_visible(int j, int end, F&& visible) {
  static_assert(kStep == 1 || kStep == -1, "next_visible walks one tile at a time, up or down");
  j += kStep;
  if (kStep > 0 ? j >= end : j <= end) return end;
  if (visible(j)) return j;
  for (;;) {
    bool v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = visible(j + kStep * (u + 1));
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int t = j + kStep * (u + 1);
      if (kStep > 0 ? t >= end : t <= end) return end;
      if (v[u]) return t;
    }
    j += kStep * kBatch;
  }
}

__host__ __device__ __forceinline__ int iclamp(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
__host__ __device__ __forceinline__ float fmodfloor(float a, float b) { return a - floorf(a / b) * b; }
__host__ __device__ __forceinline__ float fclamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }

}  // namespace qattn
