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

// Shared-memory matrix descriptor of a swizzled operand, in tiles of the lowering's layout
// (qattn::smem_layout: atoms of 8 rows x AC contiguous elements, AC = 64 16-bit elements: the
// 128-byte swizzle; AC = 32: the 64-byte swizzle, for tiles that a wgmma reads from a column that is
// a multiple of 32 but not of 64, e.g. the halves of MLA's 192 columns).
//   K-major (Q, K: rows of AC contiguous elements): SBO = 8 rows x the atom row between 8-row groups;
//   LBO unused.
//   MN-major (V as B of the second GEMM): LBO = stride between AC-column blocks, SBO = 8 rows x the
//   atom row between groups of 8 rows (the K direction).
__device__ __forceinline__ uint64_t smem_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes, uint32_t swizzle = 1) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = 0;
  d |= uint64_t((addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= uint64_t(swizzle) << 62;  // 1: 128-byte swizzle, 2: 64-byte
  return d;
}

// Descriptor of an operand in a (ROWS, cols) shared tile of AC-column blocks, at its first k16 step:
//   K-major (the operand's K runs along the tile's columns): its rows start at row `off`.
//   MN-major (K runs along the tile's rows): its M / N starts at column `off` (a multiple of AC).
template <bool MN, int ROWS, class Element, int AC = 64>
__device__ __forceinline__ uint64_t operand_desc(const Element* base, int off) {
  static_assert(AC == 64 || AC == 32, "atoms of 64 (128-byte swizzle) or 32 (64-byte) 16-bit elements");
  constexpr uint32_t kRow = AC * 2, kSwizzle = AC == 64 ? 1 : 2;
  if constexpr (MN) return smem_desc(base + (off / AC) * ROWS * AC, ROWS * kRow, 8 * kRow, kSwizzle);
  else return smem_desc(base + off * AC, 16, 8 * kRow, kSwizzle);
}
// ... and the step from there to k16 step `k`: a compile-time number of 16-byte units added to the
// descriptor's start-address field (the tile lies inside shared memory, so the field never carries),
// instead of a descriptor computed from an address per step.
template <bool MN, int ROWS, class Element, int AC = 64>
__device__ __forceinline__ constexpr uint64_t operand_step(int k) {
  constexpr int kSteps = AC / 16;  // k16 steps per atom row (K-major)
  if constexpr (MN) return uint64_t(k * 16 * AC * int(sizeof(Element))) >> 4;
  else return uint64_t(((k / kSteps) * ROWS * AC + (k % kSteps) * 16) * int(sizeof(Element))) >> 4;
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
