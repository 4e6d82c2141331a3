// What the planner needs to know about a request and a target, in plain numbers. Built from an
// AttentionSpec and a GpuFacts entry by plan::make_problem / plan::make_target (plan.cc), so the
// tile rules and the resource model stay free of JSON and presets.
#pragma once
#include <cstdint>
#include <string>

#include "spec/spec.h"
#include "tl/ast.h"

namespace qattn::plan {

struct Problem {
  std::string name;          // preset or spec name, used for the kernel name
  int heads_q = 0, heads_kv = 0;
  int d_qk = 0, d_v = 0;
  tl::DType dtype = tl::DType::BF16;   // storage type of Q, K, V
  tl::DType out_dtype = tl::DType::BF16;
  tl::MaskSpec::Kind mask = tl::MaskSpec::Kind::None;
  int64_t window_left = -1, window_right = -1;  // Window only; -1 = unbounded on that side
  bool return_lse = false;
  bool aux_grad = false;       // the backward's gradients of the fp32 auxiliary inputs (`Compute Gradient`)
  bool deterministic = false;  // the backward's additions `{ordered}` (bit-identical gradients); the forward has none
  bool varlen = false;  // TL `Let seqlen_q = cu_seqlens_q[b + 1] - cu_seqlens_q[b]` and `{ragged: ...}` (docs/tl.md, "Ragged batches")
  spec::KvCache kv_cache = spec::KvCache::None;  // TL `Let seqlen_k = cache_seqlens[b]` (and `{paged: block_table}`)
  bool split_keys = false;  // TL `s = 0: splits`, O and LSE at [b, s, head] (docs/tl.md, "Splitting the keys"); implies LSE
  bool v_from_k = false;     // V is K's first d_v columns (TL `Allocate V in shared ... {view: K}`; absorbed MLA)
  spec::Variants variants;   // score modifications and extra masks (TL Score / Mask declarations)
  int64_t seqlen_q = 0;      // the spec's `problem.seqlen_q` when it states one (0: not stated; the kernel
                             // is generic in the lengths, this only informs choices such as GQA packing)
  int bytes() const;         // bytes per element of the storage type
  bool causal_like() const { return mask == tl::MaskSpec::Kind::Causal || mask == tl::MaskSpec::Kind::CausalTopLeft; }
};

struct Target {
  std::string name;          // "H100 SXM"
  int sm = 0;                // 75, 80, 86, 89, 90
  int sm_count = 0;
  int smem_per_sm = 0;       // bytes
  int smem_per_block = 0;    // bytes, opt-in maximum
  int regs_per_sm = 65536;
  int regs_per_thread = 255;
  bool cp_async = false, wgmma = false, tma = false, fp8 = false, bf16 = false;
};

// One tile configuration with the reason it was chosen (a row of the rules table).
struct TileConfig {
  int bm = 0, bn = 0;
  int warps = 4;       // all warps of the block (sm90: producer + consumer warpgroups)
  int stages = 1;      // K/V shared-memory buffers
  std::string reason;
  bool persistent = false;  // sm90: TL Grid `{persistent}` (one block per SM takes the tiles in turn)
  bool pack_gqa = false;    // sm90: TL `{pack: heads_q / heads_kv}`: a tile holds a kv head's query heads
  int unroll = 0;           // the combine: TL `{unroll: U}` on the loop over the parts (0: none)
  int split_columns = 1;    // sm90: TL `Role consumer warpgroups N ... split columns` (N > 1: they share the BM rows)
  int consumer_wgs() const { return split_columns > 1 ? split_columns : bm / 64; }  // sm90 consumer warpgroups
};

// What a configuration costs. Filled by plan::estimate (budget.cc).
struct Budget {
  int64_t smem_bytes = 0;
  int regs_per_thread = 0;   // estimate for the consumer threads
  int blocks_per_sm = 0;
  bool fits = false;
  std::string why_not;       // empty when it fits
};

}  // namespace qattn::plan
