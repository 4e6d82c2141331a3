// qattn device runtime, Hopper (sm90a): the parameters of one launch of a generated forward kernel,
// shared by the kernel (scheduler.cuh) and its host launch code (launch.cuh), which the split build
// compiles with the host compiler alone (docs/translation.md, "Building"): plain C++, no device code.
#pragma once
#include <cstdint>

#include <cuda.h>

namespace qattn::sm90 {

// Kernel parameters (passed by value as a __grid_constant__: the tensor maps must stay in
// parameter space for TMA). Filled by the generated launch code (src/backend/sm90/emit.cc).
struct Params {
  CUtensorMap tma_q, tma_k, tma_v, tma_o;
  float* lse;                 // (batch, heads_q, seqlen_q) or nullptr
  int seqlen_q, seqlen_k, heads_q, heads_kv, batch;
  int pack;                   // TL {pack}: query heads per tile group (1 otherwise)
  float softmax_scale;        // TL builtin softmax_scale
  float scalars[4];           // the kernel's loop-invariant factors (a tile's pending scale), computed at launch
  int window_left, window_right;  // the kernel mask's window (the TL Kernel statement's bounds), evaluated at launch
  int arg_window_left, arg_window_right;  // TL builtins window_left / window_right (an unbounded side resolved)
  float softcap;                          // TL builtin softcap
  int num_tiles;              // the TL Grid's points; the launch has <= this many blocks
  int* tile_counter;          // persistent: the next-tile counter (0 at launch; the last fetch resets it)
  const void* aux[4];
  int page_size, pages, num_pages;  // a paged KV cache (TL {paged}): K / V maps over pages (ABI 4)
  int kv_stream;                    // K / V streamed: one query tile per (batch, head) (kv_streamed; L2 evict-first loads)
  int splits;                       // split keys (TL `s = 0: splits`, ABI 8): O and LSE hold batch * splits parts; else 1
  // packed ragged batches (TL {ragged}, ABI 5): the packed tensors' rows, and O for the stores that
  // stop at a sequence's last row (a TMA box would run into the next sequence)
  int total_q, total_k;
  void* o;
  int64_t o_row_stride, o_head_stride;
  int64_t o_batch_stride;  // (TL Merge: the parts' entries, b * splits + s)
  // TL `Merge split ... end` (ABI 10): the merged O and LSE, and a counter per (tile without its part,
  // consumer warpgroup) at merge_counters[((b * merge_heads + head) * merge_m_blocks + m_block) * consumers + cw]
  void* o_merged;
  float* lse_merged;
  int64_t om_batch_stride, om_row_stride, om_head_stride;
  int* merge_counters;
  int merge_m_blocks, merge_heads;
};

}  // namespace qattn::sm90
