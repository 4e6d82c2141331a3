// qattn device runtime, Hopper (sm90a): the moves of a backward program (TL `Kernel NAME backward`)
// lowered to warpgroup MMA (src/backend/bwd, wgmma mode). Each warpgroup (4 warps, 128 threads)
// issues its share of a GEMM:
//   wg_gemm_ss   both operands from shared tiles of the lowering's swizzled layout (64-element
//                column blocks, 128-byte swizzle, or 32-element blocks, 64-byte swizzle:
//                qattn::smem_layout); an operand stored with its
//                K dimension along the rows (a transposed A, a plain B) is MN-major for the wgmma
//   wg_gemm_rs   A from this warpgroup's registers (a converted accumulator: the TL Reshape), B
//                from a shared tile stored (K, N)
//   add_acc_global_v4  TL `Copy X ... from register to global and accumulate` (fp32 atomics): each
//                lane of a quad pair trades one value pair with its partner, so that it holds four
//                consecutive columns, and adds them with one red.global.add.v4.f32
//   add_acc_global_tma  the same statement by TMA: the warpgroup stages its part of the tile in shared
//                memory and one thread adds it with bulk tensor reductions (FlashAttention-3's dQ)
// The accumulators are register tiles of the lowering's Mma<R> (warps along M, 16 rows each) or
// MmaCols<R, C, WGN> (warpgroups side by side along N): for both the CuTe fragment of a thread is
// exactly the wgmma accumulator of its warpgroup, so every element-wise helper of backward.cuh works
// on them unchanged.
#pragma once
#include <cute/tensor.hpp>

#include "qattn/backward.cuh"
#include "qattn/sm90/ptx.cuh"
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

// TL `Copy X (M, N) in coordinate [tile_row, 0] from register to global and accumulate` (X fp32,
// several blocks add to one tile) for a wgmma accumulator: half the reductions of add_acc_global and
// 64 contiguous bytes of a row per lane quad (two sectors per request instead of one). A thread holds,
// per 8-column block j and row half h, the value pair at columns 8j + 2q, +1 (q = lane % 4); for each
// pair of blocks (j, j + 1) an even lane sends its block-(j + 1) pair to lane ^ 1 and receives that
// lane's block-j pair (columns 8j + 2q + 2, +3), an odd lane the other way round: each then adds four
// consecutive columns. The fragment must be the wgmma layout (value v: pair element v % 2, row half
// (v / 2) % 2, block v / 4; one tile along M) and the view 16-byte aligned (its base and row stride):
// otherwise add_acc_global. Every thread of the block calls it (shuffles); rows past the end skipped.
template <int M, int N, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global_v4(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                  Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  constexpr bool kWgmmaLayout = decltype(size<0>(acc))::value == 4 && decltype(size<1>(acc))::value == 1 &&
                                decltype(size<2>(acc))::value % 2 == 0;
  if constexpr (!kWgmmaLayout) {
    add_acc_global<M, N>(mma, acc, mX, tile_row, tid);
  } else {
    const uintptr_t base = reinterpret_cast<uintptr_t>(raw_pointer_cast(mX.data()));
    const uintptr_t row_bytes = uintptr_t(get<0>(stride(mX))) * sizeof(float);
    if (((base | row_bytes) & 15) != 0) {  // uniform over the block: the view's base and row stride
      add_acc_global<M, N>(mma, acc, mX, tile_row, tid);
      return;
    }
    auto [tXgX, tXcX, rows_left] = acc_global_part<M, N>(mma, mX, tile_row, tid);
    const bool odd = tid & 1;
    constexpr int kN = decltype(size(acc))::value;
    CUTE_UNROLL
    for (int jp = 0; jp < kN / 8; ++jp) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int v0 = 8 * jp + 2 * h, v1 = v0 + 4;  // block 2jp's pair, block 2jp+1's pair (row half h)
        const float s0 = odd ? acc(v0) : acc(v1), s1 = odd ? acc(v0 + 1) : acc(v1 + 1);
        const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
        const int v = odd ? v1 : v0;  // the pair this lane keeps; an odd lane's four start two columns before it
        if (get<0>(tXcX(v)) < rows_left) {
          float* x = &tXgX(v) - (odd ? 2 : 0);
          const float a = odd ? r0 : acc(v0), b = odd ? r1 : acc(v0 + 1), c = odd ? acc(v1) : r0, d = odd ? acc(v1 + 1) : r1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(x), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
          atomicAdd(x, a), atomicAdd(x + 1, b), atomicAdd(x + 2, c), atomicAdd(x + 3, d);
#endif
        }
      }
    }
  }
}

// TL `Copy X (M, N) in coordinate [tile_row, 0] from register to global and accumulate` (X fp32) by
// TMA: each warpgroup writes its 64-row part of the wgmma accumulator (all N columns, or its share of
// them for a product split along N) into `stage` and its first thread adds each (64 rows, 32
// columns) box to global memory with one bulk tensor reduction (fp32 add, atomic per element; rows
// past the map's extent are not written), instead of every thread's red.global.add. `stage`: the
// (M, N) tile as (M / 64) x (N / 32) boxes of 8 KB in the 128-byte swizzle (qattn::tma_stage_offset):
// a warp's value pairs land on every bank pair, two wavefronts per store. `map`: the 4-D view (N columns, rows, heads, batch) of X, fp32,
// boxes of (32, 64), the 128-byte swizzle. The stage is reused by the next call: unless STAGE_FREE
// (the first thread waited for its previous reductions with tma_store_wait<0> before a block-wide
// barrier the caller passed since), the first thread waits here until they have read it and the
// warpgroup syncs on named barrier `bar_id` (128 threads); after writing it, it syncs there again.
// Before the block exits, the first thread of each warpgroup waits until its reductions have read
// the stage (add_acc_global_tma_done; the grid completes with their writes).
template <int M, int N, bool STAGE_FREE, class TiledMma, class AEngine, class ALayout>
__device__ __forceinline__ void add_acc_global_tma(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc, float* stage,
                                                   const void* map, int tile_row, int head, int batch, int tid, int bar_id) {
  static_assert(M % 64 == 0 && N % 32 == 0, "TMA reductions of (64, 32) boxes");
  static_assert(decltype(size<0>(acc))::value == 4 && decltype(size<1>(acc))::value == 1,
                "the wgmma accumulator layout (value pairs, two row halves, one tile along M)");
  constexpr int kN = decltype(size(acc))::value;  // 64 rows x (2 kN / 64 x 32) columns per warpgroup
  static_assert((2 * kN) % 32 == 0, "a warpgroup's columns: whole 32-column boxes");
  const bool first = tid % 128 == 0;
  if constexpr (!STAGE_FREE) {
    if (first) ptx::tma_store_wait<0>();  // the previous call's reductions have read the stage
    ptx::bar_sync(bar_id, 128);
  }
  Tensor tc = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  // value v of the wgmma layout lies at (r + 8 ((v / 2) % 2), c + 8 (v / 4)) from the thread's first
  // (r, c) (c % 8 = 2 (lane % 4)): row r + 8 keeps r's swizzle phase, so every pair's shared address is
  // one of four bases (its 8-column block's place in the 32-column box) plus a constant
  // (qattn::tma_stage_offset; tests/emit/host_layout_check.cc checks this form against the fragment)
  const int r = get<0>(tc(0)), c = get<1>(tc(0));
  const uint32_t base = ptx::smem_u32(stage);
  uint32_t at[4];
  CUTE_UNROLL
  for (int j = 0; j < 4; ++j) at[j] = base + uint32_t(tma_stage_offset<N>(r, c, 4 * j));
  CUTE_UNROLL
  for (int v = 0; v < kN; v += 2) {
    const int blk = v / 4, half = (v / 2) % 2;
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at[blk % 4] + uint32_t((blk / 4) * 8192 + half * 1024)), "f"(acc(v)),
                 "f"(acc(v + 1))
                 : "memory");
  }
  ptx::fence_async_shared();  // the stores, visible to the bulk reductions (the async proxy)
  ptx::bar_sync(bar_id, 128);
  if (first) {
    const int r0 = r, c0 = c;  // (the warpgroup's first row and column)
    CUTE_UNROLL
    for (int k = 0; k < 2 * kN / 32; ++k)
      ptx::tma_reduce_add_4d(map, reinterpret_cast<const char*>(stage) + ((r0 / 64) * (N / 32) + c0 / 32 + k) * 8192, c0 + 32 * k,
                             tile_row * M + r0, head, batch);
    ptx::tma_store_commit();
  }
}
// The block's reductions have read their stages before it exits (its shared memory is released).
__device__ __forceinline__ void add_acc_global_tma_done(int tid) {
  if (tid % 128 == 0) ptx::tma_store_wait<0>();
}

}  // namespace qattn::sm90
