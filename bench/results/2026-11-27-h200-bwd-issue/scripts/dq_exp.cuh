// experiment: dQ's atomics row-contiguous. Each warp stages its (16, CW) part of the accumulator in
// shared memory (float2 stores), then adds it back by rows, 16 bytes a lane (red.global.add.v4.f32:
// a warp instruction covers two whole 256-byte row segments instead of eight 32-byte pieces).
#pragma once
#include <cute/tensor.hpp>
namespace qattn::exp {
using namespace cute;
template <int M, int N, int CW, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global_rows(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                    Tensor<GEngine, GLayout> const& mX, int tile_row, float* stage, int tid) {
  constexpr int LD = CW + 8;
  const int lane = tid % 32, warp = tid / 32;
  float* box = stage + warp * 16 * LD;
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  const int r0 = int(get<0>(c(0))) & ~15, c0 = int(get<1>(c(0))) & ~(CW - 1);
  constexpr int kN = decltype(size(acc))::value;
  CUTE_UNROLL
  for (int j = 0; j < kN / 2; ++j) {
    const int r = int(get<0>(c(2 * j))) - r0, col = int(get<1>(c(2 * j))) - c0;
    *reinterpret_cast<float2*>(box + r * LD + col) = make_float2(acc(2 * j), acc(2 * j + 1));
  }
  __syncwarp();
  constexpr int LPR = CW / 4;          // lanes per row (16 bytes each)
  constexpr int RPI = 32 / LPR;        // rows per instruction
  const int rows_left = int(size<0>(mX)) - tile_row * M - r0;
  const int64_t ld = stride<0>(mX);
  float* g = raw_pointer_cast(mX.data()) + int64_t(tile_row * M + r0) * ld + c0;
  const int lr = lane / LPR, lc = (lane % LPR) * 4;
  CUTE_UNROLL
  for (int it = 0; it < 16 / RPI; ++it) {
    const int r = it * RPI + lr;
    const float4 v = *reinterpret_cast<const float4*>(box + r * LD + lc);
    if (r < rows_left)
      asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(g + int64_t(r) * ld + lc), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
  }
  __syncwarp();
}
}  // namespace qattn::exp
namespace qattn::exp {
// dQ staged per warp in shared memory (STAGES slots a warp, the warp's (16, CW) part, rows padded to
// CW + 8 floats), added by one 1-D bulk reduction per row (lanes 0..15; cp.reduce.async.bulk add.f32),
// waiting only for the slot's previous reduction to have read it (wait_group.read STAGES - 1).
template <int M, int N, int CW, int STAGES, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global_bulk(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                    Tensor<GEngine, GLayout> const& mX, int tile_row, int iter, float* stage, int tid) {
  constexpr int LD = CW + 8;
  const int lane = tid % 32, warp = tid / 32;
  float* box = stage + (warp * STAGES + iter % STAGES) * 16 * LD;
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  const int r0 = int(get<0>(c(0))) & ~15, c0 = int(get<1>(c(0))) & ~(CW - 1);
  if (lane < 16) asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(STAGES - 1) : "memory");
  __syncwarp();
  constexpr int kN = decltype(size(acc))::value;
  CUTE_UNROLL
  for (int j = 0; j < kN / 2; ++j) {
    const int r = int(get<0>(c(2 * j))) - r0, col = int(get<1>(c(2 * j))) - c0;
    *reinterpret_cast<float2*>(box + r * LD + col) = make_float2(acc(2 * j), acc(2 * j + 1));
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncwarp();
  if (lane < 16) {
    const int row = tile_row * M + r0 + lane;
    if (row < int(size<0>(mX))) {
      float* g = raw_pointer_cast(mX.data()) + int64_t(row) * stride<0>(mX) + c0;
      uint32_t s = uint32_t(__cvta_generic_to_shared(box + lane * LD));
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(g), "r"(s), "n"(CW * 4) : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
}
__device__ __forceinline__ void bulk_drain(int tid) {
  if (tid % 32 < 16) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
}  // namespace qattn::exp
