// qattn device runtime: layouts.
//  - shared-memory tile layouts (swizzled so that 16-byte cp.async stores and ldmatrix loads are
//    free of bank conflicts),
//  - the row/column view of an mma.sync accumulator fragment (softmax works on rows),
//  - the TL `Reshape P from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)`: the accumulator
//    fragment of one GEMM re-read as the A-operand fragment of the next, per architecture.
// Every mma.sync atom used here (m16n8k8, m16n8k16, m16n8k32) has the same 16x8 accumulator layout:
// a thread holds (row lane/4, cols 2*(lane%4)+{0,1}) and the same two columns 8 rows below, i.e.
// value mode (2 cols, 2 row halves). Rows are shared by the 4 threads of a quad.
#pragma once
#include <cute/tensor.hpp>

namespace qattn {
using namespace cute;

// ---- shared memory ----------------------------------------------------------------------------
// A (ROWS, COLS) row-major tile of T in shared memory, swizzled in 8-row atoms whose rows are at
// most 128 bytes. Swizzle<B, M, 3>: M = log2(elements per 16 bytes) keeps 16-byte chunks whole;
// B = log2(16-byte chunks per atom row) spreads the 8 rows of an atom over all banks.
template <class T, int COLS>
constexpr int swizzle_atom_cols() {
  constexpr int per128 = 128 / int(sizeof(T));
  return COLS % per128 == 0 ? per128 : COLS % (per128 / 2) == 0 ? per128 / 2 : per128 / 4;
}

// ATOM: the atom's columns (by default the widest that divides COLS; a wgmma operand read from a
// column that is a multiple of 32 only takes 32 16-bit elements: the 64-byte swizzle).
template <class T, int ROWS, int COLS, int ATOM = swizzle_atom_cols<T, COLS>()>
CUTE_HOST_DEVICE constexpr auto smem_layout() {
  constexpr int kAtomCols = ATOM;
  constexpr int kElemsPer16B = 16 / int(sizeof(T));
  constexpr int kChunks = kAtomCols / kElemsPer16B;  // 2, 4 or 8 chunks of 16 bytes per atom row
  static_assert(COLS % kAtomCols == 0 && ROWS % 8 == 0, "tile does not tile by the swizzle atom");
  constexpr int kB = kChunks == 8 ? 3 : kChunks == 4 ? 2 : 1;
  constexpr int kM = kElemsPer16B == 8 ? 3 : 4;
  auto atom = composition(Swizzle<kB, kM, 3>{},
                          Layout<Shape<_8, Int<kAtomCols>>, Stride<Int<kAtomCols>, _1>>{});
  return tile_to_shape(atom, Shape<Int<ROWS>, Int<COLS>>{});
}

// STAGES copies of a (ROWS, COLS) tile: (ROWS, COLS, STAGES).
template <class T, int ROWS, int COLS, int STAGES>
CUTE_HOST_DEVICE constexpr auto smem_layout_staged() {
  constexpr int kAtomCols = swizzle_atom_cols<T, COLS>();
  constexpr int kElemsPer16B = 16 / int(sizeof(T));
  constexpr int kChunks = kAtomCols / kElemsPer16B;
  constexpr int kB = kChunks == 8 ? 3 : kChunks == 4 ? 2 : 1;
  constexpr int kM = kElemsPer16B == 8 ? 3 : 4;
  auto atom = composition(Swizzle<kB, kM, 3>{},
                          Layout<Shape<_8, Int<kAtomCols>>, Stride<Int<kAtomCols>, _1>>{});
  return tile_to_shape(atom, Shape<Int<ROWS>, Int<COLS>, Int<STAGES>>{});
}

// Bytes of a shared layout of T, rounded up to 128 (buffers start 128-byte aligned).
template <class L, class T>
constexpr int smem_bytes() {
  return (int(decltype(size(L{}))::value) * int(sizeof(T)) + 127) / 128 * 128;
}

// The transpose view of a (ROWS, COLS[, STAGES]) shared layout: (COLS, ROWS[, STAGES]), same
// memory. Used for a GEMM B operand stated without ^T (`GEMM P, V`): mma wants B as (N, K) = V^T.
template <class L>
CUTE_HOST_DEVICE constexpr auto transposed(L const& l) {
  using Rows = decltype(size<0>(l));
  using Cols = decltype(size<1>(l));
  if constexpr (decltype(rank(l))::value == 2) {
    return composition(l, make_layout(Shape<Cols, Rows>{}, Stride<Rows, _1>{}));
  } else {
    using Stages = decltype(size<2>(l));
    return composition(l, make_layout(Shape<Cols, Rows, Stages>{}, Stride<Rows, _1, decltype(Rows{} * Cols{})>{}));
  }
}

// ---- accumulator views --------------------------------------------------------------------------
// ((2,2), MMA_M, MMA_N) -> ((2, MMA_M), (2, MMA_N)): mode 0 walks this thread's rows, mode 1 its
// columns of those rows.
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_rowcol(L const& acc) {
  static_assert(decltype(rank(acc))::value == 3 && decltype(size<0>(acc))::value == 4, "not an mma accumulator");
  return make_layout(make_layout(layout<0, 1>(acc), layout<1>(acc)), make_layout(layout<0, 0>(acc), layout<2>(acc)));
}

template <class Engine, class Layout>
CUTE_HOST_DEVICE auto rows_view(Tensor<Engine, Layout>& t) {
  return make_tensor(t.data(), acc_rowcol(t.layout()));
}
template <class Engine, class Layout>
CUTE_HOST_DEVICE auto rows_view(Tensor<Engine, Layout> const& t) {
  return make_tensor(t.data(), acc_rowcol(t.layout()));
}

// ---- TL Reshape: accumulator (MMA_C) -> A operand (MMA_A) -----------------------------------------
// sm80 m16n8k16: the A fragment of one 16x16 k-block is (2 cols, 2 row halves, 2 k halves); the
// two 8-column accumulator tiles n = 2t and 2t+1 hold exactly those values in that order, so the
// reshape regroups pairs of N tiles: ((2,2), M, N) -> ((2,2,2), M, N/2). No data moves.
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_to_a_m16n8k16(L const& acc) {
  constexpr int N = decltype(size<2>(acc))::value;
  static_assert(N % 2 == 0, "MMA_N must be even for the m16n8k16 A layout");
  auto n = composition(layout<2>(acc), Layout<Shape<_2, Int<N / 2>>>{});  // n = s + 2t
  return make_layout(make_layout(layout<0, 0>(acc), layout<0, 1>(acc), layout<0>(n)), layout<1>(acc), layout<1>(n));
}

// sm75 m16n8k8: the A fragment of a 16x8 k-block is the accumulator fragment of a 16x8 tile.
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_to_a_m16n8k8(L const& acc) {
  return acc;
}

// sm89 m16n8k32 (8-bit A): a thread's A registers of a 16x32 k-block hold keys 4q..4q+3 and
// 4q+16..4q+19 (q = lane % 4) but its accumulator holds keys 8n+2q, 8n+2q+1. Rather than moving
// bytes between threads, the k-block is read in a permuted key order: A value (i, h, s) takes the
// accumulator value (i % 2, h) of N tile 4t + 2s + i / 2; the B operand (V^T) is stored with the
// same key permutation (see copy.cuh: transpose_v_fp8). ((2,2), M, N) -> ((4,2,2), M, N/4).
template <class L>
CUTE_HOST_DEVICE constexpr auto acc_to_a_m16n8k32(L const& acc) {
  constexpr int N = decltype(size<2>(acc))::value;
  static_assert(N % 4 == 0, "MMA_N must be a multiple of 4 for the m16n8k32 A layout");
  auto n = composition(layout<2>(acc), Layout<Shape<_2, _2, Int<N / 4>>>{});  // n = a + 2s + 4t
  auto i = make_layout(layout<0, 0>(acc), layout<0>(n));                        // i = col + 2a
  return make_layout(make_layout(i, layout<0, 1>(acc), layout<1>(n)), layout<1>(acc), layout<2>(n));
}

// The sm89 Reshape as registers: an mma A register packs 4 consecutive 8-bit values, which the
// view above gathers from two accumulator tiles ({c, c+1, c+8, c+9}), so the values are copied
// into a compact A fragment (byte permutes, 16 values per k-block).
template <class Engine, class Layout>
CUTE_HOST_DEVICE auto acc_to_a_m16n8k32_regs(Tensor<Engine, Layout> const& acc) {
  using T = typename Engine::value_type;
  Tensor view = make_tensor(acc.data(), acc_to_a_m16n8k32(acc.layout()));
  Tensor a = make_tensor<T>(make_layout(shape(view)));  // (MMA, MMA_M, MMA_K), compact
  CUTE_UNROLL
  for (int i = 0; i < size(a); ++i) a(i) = view(i);
  return a;
}

// The stage of an (M, N) tile of E-byte elements that TMA adds or stores (sm90/backward.cuh
// add_acc_global_tma, store_acc_global_tma): (M / 64) x (N / (128 / E)) boxes of 8 KB, row-major, each
// 64 rows of 128 bytes in the 128-byte swizzle (16-byte chunk k of row r at k ^ (r % 8)). The byte
// offset of value pair v (v even) of a wgmma accumulator fragment whose first value lies at (r, c)
// (c % 8 = 2 (lane % 4), its 64-row part and boxes aligned): the pair at (r + 8 ((v / 2) % 2),
// c + 8 (v / 4)), columns (c', c' + 1). An 8-column block is 8 E bytes: (16 / E) of them to a box.
template <int N, int E = 4>
CUTE_HOST_DEVICE constexpr int tma_stage_offset(int r, int c, int v) {
  constexpr int kBoxCols = 128 / E, kBlocks = 16 / E;  // columns, 8-column blocks a box
  const int blk = v / 4, half = (v / 2) % 2, row = r % 64, col = c % kBoxCols + 8 * (blk % kBlocks);
  return ((r / 64) * (N / kBoxCols) + c / kBoxCols + blk / kBlocks) * 8192 + (row + 8 * half) * 128 + (((col * E / 16) ^ (row % 8)) * 16) +
         (col * E) % 16;
}

// Within each 16-key group of the sm89 permuted order: logical key kk (= 4q + i) holds physical
// key 8*(i/2) + 2q + i%2.
CUTE_HOST_DEVICE constexpr int fp8_key_of_logical(int kk) {
  int q = (kk & 15) >> 2, i = kk & 3;
  return (kk & ~15) + 8 * (i >> 1) + 2 * q + (i & 1);
}

}  // namespace qattn
