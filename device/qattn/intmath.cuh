// qattn device runtime: TL integer arithmetic and builtin constants, shared by every architecture's
// generated code (host and device): `/` and `%` floor, cdiv(a, b) = ceil(a / b), min, max.
#pragma once
#if !defined(__CUDACC__)
#include <cuda_runtime.h>  // __host__ / __device__ for a host compiler (the split build's launch code)
#endif

namespace qattn {

__host__ __device__ constexpr int floordiv(int a, int b) {
  const int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__host__ __device__ constexpr int floormod(int a, int b) { return a - floordiv(a, b) * b; }
// ceil(a / b) directly, not as -floordiv(-a, b): ptxas (CUDA 13.0, sm_90a) dropped the outer negation
// of that form inside a min() of the split-keys loop bound: a causal kernel took its cdiv term 17 as -17
// (H200, 2026-11-29; tests/gpu/intmath_check.cu)
__host__ __device__ constexpr int cdiv(int a, int b) {
  const int q = a / b;
  return (q * b != a && ((a < 0) == (b < 0))) ? q + 1 : q;
}
__host__ __device__ constexpr int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

// TL builtins window_left / window_right from the C ABI's window side: -1 (unbounded) becomes
// seqlen_q + seqlen_k, a distance no query-key pair reaches, so the TL's bounds need no special case.
__host__ __device__ constexpr int window_side(int side, int seqlen_q, int seqlen_k) {
  return side < 0 ? seqlen_q + seqlen_k : side;
}

// A ragged launch's live work tiles numbered densely (sm90 Scheduler<..., true>): tile `local` of
// sequence b (its `live` query tiles fastest, then `heads`, then the `splits` key parts) -> the tile
// of the 1-D launch, whose groups (a kv head or head, a batch entry b * splits + s) have m_blocks
// query tiles, fastest (sm90 tile_coord). Reversed (the longest rows first) the group's live tiles
// end it (the last of them is query tile 0), else they begin it.
__host__ __device__ constexpr int ragged_tile(int b, int local, int live, int heads, int splits, int m_blocks, bool reversed) {
  const int j = local % live, rest = local / live;
  return ((b * splits + rest / heads) * heads + rest % heads) * m_blocks + (reversed ? m_blocks - live + j : j);
}

constexpr float kLog2e = 1.4426950408889634f;  // TL builtin log2e
constexpr float kLn2 = 0.6931471805599453f;    // TL builtin ln2

}  // namespace qattn
