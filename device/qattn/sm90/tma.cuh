// qattn device runtime, Hopper (sm90a): TL `Copy X (rows, cols) in coordinate [i, 0] from global
// to shared {async}` and the O store, through the Tensor Memory Accelerator (the tensor maps: the
// host's tensor_map.h).
//
// Every global tensor of the C ABI is a 4-D view (cols, rows, heads, batch) with the columns
// contiguous; its tensor map cuts boxes of 64 columns x `box_rows` rows (one 128-byte swizzle
// atom wide). A (rows, d) shared tile is then d/64 column blocks of (rows, 64) elements, each
// stored with the 128-byte swizzle that both TMA and wgmma understand (Swizzle<3,4,3>: the 16-byte
// chunk index XOR the row index mod 8). Rows past the end of the sequence are zero-filled by the
// copy engine on loads and dropped on stores, so no predication is needed for any sequence length;
// head dims that are not a multiple of 64 are zero-padded the same way (the tensor map's column
// extent is the true head dim).
#pragma once
#include <cstdint>

#include <cuda.h>

#include "qattn/sm90/ptx.cuh"

namespace qattn::sm90 {

// ---- device: tile copies -------------------------------------------------------------------

// The map's box at row `row0` of (head, batch) into rows smem_row.. of a (ROWS, COLS) tile in `smem`
// (COLS/64 swizzled column blocks of ROWS x 64 elements), completing on `bar` (the caller set the
// expected bytes). smem_row 0 with a box of ROWS rows: the whole tile; a paged cache loads one page's
// box per call (smem_row a multiple of 8, so the 128-byte swizzle lines up with a whole-tile load).
// `stream`: rows no other block reads (a launch's keys streamed once, Params::kv_stream), loaded
// under an L2 evict-first policy.
template <int ROWS, int COLS, class Element>
__device__ __forceinline__ void tma_load_rows(const CUtensorMap* map, uint64_t* bar, Element* smem, int smem_row, int row0,
                                              int head, int batch, bool stream = false) {
  constexpr int kBlocks = (COLS + 63) / 64;
  const uint64_t policy = stream ? ptx::l2_evict_first() : 0;
#pragma unroll
  for (int c = 0; c < kBlocks; ++c) {
    if (stream) ptx::tma_load_4d(map, bar, smem + c * ROWS * 64 + smem_row * 64, c * 64, row0, head, batch, policy);
    else ptx::tma_load_4d(map, bar, smem + c * ROWS * 64 + smem_row * 64, c * 64, row0, head, batch);
  }
}
template <int ROWS, int COLS, class Element>
__device__ __forceinline__ void tma_load_tile(const CUtensorMap* map, uint64_t* bar, Element* smem, int row0, int head,
                                              int batch, bool stream = false) {
  tma_load_rows<ROWS, COLS>(map, bar, smem, 0, row0, head, batch, stream);
}

// The same through a packed map (make_tile_map with pack >= 1): `row0` counts packed rows (a
// multiple of `pack`, or of the box when a group spans several boxes: then the box starts at head
// row0 % pack of the group), `group` the head group.
template <int ROWS, int COLS, class Element>
__device__ __forceinline__ void tma_load_packed(const CUtensorMap* map, uint64_t* bar, Element* smem, int row0, int group,
                                                int batch, int pack) {
  constexpr int kBlocks = (COLS + 63) / 64;
#pragma unroll
  for (int c = 0; c < kBlocks; ++c)
    ptx::tma_load_5d(map, bar, smem + c * ROWS * 64, c * 64, row0 % pack, row0 / pack, group, batch);
}
template <int TILE_ROWS, int COLS, class Element>
__device__ __forceinline__ void tma_store_packed(const CUtensorMap* map, const Element* smem, int smem_row, int row0,
                                                 int group, int batch, int pack) {
  constexpr int kBlocks = (COLS + 63) / 64;
#pragma unroll
  for (int c = 0; c < kBlocks; ++c)
    ptx::tma_store_5d(map, smem + c * TILE_ROWS * 64 + smem_row * 64, c * 64, row0 % pack, row0 / pack, group, batch);
  ptx::tma_store_commit();
}

// Stores the 64 rows starting at `smem_row` of a (TILE_ROWS, COLS) swizzled shared tile to global
// row `row0` (rows past the sequence end are dropped by the copy engine).
template <int TILE_ROWS, int COLS, class Element>
__device__ __forceinline__ void tma_store_rows(const CUtensorMap* map, const Element* smem, int smem_row, int row0,
                                               int head, int batch) {
  constexpr int kBlocks = (COLS + 63) / 64;
#pragma unroll
  for (int c = 0; c < kBlocks; ++c)
    ptx::tma_store_4d(map, smem + c * TILE_ROWS * 64 + smem_row * 64, c * 64, row0, head, batch);
  ptx::tma_store_commit();
}

// Byte offset of element (row, col) inside a swizzled (ROWS, COLS) tile.
template <int ROWS>
__device__ __forceinline__ int swizzled_offset(int row, int col, int elem_bytes) {
  const int blk = col / 64, within = (col % 64) * elem_bytes;  // byte in the 128-byte row
  const int chunk = (within >> 4) ^ (row & 7);
  return blk * ROWS * 128 + row * 128 + (chunk << 4) + (within & 15);
}

// Bytes one tile load brings (the full boxes, zero-filled parts included).
template <int ROWS, int COLS, class Element>
__host__ __device__ constexpr int tile_bytes() {
  return ((COLS + 63) / 64) * ROWS * 64 * int(sizeof(Element));
}

}  // namespace qattn::sm90
