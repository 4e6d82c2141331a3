// qattn device runtime: the moves a backward program (TL `Kernel NAME backward`, docs/tl.md "The
// backward pass") makes beyond the forward's, on mma.sync accumulator tiles:
//   load_acc     TL `Copy X from shared to register` of a 2-D tile read element-wise (dO * O): the
//                shared tile into a register tile in the accumulator layout of the tiled MMA
//   load_rows    TL `Copy LSE from shared to register`: a row vector (one value per accumulator row
//                this thread owns, the order of rows_view)
//   rows_across_warps  the end of a row reduction on a tile split over warps along N (through shared)
//   copy_rows_g2s  TL `Copy LSE (BM) in coordinate [i] from global to shared`: fp32 rows, zero past
//                the end of the view
//   store_acc_smem TL `Copy P from register to shared`: an accumulator tile into a shared tile (a
//                transposed A operand is read from there by ldmatrix.trans); store_acc_smem_pairs
//                the same for a 16-bit tile, a 32-bit store per value pair (the wgmma form's)
//   store_acc_global / add_acc_global  TL `Copy dK (BN, d) in coordinate [n, 0] from register to
//                global [and accumulate]`: the accumulator rounded to the global dtype and stored, or
//                added with fp32 atomics; rows past the end of the view skipped
//   turn_wait / add_acc_global_ordered / turn_pass  the same addition `{ordered}`: one block at a
//                time per tile, in a fixed order (deterministic sums)
//   load_cols / ew_cols  TL `X^T` of a vector (`Compute Subtract St, LSE^T`): one value per column
//   rows_to_cols   a row vector of one tile into the column layout of another (through shared)
//   (the mask / score helpers take T = true for a score tile held transposed: keys along its rows)
// Every helper takes the tiled MMA and the thread index: the element a thread owns is where
// partition_C of an identity tensor says.
#pragma once
#include <cute/tensor.hpp>

#include "qattn/layout.cuh"
#include "qattn/mask.cuh"
#include "qattn/softmax.cuh"
#include "qattn/variant.cuh"

namespace qattn {
using namespace cute;

// The N extent of one tile of `mma` (16 x the warps along N): the narrowest accumulator it partitions.
template <class TiledMma>
using MmaTileN = Int<decltype(tile_size<1>(TiledMma{}))::value>;

// A register row vector for the rows of an (M, N) accumulator of `mma` (any N).
template <int M, class TiledMma>
__device__ __forceinline__ auto rows_for(TiledMma const& mma) {
  auto acc = partition_fragment_C(mma, Shape<Int<M>, MmaTileN<TiledMma>>{});
  return make_rows<float>(acc);
}

// Finishes TL `Compute RowSum|RowMax X and get Z` on an M-row tile of an mma with WN > 1 warps along
// N: each warp's quad-reduced partial (row_sum / row_max) goes to the shared scratch (WN x M fp32),
// and every thread then reduces the WN partials of its rows. Two __syncthreads (the scratch is free
// again on return); the caller's control flow must be uniform over the block.
template <int M, int WM, int WN, bool MAX, class TiledMma, class REngine, class RLayout>
__device__ __forceinline__ void rows_across_warps(TiledMma const& mma, Tensor<REngine, RLayout>& z, float* scratch, int tid) {
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, MmaTileN<TiledMma>>{}));
  auto cr = rows_view(c);
  const int wn = (tid / 32) / WM;  // Layout<Shape<WM, WN, _1>> numbers the warps M first
  if (tid % 4 == 0) {
    CUTE_UNROLL
    for (int i = 0; i < size<0>(cr); ++i) scratch[wn * M + get<0>(cr(i, 0))] = z(i);
  }
  __syncthreads();
  CUTE_UNROLL
  for (int i = 0; i < size<0>(cr); ++i) {
    const int row = get<0>(cr(i, 0));
    float v = scratch[row];
    CUTE_UNROLL
    for (int k = 1; k < WN; ++k) v = MAX ? fmaxf(v, scratch[k * M + row]) : v + scratch[k * M + row];
    z(i) = v;
  }
  __syncthreads();
}

// The (M, N) tile of shared tensor sX into the accumulator-layout register tile `acc` (fp32).
template <class TiledMma, class SEngine, class SLayout, class AEngine, class ALayout>
__device__ __forceinline__ void load_acc(TiledMma const& mma, Tensor<SEngine, SLayout> const& sX,
                                         Tensor<AEngine, ALayout>& acc, int tid) {
  Tensor tXsX = mma.get_slice(tid).partition_C(sX);  // (MMA, MMA_M, MMA_N)
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) acc(i) = static_cast<float>(tXsX(i));
}

// Row vector `r` of the M-row accumulator tiles from the shared vector sX (M) fp32.
template <int M, class TiledMma, class REngine, class RLayout>
__device__ __forceinline__ void load_rows(TiledMma const& mma, float const* sX, Tensor<REngine, RLayout>& r, int tid) {
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, MmaTileN<TiledMma>>{}));  // -> (row, col)
  auto cr = rows_view(c);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(cr); ++i) r(i) = sX[get<0>(cr(i, 0))];
}

// ROWS fp32 values of the global vector x (length n) from element tile_row * ROWS into sX; zero
// past the end. cp.async, 4 bytes per thread (committed and waited for by the caller, as copy_g2s).
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_rows_g2s(float const* x, int n, int tile_row, float* sX, int tid) {
  for (int i = tid; i < ROWS; i += THREADS) {
    const int row = tile_row * ROWS + i;
    const bool in = row < n;
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(sX + i));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(in ? x + row : x), "r"(in ? 4 : 0));
  }
}

// The accumulator tile `acc` (any element type) into the shared (M, N) tile sX.
template <class TiledMma, class AEngine, class ALayout, class SEngine, class SLayout>
__device__ __forceinline__ void store_acc_smem(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                               Tensor<SEngine, SLayout>& sX, int tid) {
  using T = typename SEngine::value_type;
  Tensor tXsX = mma.get_slice(tid).partition_C(sX);  // (MMA, MMA_M, MMA_N)
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) tXsX(i) = static_cast<T>(acc(i));
}

// store_acc_smem of a 16-bit tile with each value pair of the accumulator (two neighbouring columns
// of a row) in one 32-bit store: sX's layout keeps a row's even and odd column side by side (the
// swizzled smem_layout moves 16-byte chunks).
template <class TiledMma, class AEngine, class ALayout, class SEngine, class SLayout>
__device__ __forceinline__ void store_acc_smem_pairs(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                     Tensor<SEngine, SLayout>& sX, int tid) {
  using T = typename SEngine::value_type;
  static_assert(sizeof(T) == 2, "16-bit pairs");
  Tensor tXsX = mma.get_slice(tid).partition_C(sX);  // (MMA, MMA_M, MMA_N)
  static_assert(decltype(size<0>(tXsX))::value % 2 == 0, "value pairs");
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const T lo = static_cast<T>(acc(i)), hi = static_cast<T>(acc(i + 1));
    *reinterpret_cast<uint32_t*>(&tXsX(i)) =
        uint32_t(reinterpret_cast<const uint16_t&>(lo)) | (uint32_t(reinterpret_cast<const uint16_t&>(hi)) << 16);
  }
}

// The thread's part of the (M, N) tile tile_row of the global view mX (rows, N) as an accumulator
// of `mma` lays it out: the elements, their (row, column) in the tile, and the rows left in the view.
template <int M, int N, class TiledMma, class GEngine, class GLayout>
__device__ __forceinline__ auto acc_global_part(TiledMma const& mma, Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  Tensor gX = local_tile(mX, Shape<Int<M>, Int<N>>{}, make_coord(tile_row, 0));
  auto thr = mma.get_slice(tid);
  return cute::make_tuple(thr.partition_C(gX), thr.partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{})),
                          int(size<0>(mX)) - tile_row * M);
}

// The (M, N) accumulator into rows tile_row * M ... of the global view mX (rows, N), rounded to
// its element type; rows past the end are skipped.
template <int M, int N, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void store_acc_global(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                 Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  using T = cute::remove_cvref_t<typename GEngine::value_type>;
  auto [tXgX, tXcX, rows_left] = acc_global_part<M, N>(mma, mX, tile_row, tid);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i)
    if (get<0>(tXcX(i)) < rows_left) tXgX(i) = static_cast<T>(acc(i));
}

// The (M, N) fp32 accumulator added into the fp32 global view mX (atomics; several blocks add to
// one tile); rows past the end are skipped.
// On sm90 two neighbouring columns of a row (an accumulator's value pairs) go in one vector
// reduction (red.global.add.v2.f32: half the L2 atomic operations) when 8-byte aligned.
template <int M, int N, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                               Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  auto [tXgX, tXcX, rows_left] = acc_global_part<M, N>(mma, mX, tile_row, tid);
  constexpr int kN = decltype(size(acc))::value;
  CUTE_UNROLL
  for (int j = 0; j < kN / 2; ++j) {
    const int i = 2 * j;
    float* x = &tXgX(i);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (&tXgX(i + 1) == x + 1 && get<0>(tXcX(i + 1)) == get<0>(tXcX(i)) && (reinterpret_cast<uintptr_t>(x) & 7) == 0) {
      if (get<0>(tXcX(i)) < rows_left)
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(x), "f"(float(acc(i))), "f"(float(acc(i + 1))) : "memory");
      continue;
    }
#endif
    if (get<0>(tXcX(i)) < rows_left) atomicAdd(x, acc(i));
    if (get<0>(tXcX(i + 1)) < rows_left) atomicAdd(&tXgX(i + 1), acc(i + 1));
  }
  if constexpr (kN % 2 == 1)
    if (get<0>(tXcX(kN - 1)) < rows_left) atomicAdd(&tXgX(kN - 1), acc(kN - 1));
}

// TL `Copy X ... from register to global and accumulate {ordered}` (a deterministic kernel): the
// block adds its (M, N) fp32 tile with plain loads and stores, one block at a time per tile, in a
// fixed order, so every run rounds the same sums the same way. turn_wait spins (thread 0, an acquire
// load) until the tile's counter says `before` blocks have added theirs; turn_pass publishes this
// block's stores (__threadfence) and counts it. The loads and stores go to L2 (ld/st.cg): another
// block's additions are never read from a stale L1 line. The caller's control flow must be uniform
// over the block; the blocks waited for have lower linear indices (launched first), so none waits
// for a block that cannot run.
// A turn not come after 60 s means a counter no block will raise (a lowering bug, a launch that
// runs the blocks out of order): the kernel traps (the launch fails) instead of hanging the GPU.
__device__ __forceinline__ void turn_wait(const int* counter, int before, int tid) {
  if (tid == 0) {
    int seen;
    unsigned long long start = 0, now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (true) {
      asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= before) break;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > 60ull * 1000000000ull) __trap();
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void turn_pass(int* counter, int tid) {
  __syncthreads();  // every thread's additions are issued
  if (tid == 0) {
    __threadfence();
    atomicAdd(counter, 1);
  }
}

template <int M, int N, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global_ordered(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                       Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  auto [tXgX, tXcX, rows_left] = acc_global_part<M, N>(mma, mX, tile_row, tid);
  // chunks of 16: every load of a chunk is in flight before its stores (a store could alias a later
  // load, so the compiler would not hoist them itself: one L2 round trip per element)
  constexpr int kN = decltype(size(acc))::value, kC = kN < 16 ? kN : 16;
  CUTE_UNROLL
  for (int base = 0; base < kN; base += kC) {
    float old[kC];
    CUTE_UNROLL
    for (int k = 0; k < kC; ++k)
      old[k] = (base + k < kN && get<0>(tXcX(base + k)) < rows_left) ? __ldcg(&tXgX(base + k)) : 0.f;
    CUTE_UNROLL
    for (int k = 0; k < kC; ++k)
      if (base + k < kN && get<0>(tXcX(base + k)) < rows_left) __stcg(&tXgX(base + k), old[k] + acc(base + k));
  }
}

// TL `Compute Derivative dS, S0 at [r, c] with NAME`: dS *= d(q, k, S0) element by element over the
// (M, N) score tile whose first query is q0 and first key k0, d the Score's derivative in score;
// elements whose gradient is 0 (masked keys) stay 0 whatever the derivative is there. T: the tiles
// hold the keys along their rows (`Compute Derivative dSt^T, St0^T ...`).
template <int M, int N, bool T = false, class TiledMma, class GEngine, class GLayout, class SEngine, class SLayout, class F>
__device__ __forceinline__ void apply_derivative(TiledMma const& mma, Tensor<GEngine, GLayout>& ds,
                                                 Tensor<SEngine, SLayout> const& s0, int q0, int k0, F&& d, int tid) {
  auto sr = rows_view(s0);
  auto gr = rows_view(ds);
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  auto cr = rows_view(c);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(gr); ++i) {
    const int r = get<0>(cr(i, 0));
    CUTE_UNROLL
    for (int j = 0; j < size<1>(gr); ++j) {
      if (gr(i, j) == 0.f) continue;
      const int cc = get<1>(cr(i, j));
      gr(i, j) *= T ? d(sr(i, j), q0 + cc, k0 + r) : d(sr(i, j), q0 + r, k0 + cc);
    }
  }
}

// The (query, key) of element (i, j) of rows_view(c), c the identity partition of an (M, N) score
// tile whose first query is q0 and first key k0; T: the tile holds the keys along its rows.
template <bool T, class C>
__device__ __forceinline__ int2 element_qk(C const& cr, int i, int j, int q0, int k0) {
  return T ? make_int2(q0 + get<1>(cr(i, j)), k0 + get<0>(cr(i, j))) : make_int2(q0 + get<0>(cr(i, j)), k0 + get<1>(cr(i, j)));
}

// TL `Compute Gradient dS, S0 and accumulate dT at [r, c] with NAME` (the gradient of an auxiliary
// input T, read by the Score at an index that does not depend on the element: ALiBi's slopes[head]):
// the sum over this thread's elements of the (M, N) score tile (first query q0, first key k0) of
// dS * d(score = S0, q, k), elements past seqlen_q / seqlen_k or with dS = 0 left out. The caller
// keeps the sum in a register over the loop and adds it once (add_grad_uniform). T: keys along rows.
// SAFE: d is finite everywhere (no / exp log tanh in it), so a masked element's dS = 0 adds 0 without
// the test; a tile inside both lengths (every tile but the last ones) runs without the bounds tests.
// f(q, k, dS, S0) for every element this thread holds of the (M, N) score tiles ds and s0 (first query
// q0, first key k0; T: the keys along the rows).
template <int M, int N, bool T, class TiledMma, class GEngine, class GLayout, class SEngine, class SLayout, class F>
__device__ __forceinline__ void for_each_score(TiledMma const& mma, Tensor<GEngine, GLayout> const& ds,
                                               Tensor<SEngine, SLayout> const& s0, int q0, int k0, int tid, F&& f) {
  auto sr = rows_view(s0);
  auto gr = rows_view(ds);
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  auto cr = rows_view(c);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(gr); ++i) {
    CUTE_UNROLL
    for (int j = 0; j < size<1>(gr); ++j) {
      const int2 qk = element_qk<T>(cr, i, j, q0, k0);
      f(qk.x, qk.y, float(gr(i, j)), float(sr(i, j)));
    }
  }
}

template <int M, int N, bool T, bool SAFE, bool CHECK, class TiledMma, class GEngine, class GLayout, class SEngine, class SLayout,
          class F>
__device__ __forceinline__ float grad_sum_impl(TiledMma const& mma, Tensor<GEngine, GLayout> const& ds,
                                               Tensor<SEngine, SLayout> const& s0, int q0, int k0, int seqlen_q, int seqlen_k,
                                               F& d, int tid) {
  float sum = 0.f;
  for_each_score<M, N, T>(mma, ds, s0, q0, k0, tid, [&](int q, int k, float g, float s) {
    if ((CHECK && (q >= seqlen_q || k >= seqlen_k)) || (!SAFE && g == 0.f)) return;
    sum += g * d(s, q, k);
  });
  return sum;
}

template <int M, int N, bool T = false, bool SAFE = false, class TiledMma, class GEngine, class GLayout, class SEngine, class SLayout,
          class F>
__device__ __forceinline__ float grad_sum(TiledMma const& mma, Tensor<GEngine, GLayout> const& ds, Tensor<SEngine, SLayout> const& s0,
                                          int q0, int k0, int seqlen_q, int seqlen_k, F&& d, int tid) {
  const bool inside = q0 + (T ? N : M) <= seqlen_q && k0 + (T ? M : N) <= seqlen_k;
  return inside ? grad_sum_impl<M, N, T, SAFE, false>(mma, ds, s0, q0, k0, seqlen_q, seqlen_k, d, tid)
                : grad_sum_impl<M, N, T, SAFE, true>(mma, ds, s0, q0, k0, seqlen_q, seqlen_k, d, tid);
}

__device__ __forceinline__ float warp_sum(float x) {
  CUTE_UNROLL
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The end of a block's grad_sum: the warp's sums reduced by shuffles, one atomic add per warp into
// dT[idx]. Every thread of the block calls it (a full-warp shuffle).
__device__ __forceinline__ void add_grad_uniform(float sum, float* dT, int64_t idx) {
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0 && sum != 0.f) atomicAdd(dT + idx, sum);
}

// The same where the index's last component depends on the element (a relative-position bias
// table[head, bucket(k - q)]): each element's dS * d adds to table[bucket(q, k)] in shared memory
// (`bucket` clamped to [0, E) by the caller's lambda), a run of elements with one bucket as one
// shared atomic add. `one(q_lo, q_hi, kv_lo, kv_hi)`: the bucket's interval bounds over the tile
// are one value (far from the diagonal every element clamps to an edge bucket): then the tile is a
// grad_sum, one shared atomic add per warp. The caller zeroes the table before the loop and adds it
// to dT once (add_grad_table). Every thread of the block calls it (one() is the block's, the same
// for all).
template <int M, int N, bool T = false, bool SAFE = false, class TiledMma, class GEngine, class GLayout, class SEngine, class SLayout,
          class F, class B, class U>
__device__ __forceinline__ void grad_table(TiledMma const& mma, Tensor<GEngine, GLayout> const& ds, Tensor<SEngine, SLayout> const& s0,
                                           int q0, int k0, int seqlen_q, int seqlen_k, F&& d, B&& bucket, U&& one, float* table,
                                           int tid) {
  constexpr int QN = T ? N : M, KN = T ? M : N;
  if (one(q0, q0 + QN - 1, k0, k0 + KN - 1)) {
    const float sum = warp_sum(grad_sum<M, N, T, SAFE>(mma, ds, s0, q0, k0, seqlen_q, seqlen_k, d, tid));
    if (tid % 32 == 0 && sum != 0.f) atomicAdd(table + bucket(q0, k0), sum);
    return;
  }
  int run = -1;
  float sum = 0.f;
  for_each_score<M, N, T>(mma, ds, s0, q0, k0, tid, [&](int q, int k, float g, float s) {
    if (q >= seqlen_q || k >= seqlen_k || (!SAFE && g == 0.f)) return;
    const int e = bucket(q, k);
    if (e != run) {
      if (run >= 0) atomicAdd(table + run, sum);
      run = e;
      sum = 0.f;
    }
    sum += g * d(s, q, k);
  });
  if (run >= 0) atomicAdd(table + run, sum);
}

// The end of a block's grad_table: its E entries added to dT[base, 0..E) (the caller's barrier
// first: every thread's shared adds are done).
template <int E, int THREADS>
__device__ __forceinline__ void add_grad_table(float const* table, float* dT, int64_t base, int tid) {
  for (int e = tid; e < E; e += THREADS)
    if (table[e] != 0.f) atomicAdd(dT + base + e, table[e]);
}

// The columns of an (M, N) accumulator of `mma` this thread holds, in the order of rows_view's
// second mode: a column vector holds one value for each.
template <int M, int N, class TiledMma>
__device__ __forceinline__ auto cols_for(TiledMma const& mma) {
  auto acc = partition_fragment_C(mma, Shape<Int<M>, Int<N>>{});
  auto ar = rows_view(acc);
  return make_tensor<float>(Shape<Int<decltype(size<1>(ar))::value>>{});
}

// Column vector `r` (the thread's columns of an (M, N) tile of `mma`) from the shared vector sX (N).
template <int M, int N, class TiledMma, class REngine, class RLayout>
__device__ __forceinline__ void load_cols(TiledMma const& mma, float const* sX, Tensor<REngine, RLayout>& r, int tid) {
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  auto cr = rows_view(c);
  CUTE_UNROLL
  for (int k = 0; k < size<1>(cr); ++k) r(k) = sX[get<1>(cr(0, k))];
}

// Z = X op c, c a column vector (one value per column of the 2-D tile X, cols_for's order).
template <class Op, class X, class C, class Z>
__device__ __forceinline__ void ew_cols(X const& x, C const& c, Z& z) {
  auto xr = rows_view(x);
  auto zr = rows_view(z);
  CUTE_UNROLL
  for (int i = 0; i < size<0>(xr); ++i) {
    CUTE_UNROLL
    for (int k = 0; k < size<1>(xr); ++k) {
      if constexpr (std::is_same_v<Op, op::Sub>) zr(i, k) = xr(i, k) - (c(k) == -INFINITY ? 0.f : c(k));
      else zr(i, k) = Op{}(xr(i, k), c(k));
    }
  }
}

// Z = X op sX[column], the column vector read from the shared vector sX (N) where it is used instead
// of held in registers (its N / 4 values a thread are replicated over the 8 lanes of a column
// quad: at d64's 128 columns 32 registers live across the products): a broadcast load per column
// pair, no bank conflicts.
// `scale`: each value multiplied by it first (a `Compute Multiply X, c` of the vector folded in).
template <class Op, int M, int N, class TiledMma, class X, class Z>
__device__ __forceinline__ void ew_cols_smem(TiledMma const& mma, X const& x, float const* sX, Z& z, int tid, float scale = 1.f) {
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  auto cr = rows_view(c);
  auto xr = rows_view(x);
  auto zr = rows_view(z);
  CUTE_UNROLL
  for (int k = 0; k < size<1>(xr); ++k) {
    float v = sX[get<1>(cr(0, k))] * scale;
    if constexpr (std::is_same_v<Op, op::Sub>) v = v == -INFINITY ? 0.f : v;
    CUTE_UNROLL
    for (int i = 0; i < size<0>(xr); ++i) {
      if constexpr (std::is_same_v<Op, op::Sub>) zr(i, k) = xr(i, k) - v;
      else zr(i, k) = Op{}(xr(i, k), v);
    }
  }
}

// A row vector `r` of the (RM, x) tiles of `rmma` into the column vector `c` of an (CM, RM) tile of
// `cmma` (its columns are r's rows): through the shared scratch (RM floats). Two __syncthreads; the
// caller's control flow must be uniform over the block.
template <int RM, int CM, class RMma, class CMma, class REngine, class RLayout, class CEngine, class CLayout>
__device__ __forceinline__ void rows_to_cols(RMma const& rmma, Tensor<REngine, RLayout> const& r, CMma const& cmma,
                                             Tensor<CEngine, CLayout>& c, float* scratch, int tid) {
  Tensor rc = rmma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<RM>, MmaTileN<RMma>>{}));
  auto rcr = rows_view(rc);
  if (get<1>(rcr(0, 0)) == 0) {  // the threads of column 0 hold every row once
    CUTE_UNROLL
    for (int i = 0; i < size<0>(rcr); ++i) scratch[get<0>(rcr(i, 0))] = r(i);
  }
  __syncthreads();
  load_cols<CM, RM>(cmma, scratch, c, tid);
  __syncthreads();
}

// The end of TL `Compute RowSum|RowMax X and get Z` whose Z is read only by column (`Z^T`) of a
// (CM, M) tile of `cmma`: each warp's quad-reduced partial of the M-row tile of `rmma` (WN warps
// along N) goes to the shared scratch (WN x M fp32), and every thread reduces the partials of its
// columns straight into the column vector `c` (two __syncthreads, not the four of
// rows_across_warps followed by rows_to_cols).
template <int M, int WM, int WN, bool MAX, int CM, class RMma, class CMma, class REngine, class RLayout, class CEngine, class CLayout>
__device__ __forceinline__ void rows_across_warps_to_cols(RMma const& rmma, Tensor<REngine, RLayout> const& partial, CMma const& cmma,
                                                          Tensor<CEngine, CLayout>& c, float* scratch, int tid) {
  Tensor rc = rmma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, MmaTileN<RMma>>{}));
  auto rcr = rows_view(rc);
  const int wn = (tid / 32) / WM;
  if (tid % 4 == 0) {
    CUTE_UNROLL
    for (int i = 0; i < size<0>(rcr); ++i) scratch[wn * M + get<0>(rcr(i, 0))] = partial(i);
  }
  __syncthreads();
  Tensor cc = cmma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<CM>, Int<M>>{}));
  auto ccr = rows_view(cc);
  CUTE_UNROLL
  for (int k = 0; k < size<1>(ccr); ++k) {
    const int col = get<1>(ccr(0, k));
    float v = scratch[col];
    CUTE_UNROLL
    for (int w = 1; w < WN; ++w) v = MAX ? fmaxf(v, scratch[w * M + col]) : v + scratch[w * M + col];
    c(k) = v;
  }
  __syncthreads();
}

}  // namespace qattn
