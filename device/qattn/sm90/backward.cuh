// qattn device runtime, Hopper (sm90a): the moves of a backward program (TL `Kernel NAME backward`)
// lowered to warpgroup MMA (src/backend/bwd, wgmma mode). Each warpgroup (4 warps, 128 threads)
// issues its share of a GEMM:
//   wg_gemm_ss   both operands from shared tiles of the lowering's swizzled layout (64-element
//                column blocks, 128-byte swizzle, or 32-element blocks, 64-byte swizzle:
//                qattn::smem_layout); an operand stored with its
//                K dimension along the rows (a transposed A, a plain B) is MN-major for the wgmma
//   wg_gemm_rs   A from this warpgroup's registers (a converted accumulator: the TL Reshape), B
//                from a shared tile stored (K, N)
// The accumulators are register tiles of the lowering's Mma<R> (warps along M, 16 rows each) or
// MmaCols<R, C, WGN> (warpgroups side by side along N): for both the CuTe fragment of a thread is
// exactly the wgmma accumulator of its warpgroup, so every element-wise helper of backward.cuh works
// on them unchanged.
#pragma once
#include <cute/tensor.hpp>

#include "qattn/backward.cuh"
#include "qattn/sm90/wgmma.cuh"

namespace qattn::sm90 {
using namespace cute;

// The dynamic shared memory a wgmma reads was written by threads (st.shared, cp.async): make those
// writes visible to the async proxy (before the barrier that publishes them).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The register array of an owning CuTe register tensor (the wgmma operand / accumulator registers).
template <class T, class Engine, class Layout>
__device__ __forceinline__ auto& regs(Tensor<Engine, Layout>& t) {
  constexpr int kBytes = int(cosize_v<Layout>) * int(sizeof(typename Engine::value_type));
  static_assert(kBytes % int(sizeof(T)) == 0, "register tile does not split into T");
  return *reinterpret_cast<T(*)[kBytes / sizeof(T)]>(raw_pointer_cast(t.data()));
}

// acc (+)= A B over K_DIM for this warpgroup: A = rows/columns from a_off of the tile `a` (A_ROWS
// rows), B likewise from b_off of `b` (B_ROWS rows). Issued and committed as one group, not waited
// for: the lowering places `wgmma_wait<N>` (and `fence_regs` on the accumulator) before the first
// statement that touches the accumulator or rewrites an operand (wait_before).
// A_AC / B_AC: the tiles' swizzle atom widths (64: 128-byte swizzle; 32: 64-byte, qattn::smem_layout's
// ATOM of a tile read from a column that is a multiple of 32 only).
template <class Atom, bool A_MN, bool B_MN, int A_ROWS, int B_ROWS, int K_DIM, bool ACCUMULATE, int A_AC = 64, int B_AC = 64,
          class Element, int NACC>
__device__ __forceinline__ void wg_gemm_ss(const Element* a, int a_off, const Element* b, int b_off, float (&acc)[NACC]) {
  fence_regs(acc);
  wgmma_fence();
  const uint64_t da0 = operand_desc<A_MN, A_ROWS, Element, A_AC>(a, a_off), db0 = operand_desc<B_MN, B_ROWS, Element, B_AC>(b, b_off);
  CUTE_UNROLL
  for (int k = 0; k < K_DIM / 16; ++k) {
    const uint64_t da = da0 + operand_step<A_MN, A_ROWS, Element, A_AC>(k), db = db0 + operand_step<B_MN, B_ROWS, Element, B_AC>(k);
    Atom::ss(da, db, acc, ACCUMULATE || k > 0);
  }
  wgmma_commit();
}

// acc += A B: A this warpgroup's (64, K_DIM) register fragment (4 registers of bf16/fp16 pairs per k16
// step, the converted accumulator), B a (K_DIM, N) tile stored (K rows, N columns): MN-major. Issued
// and committed, not waited for (the A registers stay live until the wait: fence_regs after it).
template <class Atom, int K_DIM, int B_AC = 64, class Element, int NA, int NACC>
__device__ __forceinline__ void wg_gemm_rs(uint32_t (&a)[NA], const Element* b, float (&acc)[NACC]) {
  static_assert(NA == K_DIM / 4, "A fragment: 4 registers per k16 step");
  fence_regs(a);
  fence_regs(acc);
  wgmma_fence();
  const uint64_t db0 = operand_desc<true, K_DIM, Element, B_AC>(b, 0);
  CUTE_UNROLL
  for (int k = 0; k < K_DIM / 16; ++k) {
    const uint64_t db = db0 + operand_step<true, K_DIM, Element, B_AC>(k);
    Atom::rs(&a[4 * k], db, acc, true);
  }
  wgmma_commit();
}

}  // namespace qattn::sm90
