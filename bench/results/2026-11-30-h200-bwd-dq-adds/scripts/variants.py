#!/usr/bin/env python3
"""Edits a translated d128 backward (.cu) into the A/B variants of this experiment:
  bulk: dQ's per-iteration addition through add_acc_global_bulk (rows staged in shared memory, bulk
        reductions by the TMA unit) instead of add_acc_global (red.global.add.v2 per value pair)
  nodq: dQ's addition removed (timing only: what the additions cost; its numerics must fail)
  python3 variants.py BASE.cu OUT_DIR NAME_SUFFIX
"""
import re
import sys

src, out, suffix = sys.argv[1:4]
# the bulk variant's device function (written for this experiment; not in the device runtime)
BULK = r'''
// ---- experiment (variants.py): dQ rows staged in shared memory, added by the TMA unit ----
__device__ __forceinline__ void exp_bulk_add(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               ::"l"(reinterpret_cast<uint64_t>(dst)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(src))), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Each warp stages its 16 rows of the fp32 accumulator in `stage` ((M, N + 8) fp32: rows padded by 8
// floats) and its first 16 lanes add one row each with a bulk reduction; only the warp synchronises
// (a lane waits until its previous reduction has read its row before the warp rewrites the stage).
template <int M, int N, class TiledMma, class AEngine, class ALayout, class GEngine, class GLayout>
__device__ __forceinline__ void add_acc_global_bulk(TiledMma const& mma, Tensor<AEngine, ALayout> const& acc,
                                                    Tensor<GEngine, GLayout> const& mX, int tile_row, float* stage, int tid) {
  constexpr int kWarps = int(decltype(size(TiledMma{}))::value) / 32;
  constexpr int kCols = M * N / (kWarps * 16);  // the columns of a warp's 16 rows
  constexpr int kLd = N + 8;
  auto [tXgX, tXcX, rows_left] = qattn::acc_global_part<M, N>(mma, mX, tile_row, tid);
  const int lane = tid % 32;
  if (lane < 16) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  __syncwarp();
  constexpr int kN = decltype(size(acc))::value;
  CUTE_UNROLL
  for (int j = 0; j < kN / 2; ++j) {
    const int r = get<0>(tXcX(2 * j)), c = get<1>(tXcX(2 * j));
    *reinterpret_cast<float2*>(stage + r * kLd + c) = make_float2(acc(2 * j), acc(2 * j + 1));
  }
  qattn::sm90::fence_async_smem();
  __syncwarp();
  const int row = __shfl_sync(0xffffffffu, int(get<0>(tXcX(0))), 0) + lane;
  const int col = __shfl_sync(0xffffffffu, int(get<1>(tXcX(0))), 0);
  if (lane < 16 && row < rows_left) exp_bulk_add(&mX(tile_row * M + row, col), stage + row * kLd + col, kCols * 4);
}
__device__ __forceinline__ void bulk_add_finish(int tid) {
  if (tid % 32 < 16) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
'''
base = open(src).read()
call = re.search(r"qattn::add_acc_global<(\d+), (\d+)>\((MmaCols<[^>]*>\{\}), rdQ, mdQ, i, tid\);[^\n]*", base)
assert call, "no dQ addition in the base"
m, n = int(call.group(1)), int(call.group(2))
smem = re.search(r"constexpr int kSmemBytes = (\d+);", base)
stage_bytes = m * (n + 8) * 4
bulk = base.replace(call.group(0), f"add_acc_global_bulk<{m}, {n}>({call.group(3)}, rdQ, mdQ, i, "
                    f"reinterpret_cast<float*>(smem + {smem.group(1)}), tid);  // bulk reductions")
bulk = bulk.replace(smem.group(0), f"constexpr int kSmemBytes = {int(smem.group(1)) + stage_bytes};  // + the dQ stage")
# the reductions complete before the block exits: after the loop (the first statement after it)
loop_end = re.search(r"\n    qattn::commit\(\);  // the next iteration's copies: one group\n  }\n", bulk)
assert loop_end
bulk = bulk[:loop_end.end()] + "  bulk_add_finish(tid);\n" + bulk[loop_end.end():]
k = bulk.index("__global__ void __launch_bounds__(kThreads, 1)")
bulk = bulk[:k] + BULK + "\n" + bulk[k:]
nodq = base.replace(call.group(0), "// (dQ's addition removed: timing only)")
for name, text in (("base", base), ("bulk", bulk), ("nodq", nodq)):
    open(f"{out}/{name}_{suffix}.cu", "w").write(text)
