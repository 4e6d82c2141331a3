// qattn device runtime, Hopper (sm90a): the consumer warpgroup's register tiles and the TL
// Computes on them. The sm90 emitter (src/backend/sm90/emit.cc) writes one call per TL statement.
//
// A consumer warpgroup owns 64 rows of the query tile. Its register tensors:
//   tile  `float x[N / 2]`   a (64, N) wgmma accumulator: per n8 column chunk i, registers
//                            4i..4i+3 hold (r, 8i + 2c), (r, 8i + 2c + 1), (r + 8, 8i + 2c),
//                            (r + 8, 8i + 2c + 1), r = 16 * warp + lane / 4, c = lane % 4
//   rows  `float x[2]`       a TL row vector (BM): the values of the thread's rows r and r + 8
//                            (the 4 threads of a quad hold the same values), or, for a row sum
//                            kept *partial*, each thread's share of it (quad_sum makes it whole)
//   A     `uint32_t x[N / 4]` a converted tile as the register A operand of a wgmma (two 16-bit
//                            values per register: the accumulator layout IS the A layout)
// TL arithmetic is kept (qattn/softmax.cuh's op:: functors: -inf - -inf = -inf, ...); a pending
// positive factor of a tile (the softmax scale, folded into its consumers) arrives as `xscale`.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "qattn/ops.cuh"
#include "qattn/sm90/wgmma.cuh"

namespace qattn::sm90 {

// ---- TL scalar semantics: the mma.sync runtime's functors (qattn::op, ops.cuh), plus ----------------
namespace op {
using namespace qattn::op;
// The same operations where the lowering has proved a fact about the operands (no guard needed):
// AddNonNeg: neither operand can be -inf (both are >= 0: sums of exponentials, a rescale of them).
// SubMax: b is an upper bound of a (b = max(a, ...)): a - b, where b = -inf implies a = -inf.
struct AddNonNeg { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct SubMax { __device__ __forceinline__ float operator()(float a, float b) const { return a - (b == -INFINITY ? 0.f : b); } };
// MaxOfUpper: max(a, b) where b is an upper bound of a, i.e. b.
struct MaxOfUpper { __device__ __forceinline__ float operator()(float, float b) const { return b; } };
}  // namespace op

// Row (0 or 1: r or r + 8) of accumulator register e.
__device__ __forceinline__ constexpr int row_of(int e) { return (e >> 1) & 1; }

// One of the thread's two rows. Every Compute below has a whole-tensor form and a per-row form
// (first argument Row{h}): the emitter runs a run of row-wise statements row by row, `for (h = 0;
// h < 2; ++h)`, so that one row's exponentials start while the other row's maximum is still being
// reduced (the rows are independent).
struct Row {
  int h;
};
// Calls f(e) for the registers of row h: of a tile (N > 2: registers 4i + 2h, 4i + 2h + 1) or of a
// row vector (N == 2: register h).
template <int N, class F>
__device__ __forceinline__ void for_row(Row r, F&& f) {
  if constexpr (N == 2) {
    f(r.h);
  } else {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      f(4 * i + 2 * r.h);
      f(4 * i + 2 * r.h + 1);
    }
  }
}

template <int N>
__device__ __forceinline__ void fill(float (&x)[N], float v) {
#pragma unroll
  for (int i = 0; i < N; ++i) x[i] = v;
}

// Quad reductions: the 4 threads of an accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}
// A partial row vector (per-thread shares) made whole, in place.
__device__ __forceinline__ void quad_sum_rows(Row r, float (&x)[2]) { x[r.h] = quad_sum(x[r.h]); }

// TL `Compute RowMax X and get Z` (kAccumulate: `and accumulate Z`, Z = max(Z, ...)); the row
// maximum of xscale * X (xscale > 0: max(c x) = c max(x)).
template <bool kAccumulate, int N>
__device__ __forceinline__ void row_max(Row r, const float (&x)[N], float (&z)[2], float xscale = 1.f) {
  const int h = r.h;
  float m = x[2 * h];
#pragma unroll
  for (int i = 0; i < N / 4; ++i) m = fmaxf(m, fmaxf(x[4 * i + 2 * h], x[4 * i + 2 * h + 1]));
  m = quad_max(m) * xscale;
  z[h] = kAccumulate ? fmaxf(z[h], m) : m;
}

// TL `Compute RowSum X and get Z` (kAccumulate: Z += ...). kPartial: Z keeps this thread's share
// of the sum (the quad reduction is left to the first use that needs the whole value).
template <bool kAccumulate, bool kPartial, int N>
__device__ __forceinline__ void row_sum(Row r, const float (&x)[N], float (&z)[2], float xscale = 1.f) {
  const int h = r.h;
  float s = x[2 * h] + x[2 * h + 1];
#pragma unroll
  for (int i = 1; i < N / 4; ++i) s += x[4 * i + 2 * h] + x[4 * i + 2 * h + 1];
  if constexpr (!kPartial) s = quad_sum(s);
  s *= xscale;
  z[h] = kAccumulate ? z[h] + s : s;
}

// TL element-wise Computes. Z may alias X.
// Same shape (tile and tile, or rows and rows): z = op(xscale * x, y).
template <class Op, int N>
__device__ __forceinline__ void ew(Row r, const float (&x)[N], const float (&y)[N], float (&z)[N], float xscale = 1.f) {
  for_row<N>(r, [&](int e) { z[e] = Op{}(x[e] * xscale, y[e]); });
}
// Tile and row vector (the row value broadcast along its row). A Subtract uses 0 for a row value
// of -inf, so that xscale * x - r is one FFMA and a fully masked row gives exp2(-inf) = 0 (TL's
// -inf - -inf = -inf; docs/translation.md).
template <class Op, int N>
__device__ __forceinline__ void ew_rows(Row r, const float (&x)[N], const float (&rv)[2], float (&z)[N], float xscale = 1.f) {
  if constexpr (std::is_same_v<Op, op::Sub>) {
    const float v = rv[r.h] == -INFINITY ? 0.f : rv[r.h];
    for_row<N>(r, [&](int e) { z[e] = x[e] * xscale - v; });
  } else {
    for_row<N>(r, [&](int e) { z[e] = Op{}(x[e] * xscale, rv[r.h]); });
  }
}
// Tile or rows and a scalar.
template <class Op, int N>
__device__ __forceinline__ void ew_scalar(Row r, const float (&x)[N], float s, float (&z)[N], float xscale = 1.f) {
  for_row<N>(r, [&](int e) { z[e] = Op{}(x[e] * xscale, s); });
}
// Unary: z = f(xscale * x).
template <class Op, int N>
__device__ __forceinline__ void map(Row r, const float (&x)[N], float (&z)[N], float xscale = 1.f) {
  for_row<N>(r, [&](int e) { z[e] = Op{}(x[e] * xscale); });
}
// TL `Compute Rescale X, alpha`: each row of X times its alpha (X a tile or a row vector).
template <int N>
__device__ __forceinline__ void rescale(Row r, float (&x)[N], const float (&alpha)[2]) {
  for_row<N>(r, [&](int e) { x[e] *= alpha[r.h]; });
}
// TL `Compute Normalize O, l`: each row of O divided by its l (l = 0: the row is 0).
template <int N>
__device__ __forceinline__ void normalize(Row r, float (&o)[N], const float (&l)[2]) {
  const float inv = l[r.h] > 0.f ? 1.f / l[r.h] : 0.f;
  for_row<N>(r, [&](int e) { o[e] *= inv; });
}

// z = x (a statement the lowering folded: max with -inf, a sum into 0).
template <int N>
__device__ __forceinline__ void copy(Row r, const float (&x)[N], float (&z)[N]) {
  for_row<N>(r, [&](int e) { z[e] = x[e]; });
}

// The whole-tensor forms: both rows.
template <int N>
__device__ __forceinline__ void copy(const float (&x)[N], float (&z)[N]) {
  copy(Row{0}, x, z);
  copy(Row{1}, x, z);
}
__device__ __forceinline__ void quad_sum_rows(float (&x)[2]) {
  quad_sum_rows(Row{0}, x);
  quad_sum_rows(Row{1}, x);
}
template <bool kAccumulate, int N>
__device__ __forceinline__ void row_max(const float (&x)[N], float (&z)[2], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) row_max<kAccumulate>(Row{h}, x, z, xscale);
}
template <bool kAccumulate, bool kPartial, int N>
__device__ __forceinline__ void row_sum(const float (&x)[N], float (&z)[2], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) row_sum<kAccumulate, kPartial>(Row{h}, x, z, xscale);
}
template <class Op, int N>
__device__ __forceinline__ void ew(const float (&x)[N], const float (&y)[N], float (&z)[N], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) ew<Op>(Row{h}, x, y, z, xscale);
}
template <class Op, int N>
__device__ __forceinline__ void ew_rows(const float (&x)[N], const float (&rv)[2], float (&z)[N], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) ew_rows<Op>(Row{h}, x, rv, z, xscale);
}
template <class Op, int N>
__device__ __forceinline__ void ew_scalar(const float (&x)[N], float s, float (&z)[N], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) ew_scalar<Op>(Row{h}, x, s, z, xscale);
}
template <class Op, int N>
__device__ __forceinline__ void map(const float (&x)[N], float (&z)[N], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) map<Op>(Row{h}, x, z, xscale);
}
template <int N>
__device__ __forceinline__ void rescale(float (&x)[N], const float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) rescale(Row{h}, x, alpha);
}
template <int N>
__device__ __forceinline__ void normalize(float (&o)[N], const float (&l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) normalize(Row{h}, o, l);
}

template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (kBf16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// TL `Compute Convert P and get Pc bf16|fp16` (round to nearest) into the packed register form; the
// following `Reshape Pc from (MMA_C, ..) to (MMA_A, ..)` is free on sm90: the accumulator layout of
// a 64-row wgmma is the register-A layout of the next one.
template <bool kBf16, int N>
__device__ __forceinline__ void convert(Row r, const float (&x)[N], uint32_t (&z)[N / 2], float xscale = 1.f) {
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const int e = 4 * i + 2 * r.h;  // the pair (e, e + 1) of row h is register e / 2 of the A operand
    z[e / 2] = pack2<kBf16>(x[e] * xscale, x[e + 1] * xscale);
  }
}
template <bool kBf16, int N>
__device__ __forceinline__ void convert(const float (&x)[N], uint32_t (&z)[N / 2], float xscale = 1.f) {
#pragma unroll
  for (int h = 0; h < 2; ++h) convert<kBf16>(Row{h}, x, z, xscale);
}

// ---- GEMMs (wgmma): issue now, wait later --------------------------------------------------------
// TL `Compute GEMM A, B^T and get|accumulate C` with both operands in shared memory: A is the
// warpgroup's 64-row slice (from row a_row0) of an (A_ROWS, K_DIM) swizzled tile, B a (B_ROWS, K_DIM)
// tile. Issues K_DIM/16 wgmmas as one commit group; the registers are fenced so that the compiler
// keeps them out of the way until gemm_wait.
template <class Atom, int A_ROWS, int B_ROWS, int K_DIM, bool kAccumulate, class Element, int N>
__device__ __forceinline__ void gemm_ss(const Element* a, int a_row0, const Element* b, float (&acc)[N], int b_row0 = 0) {
  fence_regs(acc);
  wgmma_fence();
  // the tiles' descriptors once; each k16 step adds its compile-time offset to them (wgmma.cuh)
  const uint64_t da0 = operand_desc<false, A_ROWS>(a, a_row0), db0 = operand_desc<false, B_ROWS>(b, b_row0);
#pragma unroll
  for (int k = 0; k < K_DIM / 16; ++k) {
    const uint64_t da = da0 + operand_step<false, A_ROWS, Element>(k), db = db0 + operand_step<false, B_ROWS, Element>(k);
    Atom::ss(da, db, acc, kAccumulate || k > 0);
  }
  wgmma_commit();
}

// TL `Compute GEMM Pc, V and accumulate O`: A from registers (a converted accumulator), B a
// (B_ROWS, N_COLS) tile read MN-major (V untransposed). One commit group.
template <class Atom, int B_ROWS, class Element, int NP, int N>
__device__ __forceinline__ void gemm_rs(uint32_t (&a)[NP], const Element* b, float (&acc)[N]) {
  static_assert(NP == B_ROWS / 4, "A fragment: 4 registers per k16 step");
  fence_regs(acc);
  fence_regs(a);
  wgmma_fence();
  const uint64_t db0 = operand_desc<true, B_ROWS>(b, 0);
#pragma unroll
  for (int k = 0; k < B_ROWS / 16; ++k) {
    const uint64_t db = db0 + operand_step<true, B_ROWS, Element>(k);
    Atom::rs(&a[4 * k], db, acc, true);
  }
  wgmma_commit();
}

// Waits until at most kPending of this warpgroup's GEMM groups are in flight, then fences the
// registers of the groups that are now complete (their accumulators and A operands).
template <int kPending, class... Regs>
__device__ __forceinline__ void gemm_wait(Regs&... regs) {
  wgmma_wait<kPending>();
  (fence_regs(regs), ...);
}

}  // namespace qattn::sm90
