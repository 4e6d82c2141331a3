// qattn device runtime: the TL `Compute GEMM A, B and get/accumulate C` on mma.sync.
// Operands whose TL register buffer is filled by `Copy X from shared to register` are streamed:
// the shared -> register copy (ldmatrix) of k-block k+1 is issued before the MMAs of k-block k, so
// only two k-blocks of fragments are live and the loads hide behind the tensor cores.
//   gemm_ss: A and B streamed from shared memory (Q and K at d128: Q stays in shared memory, its
//            fragments are re-read each iteration; keeping all of Q in registers would spill)
//   gemm_rs: A already in registers (P after the Reshape, or a register-resident Q), B streamed.
// The accumulator C is (MMA, MMA_M, MMA_N) fp32 in the MMA's C layout.
#pragma once
#include <cute/tensor.hpp>

namespace qattn {
using namespace cute;

// A register A-operand fragment for an (M, K) tile (MMA, MMA_M, MMA_K).
template <int M, int K, class TiledMma>
__device__ __forceinline__ auto fragment_A(TiledMma const& mma, int tid) {
  // only the shape matters: partition a layout-only view (never dereferenced)
  Tensor shape_only = make_tensor(make_gmem_ptr(static_cast<float const*>(nullptr)), make_layout(Shape<Int<M>, Int<K>>{}));
  return mma.get_slice(tid).partition_fragment_A(shape_only);
}

// The copy view of a fragment may cover R MMA k-blocks per ldmatrix block (sm75: ldmatrix.x4 loads
// 16 k, m16n8k8 consumes 8): ldmatrix block c fills MMA k-blocks R*c .. R*c+R-1. Block c+1 is loaded
// when the MMAs of block c begin.
template <class SmemAtomA, class SmemAtomB, class TiledMma, class CEngine, class CLayout, class SA, class SB>
__device__ __forceinline__ void gemm_ss(TiledMma const& mma, Tensor<CEngine, CLayout>& acc, SA const& sA, SB const& sB,
                                        int tid) {
  auto thr_mma = mma.get_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA);  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB);  // (MMA, MMA_N, MMA_K)
  auto copy_a = make_tiled_copy_A(SmemAtomA{}, mma);
  auto copy_b = make_tiled_copy_B(SmemAtomB{}, mma);
  auto thr_a = copy_a.get_thread_slice(tid);
  auto thr_b = copy_b.get_thread_slice(tid);
  Tensor tCsA = thr_a.partition_S(sA);          // (CPY, CPY_M, CPY_K)
  Tensor tCrA_view = thr_a.retile_D(tCrA);      // (CPY, CPY_M, CPY_K)
  Tensor tCsB = thr_b.partition_S(sB);
  Tensor tCrB_view = thr_b.retile_D(tCrB);
  constexpr int K = decltype(size<2>(tCrA))::value;
  constexpr int KA = decltype(size<2>(tCrA_view))::value, KB = decltype(size<2>(tCrB_view))::value;
  static_assert(K == decltype(size<2>(tCrB))::value && K % KA == 0 && K % KB == 0, "copy and MMA k-blocks do not nest");
  constexpr int RA = K / KA, RB = K / KB;
  cute::copy(copy_a, tCsA(_, _, 0), tCrA_view(_, _, 0));
  cute::copy(copy_b, tCsB(_, _, 0), tCrB_view(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < K; ++k) {
    if (k % RA == 0 && k / RA + 1 < KA) cute::copy(copy_a, tCsA(_, _, k / RA + 1), tCrA_view(_, _, k / RA + 1));
    if (k % RB == 0 && k / RB + 1 < KB) cute::copy(copy_b, tCsB(_, _, k / RB + 1), tCrB_view(_, _, k / RB + 1));
    cute::gemm(mma, tCrA(_, _, k), tCrB(_, _, k), acc);
  }
}

template <class SmemAtomB, class TiledMma, class CEngine, class CLayout, class AEngine, class ALayout, class SB>
__device__ __forceinline__ void gemm_rs(TiledMma const& mma, Tensor<CEngine, CLayout>& acc,
                                        Tensor<AEngine, ALayout> const& tCrA, SB const& sB, int tid) {
  auto thr_mma = mma.get_slice(tid);
  Tensor tCrB = thr_mma.partition_fragment_B(sB);  // (MMA, MMA_N, MMA_K)
  auto copy_b = make_tiled_copy_B(SmemAtomB{}, mma);
  auto thr_b = copy_b.get_thread_slice(tid);
  Tensor tCsB = thr_b.partition_S(sB);          // (CPY, CPY_N, CPY_K)
  Tensor tCrB_view = thr_b.retile_D(tCrB);      // (CPY, CPY_N, CPY_K)
  constexpr int K = decltype(size<2>(tCrA))::value;
  constexpr int KB = decltype(size<2>(tCrB_view))::value;
  static_assert(K == decltype(size<2>(tCrB))::value && K % KB == 0, "A fragment, B tile and B copy k-blocks do not nest");
  constexpr int RB = K / KB;
  cute::copy(copy_b, tCsB(_, _, 0), tCrB_view(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < K; ++k) {
    if (k % RB == 0 && k / RB + 1 < KB) cute::copy(copy_b, tCsB(_, _, k / RB + 1), tCrB_view(_, _, k / RB + 1));
    cute::gemm(mma, tCrA(_, _, k), tCrB(_, _, k), acc);
  }
}

}  // namespace qattn
