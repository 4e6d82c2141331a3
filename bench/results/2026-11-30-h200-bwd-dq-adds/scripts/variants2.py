#!/usr/bin/env python3
"""Second call's variants of a translated d128 backward (the first call: variants.py; bulk was 1.00-1.05x
base, nodq 1.5-1.6x): what makes dQ's additions slow.
  swap_base / swap_bulk: the grid's x and y exchanged (blockIdx.x the query head): the blocks that run
        at once add into 32 heads' dQ instead of one head's (contention on the same lines?)
  v4:   each warp's rows restaged through shared memory and added with red.global.add.v4.f32 (whole
        512-byte rows per instruction instead of 8 rows x 32 bytes)
  big:  timing only (its dQ is scrambled): each warp's 16 x 64 values added by one 4 KB bulk reduction
        into a contiguous chunk (the per-operation cost of 256-byte bulk reductions?)
  python3 variants2.py BASE.cu BULK.cu OUT_DIR SUFFIX
"""
import re
import sys

base_path, bulk_path, out, suffix = sys.argv[1:5]
base, bulk = open(base_path).read(), open(bulk_path).read()


def swap(text):
    a = "  const int n_block = blockIdx.x;\n  const int head = blockIdx.y;\n"
    g = "const long long gx = qattn::cdiv(seqlen_k, BN), gy = heads_q, gz = batch;"
    assert a in text and g in text
    text = text.replace(a, "  const int n_block = blockIdx.y;\n  const int head = blockIdx.x;\n")
    return text.replace(g, "const long long gy = qattn::cdiv(seqlen_k, BN), gx = heads_q, gz = batch;")


HELPERS = r'''
// ---- experiment (variants2.py): dQ additions restaged per warp ----
template <int M, int N, bool BIG, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void exp_add_dq(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                           Tensor<GEngine, GLayout> const& mX, int tile_row, float* stage, int tid) {
  constexpr int kWarps = int(decltype(size(TiledMma{}))::value) / 32;
  constexpr int kCols = M * N / (kWarps * 16);
  constexpr int kLd = N + 8;
  auto [tXgX, tXcX, rows_left] = qattn::acc_global_part<M, N>(mma, mX, tile_row, tid);
  const int lane = tid % 32, warp = tid / 32;
  if (BIG && lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  __syncwarp();
  float* wst = stage + warp * 16 * kCols;  // BIG: this warp's contiguous 16 x kCols chunk (xor-swizzled)
  const int row0 = __shfl_sync(0xffffffffu, int(get<0>(tXcX(0))), 0), col0 = __shfl_sync(0xffffffffu, int(get<1>(tXcX(0))), 0);
  constexpr int kN = decltype(size(acc))::value;
  CUTE_UNROLL
  for (int j = 0; j < kN / 2; ++j) {
    const int r = get<0>(tXcX(2 * j)), c = get<1>(tXcX(2 * j));
    if (BIG) {
      const int lr = r - row0, lc = c - col0;
      *reinterpret_cast<float2*>(wst + lr * kCols + (lc ^ ((lr % 8) * 8))) = make_float2(acc(2 * j), acc(2 * j + 1));
    } else {
      *reinterpret_cast<float2*>(stage + r * kLd + c) = make_float2(acc(2 * j), acc(2 * j + 1));
    }
  }
  if (BIG) {
    qattn::sm90::fence_async_smem();
    __syncwarp();
    if (lane == 0) {
      float* dst = &mX(tile_row * M, 0) + (row0 / 16 * (N / kCols) + col0 / kCols) * 16 * kCols;
      exp_bulk_add(dst, wst, 16 * kCols * 4);
    }
  } else {
    __syncwarp();
    CUTE_UNROLL
    for (int k = 0; k < 16 * kCols / 128; ++k) {
      const int lr = k * (128 / kCols) + lane / (kCols / 4), lc = lane % (kCols / 4) * 4;
      const int row = row0 + lr;
      if (row < rows_left) {
        const float4 v = *reinterpret_cast<const float4*>(stage + row * kLd + col0 + lc);
        float* x = &mX(tile_row * M + row, col0 + lc);
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(x), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
      }
    }
  }
}
'''


def restage(text, big):
    call = re.search(r"(?<!void )add_acc_global_bulk<(\d+), (\d+)>\(", text)
    assert call
    text = text.replace(call.group(0), f"exp_add_dq<{call.group(1)}, {call.group(2)}, {'true' if big else 'false'}>(")
    k = text.index("__global__ void __launch_bounds__(kThreads, 1)")
    return text[:k] + HELPERS + "\n" + text[k:]


for name, text in (("swap_base", swap(base)), ("swap_bulk", swap(bulk)), ("v4", restage(bulk, False)), ("big", restage(bulk, True))):
    open(f"{out}/{name}_{suffix}.cu", "w").write(text)
