#!/usr/bin/env python3
"""Eighth call's variants of the lowering's output (out/v4ab/new_*.cu, dQ by add_acc_global_v4): the
seventh call counted 260 more executed instructions per warp and iteration than without dQ's additions
(new 1.92 G, nodq 1.37 G): address arithmetic, runtime alignment checks and branches per value pair.
  v2t:  red.global.add.v2 per value pair from two row pointers computed once (immediate offsets,
        predicated by the row bound; the alignment checked once for the tile)
  sh4t: the quad-pair shuffle of add_acc_global_v4 with the same pointers (red.v4)
  python3 variants6.py NEW.cu OUT_DIR SUFFIX
"""
import re
import sys

src, out, suffix = sys.argv[1:4]
HELPER = r'''
// ---- experiment (variants6.py): dQ additions with the addresses computed once ----
template <int M, int N, bool V4, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void exp_add_tight(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                              Tensor<GEngine, GLayout> const& mX, int tile_row, int tid) {
  Tensor cX = mma.get_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
  const int rows_left = int(size<0>(mX)) - tile_row * M;
  const int64_t ld = get<0>(stride(mX));
  const int r0 = get<0>(cX(0)), r1 = get<0>(cX(2)), c0 = get<1>(cX(0));
  const bool odd = tid & 1;
  float* base = raw_pointer_cast(mX.data()) + int64_t(tile_row * M) * ld + c0 + (V4 && odd ? 6 : 0);
  float* p0 = base + r0 * ld;
  float* p1 = base + r1 * ld;
  const bool in0 = r0 < rows_left, in1 = r1 < rows_left;
  constexpr int kN = decltype(size(acc))::value;
  if constexpr (!V4) {
    CUTE_UNROLL
    for (int j = 0; j < kN / 4; ++j) {
      const int c = get<1>(cX(4 * j)) - c0;
      if (in0) asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p0 + c), "f"(float(acc(4 * j))), "f"(float(acc(4 * j + 1))) : "memory");
      if (in1) asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p1 + c), "f"(float(acc(4 * j + 2))), "f"(float(acc(4 * j + 3))) : "memory");
    }
  } else {
    CUTE_UNROLL
    for (int jp = 0; jp < kN / 8; ++jp) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int v0 = 8 * jp + 2 * h, v1 = v0 + 4;
        const float s0 = odd ? acc(v0) : acc(v1), s1 = odd ? acc(v0 + 1) : acc(v1 + 1);
        const float k0 = odd ? acc(v1) : acc(v0), k1 = odd ? acc(v1 + 1) : acc(v0 + 1);
        const float x0 = __shfl_xor_sync(0xffffffffu, s0, 1), x1 = __shfl_xor_sync(0xffffffffu, s1, 1);
        const float a = odd ? x0 : k0, b = odd ? x1 : k1, c = odd ? k0 : x0, d = odd ? k1 : x1;
        float* p = (h ? p1 : p0) + (get<1>(cX(v0)) - c0);
        if (h ? in1 : in0)
          asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
      }
    }
  }
}
'''
text = open(src).read()
call = re.search(r"qattn::sm90::add_acc_global_v4<(\d+), (\d+)>\((MmaCols<[^>]*>\{\}), rdQ, mdQ, i, tid\);", text)
assert call
k = text.index("__global__ void __launch_bounds__(kThreads, 1)")
for name, v4 in (("v2t", "false"), ("sh4t", "true")):
    t = text.replace(call.group(0), f"exp_add_tight<{call.group(1)}, {call.group(2)}, {v4}>({call.group(3)}, rdQ, mdQ, i, tid);")
    t = t[:k] + HELPER + "\n" + t[k:]
    open(f"{out}/{name}_{suffix}.cu", "w").write(t)
