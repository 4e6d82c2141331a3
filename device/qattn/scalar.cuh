// qattn device runtime: the scalar functions of TL Score / Mask declarations (docs/tl.md, "Score and
// Mask declarations"), shared by every kernel family; no CuTe, so a Hopper kernel includes it alone.
//   aux_at      an auxiliary tensor's entry with every index clamped into its extent (TL's rule:
//               rows past seqlen_q and keys past seqlen_k read the last entry)
//   fast_tanh   one MUFU instruction
//   iclamp, fmodfloor, fclamp   TL's clamp / floor-modulo
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

__host__ __device__ __forceinline__ int iclamp(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
__host__ __device__ __forceinline__ float fmodfloor(float a, float b) { return a - floorf(a / b) * b; }
__host__ __device__ __forceinline__ float fclamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }

}  // namespace qattn
