#!/usr/bin/env python3
"""sh4: dQ's additions as red.global.add.v4.f32 without shared memory: the lanes of a quad pair exchange
one value pair per (row, two column blocks) with a shuffle, so each lane holds 4 consecutive columns
(8 float4 reductions per thread instead of 16 float2; 64 contiguous bytes per row per instruction).
  python3 variants5.py BASE.cu OUT_DIR SUFFIX
"""
import re
import sys

base_path, out, suffix = sys.argv[1:4]
HELPER = r'''
// ---- experiment (variants5.py): dQ by red.global.add.v4 after a quad-pair shuffle ----
template <int M, int N, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void exp_add_dq_shfl(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  auto [tXgX, tXcX, rows_left] = qattn::acc_global_part<M, N>(mma, mX, tile_row, tid);
  const bool odd = tid & 1;
  constexpr int kN = decltype(size(acc))::value;  // value v: column pair element v % 2, row half (v / 2) % 2, block v / 4
  CUTE_UNROLL
  for (int jp = 0; jp < kN / 8; ++jp) {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int v0 = 8 * jp + 2 * h, v1 = v0 + 4;
      const float s0 = odd ? acc(v0) : acc(v1), s1 = odd ? acc(v0 + 1) : acc(v1 + 1);
      const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      const float a = odd ? r0 : acc(v0), b = odd ? r1 : acc(v0 + 1), c = odd ? acc(v1) : r0, d = odd ? acc(v1 + 1) : r1;
      const int vi = odd ? v1 : v0;
      float* x = &tXgX(vi) - (odd ? 2 : 0);
      if (get<0>(tXcX(vi)) < rows_left)
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(x), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
    }
  }
}
'''
text = open(base_path).read()
call = re.search(r"qattn::add_acc_global<(\d+), (\d+)>\((MmaCols<[^>]*>\{\}), rdQ, mdQ, i, tid\);", text)
assert call
text = text.replace(call.group(0), f"exp_add_dq_shfl<{call.group(1)}, {call.group(2)}>({call.group(3)}, rdQ, mdQ, i, tid);")
k = text.index("__global__ void __launch_bounds__(kThreads, 1)")
open(f"{out}/sh4_{suffix}.cu", "w").write(text[:k] + HELPER + "\n" + text[k:])
