// qattn device runtime, Hopper (sm90a): the pieces every warpgroup-MMA (wgmma, HGMMA in SASS) GEMM
// is built of: the aligned dynamic shared memory, shared-memory matrix descriptors (one per tile,
// stepped by compile-time offsets), the warpgroup index, register fences, the
// fence / commit / wait of a group; the instruction itself is an atom of wgmma_atoms.cuh. The GEMMs
// themselves: the forward's gemm_ss / gemm_rs (tile.cuh), the backward's wg_gemm_ss / wg_gemm_rs
// (backward.cuh), both
//   TL `Compute GEMM Q, K^T and get S`       S(64 x BN) = Q(64 x d) K(BN x d)^T, both operands
//       read from the swizzled shared tiles (Wgmma<BN, Element, Major::K, Major::K>::ss)
//   TL `Compute GEMM P, V and accumulate O`  O(64 x dv) += P(64 x BN) V(BN x dv), P from registers
//       (the accumulator of the first GEMM converted in place: the TL Reshape), V read from shared
//       memory as an MN-major B operand (Wgmma<dv, Element, Major::K, Major::MN>::rs).
// One consumer warpgroup owns 64 query rows. The atom is chosen by the translator (its N is the
// tile's BN or dv) and passed in as a type.
//
// Accumulator layout (per n8 column chunk i, per thread t of the warpgroup): registers 4i..4i+3 hold
// (r, 8i + 2c), (r, 8i + 2c + 1), (r + 8, 8i + 2c), (r + 8, 8i + 2c + 1) with
// r = 16 * (t / 32) + (t % 32) / 4 and c = t % 4, the mma.sync m16n8 layout repeated along N.
#pragma once
#include <cstdint>
#include <utility>

#include "qattn/sm90/wgmma_atoms.cuh"

namespace qattn::sm90 {

// Shared-memory matrix descriptor of a 128-byte-swizzled operand.
//   K-major (Q, K: rows of 64 contiguous elements): SBO = 1024 B between 8-row groups; LBO unused.
//   MN-major (V as B of the second GEMM): LBO = stride between 64-column blocks, SBO = 1024 B
//   between groups of 8 rows (the K direction).
__device__ __forceinline__ uint64_t smem_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = 0;
  d |= uint64_t((addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= uint64_t(1) << 62;  // 128-byte swizzle
  return d;
}

// Descriptor of an operand in a (ROWS, cols) shared tile of 64-column blocks, at its first k16 step:
//   K-major (the operand's K runs along the tile's columns): its rows start at row `off`.
//   MN-major (K runs along the tile's rows): its M / N starts at column `off` (a multiple of 64).
template <bool MN, int ROWS, class Element>
__device__ __forceinline__ uint64_t operand_desc(const Element* base, int off) {
  if constexpr (MN) return smem_desc(base + (off / 64) * ROWS * 64, ROWS * 128, 1024);
  else return smem_desc(base + off * 64, 16, 1024);
}
// ... and the step from there to k16 step `k`: a compile-time number of 16-byte units added to the
// descriptor's start-address field (the tile lies inside shared memory, so the field never carries),
// instead of a descriptor computed from an address per step.
template <bool MN, int ROWS, class Element>
__device__ __forceinline__ constexpr uint64_t operand_step(int k) {
  if constexpr (MN) return uint64_t(k * 16 * 64 * int(sizeof(Element))) >> 4;
  else return uint64_t(((k / 4) * ROWS * 64 + (k % 4) * 16) * int(sizeof(Element))) >> 4;
}

// The dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle of a wgmma
// operand repeats every 1024 bytes; the launch asks for 1024 bytes more). An offset from the
// __shared__ array itself, not a round trip through an integer, so the compiler still knows the
// pointer is shared memory: every access through it is an LDS / STS, not a generic LD / ST.
__device__ __forceinline__ char* smem_aligned() {
  extern __shared__ __align__(128) char smem_raw[];
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  return smem_raw + ((1024u - (at & 1023u)) & 1023u);
}

// This thread's warpgroup (threadIdx.x / 128), taken from lane 0 so that the compiler knows it is the
// same across the warp: what is computed from it (a warpgroup's rows of a wgmma operand, their
// descriptors) stays in uniform registers.
__device__ __forceinline__ int warpgroup() { return __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0); }

template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

}  // namespace qattn::sm90
