// experiment: dQ staged per warp in shared memory, added by bulk reductions (cp.reduce.async.bulk)
#pragma once
#include <cute/tensor.hpp>
namespace qattn::exp {
using namespace cute;
template <int M, int N, int CW, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global_bulk(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                    Tensor<GEngine, GLayout> const& mX, int tile_row, float* stage, int tid) {
  constexpr int LD = CW + 8;
  const int lane = tid % 32, warp = tid / 32;
  float* box = stage + warp * 16 * LD;
  Tensor c = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  const int r0 = int(get<0>(c(0))) & ~15, c0 = int(get<1>(c(0))) & ~(CW - 1);
  if (lane < 16) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
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
      float* g = &mX(row, c0);
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
