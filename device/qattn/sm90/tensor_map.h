// qattn device runtime, Hopper (sm90a), host side: the TMA tensor maps of a launch (the device side
// of the copies: tma.cuh). Plain C++ over the CUDA runtime and driver headers, so that the split
// build compiles the launch code with the host compiler alone.
//
// Every global tensor of the C ABI is a 4-D view (cols, rows, heads, batch) with the columns
// contiguous; its tensor map cuts boxes of 64 columns x `box_rows` rows (one 128-byte swizzle atom
// wide), which land in shared memory as the swizzled (rows, 64) column blocks tma.cuh describes.
#pragma once
#include <cstdint>
#include <cstring>

#include <cuda.h>
#include <cuda_runtime.h>

// The L2 promotion of a launch's K and V loads when one block streams each (batch, kv head)'s keys
// alone (one query tile per head: decoding, short queries; make_params): 128 bytes, a box row's
// width, read the decoding rows of an H200 11-13% faster than 256 bytes (K / V rows of one head 128
// bytes wide per box, 2 KB apart with 8 kv heads); every other load keeps 256 bytes, which the
// prefill sweep prefers (-0.3% geomean, -2..-3% on short MHA rows with 128 bytes everywhere; the
// query tiles of a head re-read its keys from L2). bench/results/2026-11-28-h200-l2-promotion. An A/B
// knob: -DQATTN_SM90_L2_STREAM=CU_TENSOR_MAP_L2_PROMOTION_L2_256B builds the previous launch code
// (bench/decode_tiles.sh, tests/gpu/l2_promotion_ab.sh).
#ifndef QATTN_SM90_L2_STREAM
#define QATTN_SM90_L2_STREAM CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#endif

namespace qattn::sm90 {

// The L2 promotion of a launch's K and V maps (above): QATTN_SM90_L2_STREAM when the launch has one
// query tile per (batch, head) — seqlen_q queries (x the GQA pack of a packed kernel) fit BM rows;
// for packed ragged sequences seqlen_q is the longest one's count, so each sequence has one tile
// (decoding through attention_varlen: 1.07-1.12x with both, H200, bench/results/2026-12-01-h200-varlen-static)
// — else 256 bytes. (tests/emit/launch_rule_check.cc)
// The same launches load the TL's `{stream}` copies (K, V) under an L2 evict-first policy
// (Params::kv_stream; no block re-reads them: MQA decoding 1.02-1.04x, the rest unchanged,
// bench/results/2026-11-30-h200-decode-evict).
static inline bool kv_streamed(long long seqlen_q, int pack, int bm) {
  return seqlen_q * (pack > 0 ? pack : 1) <= bm;
}
static inline CUtensorMapL2promotion kv_l2_promotion(long long seqlen_q, int pack, int bm) {
  return kv_streamed(seqlen_q, pack, bm) ? QATTN_SM90_L2_STREAM : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                    const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver the runtime already loaded (no -lcuda at link time).
static inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = nullptr;
  if (fn) return fn;
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  fn = reinterpret_cast<EncodeTiledFn>(p);
  return fn;
}

// The 4-D view (cols, rows, heads, batch) of a strided (batch, rows, heads, cols) tensor; strides in
// elements; returns 0, or (leaving `map` unspecified) the driver's CUresult when it refuses the
// tensor, -1 when the driver has no cuTensorMapEncodeTiled, -2 for a pack that does not divide.
// pack >= 1 (a kernel with TL `{pack: G}`, GQA packing; G = 1 when called with heads_q == heads_kv):
// the 5-D view (cols, G, rows, heads / G, batch), whose boxes of (64 columns, G heads, box_rows / G
// rows) land in shared memory as box_rows rows in the packed order (row r = query r / G of head
// r % G within the group), so the swizzled tile is the same; a group larger than the box (a multiple
// of it) is cut into boxes of (64 columns, box_rows heads, 1 row). pack 0: not packed, the 4-D view.
static inline int encode_tile_map(CUtensorMap* map, const void* base, bool bf16, int cols, int rows, int heads,
                                   int batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride,
                                   int box_rows, int pack, CUtensorMapL2promotion l2) {
  EncodeTiledFn fn = encode_tiled_fn();
  if (!fn) return -1;
  // a box holds whole groups (box_rows a multiple of G), or a group whole boxes (G a multiple of box_rows: 128 query
  // heads of DeepSeek's absorbed MLA in tiles of 64)
  if (pack < 0 || (pack > 0 && (heads % pack != 0 || (box_rows % pack != 0 && pack % box_rows != 0)))) return -2;
  std::memset(map, 0, sizeof(CUtensorMap));
  const cuuint64_t rows_ = cuuint64_t(rows > 0 ? rows : 1);
  const cuuint32_t elem_strides[5] = {1u, 1u, 1u, 1u, 1u};
  const auto dtype = bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (pack > 0) {
    const cuuint64_t dims[5] = {cuuint64_t(cols), cuuint64_t(pack), rows_, cuuint64_t(heads / pack), cuuint64_t(batch)};
    const cuuint64_t strides[4] = {cuuint64_t(head_stride) * 2, cuuint64_t(row_stride) * 2,
                                   cuuint64_t(head_stride) * 2 * cuuint64_t(pack), cuuint64_t(batch_stride) * 2};
    const cuuint32_t box[5] = {64u, cuuint32_t(pack < box_rows ? pack : box_rows), cuuint32_t(box_rows > pack ? box_rows / pack : 1), 1u, 1u};
    return int(fn(map, dtype, 5, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  }
  const cuuint64_t dims[4] = {cuuint64_t(cols), rows_, cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride) * 2, cuuint64_t(head_stride) * 2, cuuint64_t(batch_stride) * 2};
  const cuuint32_t box[4] = {64u, cuuint32_t(box_rows), 1u, 1u};
  return int(fn(map, dtype, 4, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, l2, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// The 4-D view (cols, rows, heads, batch) of a strided (batch, rows, heads, cols) fp32 tensor that TMA
// adds into (sm90 backward.cuh add_acc_global_tma): boxes of 32 columns (128 bytes, the 128-byte
// swizzle) x 64 rows; strides in elements. Returns as encode_tile_map.
static inline int encode_f32_add_map(CUtensorMap* map, const void* base, int cols, int rows, int heads, int batch,
                                     int64_t row_stride, int64_t head_stride, int64_t batch_stride) {
  EncodeTiledFn fn = encode_tiled_fn();
  if (!fn) return -1;
  std::memset(map, 0, sizeof(CUtensorMap));
  const cuuint32_t elem_strides[4] = {1u, 1u, 1u, 1u};
  const cuuint64_t dims[4] = {cuuint64_t(cols), cuuint64_t(rows > 0 ? rows : 1), cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride) * 4, cuuint64_t(head_stride) * 4, cuuint64_t(batch_stride) * 4};
  const cuuint32_t box[4] = {32u, 64u, 1u, 1u};
  return int(fn(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

// The driver encodes only in a thread with a current context. A thread whose first CUDA call is this
// launch (a Python thread pool: torch's device guard skips cudaSetDevice when the device number
// already matches) has none: then the runtime's device is made current (its primary context) and
// the map encoded again. Seen on an H200: CUresult 201 from 8 threads launching at once.
template <class Encode>
static inline int encode_in_context(Encode encode) {
  int r = encode();
  if (r == int(CUDA_ERROR_INVALID_CONTEXT)) {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaSetDevice(dev) == cudaSuccess) r = encode();
  }
  return r;
}
static inline int make_tile_map(CUtensorMap* map, const void* base, bool bf16, int cols, int rows, int heads,
                                 int batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride,
                                 int box_rows, int pack = 0,
                                 CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  return encode_in_context([&] {
    return encode_tile_map(map, base, bf16, cols, rows, heads, batch, row_stride, head_stride, batch_stride, box_rows, pack, l2);
  });
}
static inline int make_f32_add_map(CUtensorMap* map, const void* base, int cols, int rows, int heads, int batch,
                                   int64_t row_stride, int64_t head_stride, int64_t batch_stride) {
  return encode_in_context([&] { return encode_f32_add_map(map, base, cols, rows, heads, batch, row_stride, head_stride, batch_stride); });
}

}  // namespace qattn::sm90
