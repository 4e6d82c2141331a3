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
//   store_acc_global_tma  TL `Copy X ... from register to global` (a 16-bit X) likewise by bulk
//                tensor stores (FlashAttention-3's dK, dV epilogue)
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

// This warpgroup's part of a wgmma accumulator (64 rows: all N columns, or its share of them for a
// product split along N) written into a TMA stage as T (fp32, or a 16-bit type: value pairs packed),
// at qattn::tma_stage_offset<N, sizeof(T)>: one base address per 8-column block of a box (4 for fp32,
// 8 for 16-bit types) plus constants, so a warp's stores land on every bank pair. r, c: the thread's
// first row and column (for the warpgroup's first thread, the part's).
template <int M, int N, class T, bool XOR2 = false, class TiledMma, class AEngine, class ALayout>
__device__ __forceinline__ void stage_acc(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc, void* stage, int tid, int& r, int& c) {
  static_assert(M % 64 == 0, "TMA boxes of 64 rows");
  static_assert(decltype(size<0>(acc))::value == 4 && decltype(size<1>(acc))::value == 1,
                "the wgmma accumulator layout (value pairs, two row halves, one tile along M)");
  constexpr int E = int(sizeof(T)), kBlocks = 16 / E, kN = decltype(size(acc))::value;
  static_assert(E == 4 || E == 2, "fp32 or a 16-bit type");
  static_assert((2 * kN) % (128 / E) == 0 && N % (128 / E) == 0, "a warpgroup's columns: whole 128-byte boxes");
  Tensor tc = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  // (tests/emit/host_layout_check.cc checks this form against the fragment)
  r = get<0>(tc(0)), c = get<1>(tc(0));
  const uint32_t base = ptx::smem_u32(stage);
  uint32_t at[kBlocks];
  CUTE_UNROLL
  for (int j = 0; j < kBlocks; ++j) at[j] = base + uint32_t(tma_stage_offset<N, E>(r, c, 4 * j));
  // XOR2 (fp32): a thread of an odd row stores block blk ^ 2 where the even rows store blk, so that a
  // half warp's four rows land on the 8 chunks of the swizzle once each (else rows 2k and 2k + 1 share 4)
  const bool odd = XOR2 && (r & 1);
  if constexpr (XOR2) {
    static_assert(E == 4 && kN % 16 == 0, "XOR2: fp32, blocks in fours");
    CUTE_UNROLL
    for (int j = 0; j < kBlocks / 2; ++j) {
      const uint32_t lo = at[j], hi = at[j + 2];
      at[j] = odd ? hi : lo, at[j + 2] = odd ? lo : hi;
    }
  }
  CUTE_UNROLL
  for (int v = 0; v < kN; v += 2) {
    const int blk = v / 4, half = (v / 2) % 2;
    const uint32_t addr = at[blk % kBlocks] + uint32_t((blk / kBlocks) * 8192 + half * 1024);
    if constexpr (E == 4) {
      const float x0 = odd ? float(acc(v ^ 8)) : float(acc(v)), x1 = odd ? float(acc((v ^ 8) + 1)) : float(acc(v + 1));
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x0), "f"(x1) : "memory");
    } else {
      const T lo = static_cast<T>(float(acc(v))), hi = static_cast<T>(float(acc(v + 1)));
      const uint32_t packed = uint32_t(reinterpret_cast<const uint16_t&>(lo)) | (uint32_t(reinterpret_cast<const uint16_t&>(hi)) << 16);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(packed) : "memory");
    }
  }
}

// TL `Copy X (M, N) in coordinate [tile_row, 0] from register to global and accumulate` (X fp32) by
// TMA: each warpgroup writes its 64-row part of the wgmma accumulator (all N columns, or its share of
// them for a product split along N) into `stage` (stage_acc) and its first thread adds each (64
// rows, 32 columns) box to global memory with one bulk tensor reduction (fp32 add, atomic per
// element; rows past the map's extent are not written), instead of every thread's red.global.add.
// `map`: the 4-D view (N columns, rows, heads, batch) of X, fp32, boxes of (32, 64), the 128-byte
// swizzle. The stage is reused by the next call: unless STAGE_FREE (the first thread waited for its
// previous reductions with tma_store_wait<0> before a block-wide barrier the caller passed since),
// the first thread waits here until they have read it and the warpgroup syncs on named barrier
// `bar_id` (128 threads); after writing it, it syncs there again (ARRIVE, with STAGE_FREE: only the
// first warp waits there, for the others' stores, and issues; the other three arrive and go on: the
// caller's block-wide barrier before the next call keeps them from running a call ahead). Before the
// block exits, the first thread of each warpgroup waits until its reductions have read the stage
// (add_acc_global_tma_done; the grid completes with their writes).
template <int M, int N, bool STAGE_FREE, bool ARRIVE = false, bool XOR2 = false, class TiledMma, class AEngine, class ALayout>
__device__ __forceinline__ void add_acc_global_tma(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc, float* stage,
                                                   const void* map, int tile_row, int head, int batch, int tid, int bar_id) {
  constexpr int kN = decltype(size(acc))::value;  // 64 rows x 2 kN columns per warpgroup
  static_assert(STAGE_FREE || !ARRIVE, "ARRIVE: a block-wide barrier between two calls (the warps that only arrive may not run ahead)");
  const bool first = tid % 128 == 0;
  if constexpr (!STAGE_FREE) {
    if (first) ptx::tma_store_wait<0>();  // the previous call's reductions have read the stage
    ptx::bar_sync(bar_id, 128);
  }
  int r, c;
  stage_acc<M, N, float, XOR2>(mma, acc, stage, tid, r, c);
  ptx::fence_async_shared();  // the stores, visible to the bulk reductions (the async proxy)
  if (ARRIVE && tid % 128 >= 32)
    ptx::bar_arrive(bar_id, 128);  // ARRIVE: only the first warp waits for the others' stores
  else
    ptx::bar_sync(bar_id, 128);
  if (first) {
    CUTE_UNROLL
    for (int k = 0; k < 2 * kN / 32; ++k)
      ptx::tma_reduce_add_4d(map, reinterpret_cast<const char*>(stage) + ((r / 64) * (N / 32) + c / 32 + k) * 8192, c + 32 * k,
                             tile_row * M + r, head, batch);
    ptx::tma_store_commit();
  }
}

// TL `Copy X (M, N) in coordinate [tile_row, 0] from register to global` (X of type T, 16-bit) by
// TMA: each warpgroup writes its part of the accumulator, rounded to T, into `stage` (stage_acc:
// boxes of 64 rows x 64 columns) and its first thread stores each box with one bulk tensor store
// (rows past the map's extent are not written). `map`: the 4-D view (N columns, rows, heads, batch)
// of X, boxes of (64, 64), the 128-byte swizzle. The stage must be free (a block-wide barrier since
// its last reader) and is not reused; add_acc_global_tma_done before the block exits.
template <int M, int N, class T, class TiledMma, class AEngine, class ALayout>
__device__ __forceinline__ void store_acc_global_tma(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc, T* stage, const void* map,
                                                     int tile_row, int head, int batch, int tid, int bar_id) {
  constexpr int kN = decltype(size(acc))::value;
  int r, c;
  stage_acc<M, N, T>(mma, acc, stage, tid, r, c);
  ptx::fence_async_shared();  // the stores, visible to the bulk copies (the async proxy)
  ptx::bar_sync(bar_id, 128);
  if (tid % 128 == 0) {
    CUTE_UNROLL
    for (int k = 0; k < 2 * kN / 64; ++k)
      ptx::tma_store_4d(map, reinterpret_cast<const char*>(stage) + ((r / 64) * (N / 64) + c / 64 + k) * 8192, c + 64 * k,
                        tile_row * M + r, head, batch);
    ptx::tma_store_commit();
  }
}

// The block's TMA additions and stores have read their stages before it exits (its shared memory is
// released; the grid completes with their writes).
__device__ __forceinline__ void add_acc_global_tma_done(int tid) {
  if (tid % 128 == 0) ptx::tma_store_wait<0>();
}

}  // namespace qattn::sm90
