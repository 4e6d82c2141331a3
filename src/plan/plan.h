// Stage 1 driver: AttentionSpec + GPU facts -> sketch (1a) and TL code (1b) on the built-in rules,
// with the tile decision, its resource budget and every feasible candidate. The TL code is parsed,
// checked (tl::check) and compared with the sketch (plan::refines) before it is returned; the
// interpreter check at several problem sizes is plan::verify.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hw/gpu.h"
#include "plan/budget.h"
#include "plan/problem.h"
#include "spec/spec.h"
#include "support/diag.h"
#include "tl/interp.h"

namespace qattn::plan {

struct PlanOptions {
  // Override the rules table (e.g. for autotuning or experiments): 0 keeps the rule's value.
  int bm = 0, bn = 0, warps = 0, stages = 0;
  // The backward pass (`qattn plan --backward`): make_plan writes the TL of the gradients instead
  // (make_backward_plan, backward.cc).
  bool backward = false;
  // The backward's GEMM orientation (`--bwd-form`): 0 the rule's (the transposed form on sm90 where it
  // has wgmma forms), 1 the natural form (S = Q K^T; on wgmma at d256 on sm90, else mma.sync), 2 the
  // transposed form (S^T = K Q^T), 3 the natural form with mma.sync's layouts (sm90 d256: the form
  // before the wgmma one, for A/B runs).
  int bwd_form = 0;
  // The combine step (`qattn plan --combine`): the TL of the kernel that merges the partial results
  // of a split over the keys by their LSE (make_combine_plan, combine.cc).
  bool combine = false;
};

// GQA packing (TL `{pack: heads_q / heads_kv}`, sm90): on when the spec states a query length whose
// tiles one head alone fills poorly (decoding, chunked prefill). Sets `pack`; returns the reason
// (empty when the question does not arise: no GQA/MQA, not sm90, variants, no stated length).
std::string pack_gqa_decision(const Problem& p, const Target& t, const TileConfig& tiles, bool& pack);
// Decoding on sm90: packed rows (seqlen_q x group) <= 64 take BM = 64 with one consumer warpgroup
// (plan.cc; the reason appended to tiles.reason). True when it changed `tiles`.
bool decode_tile(const Problem& p, const Target& t, TileConfig& tiles);

struct Plan {
  Problem problem;
  Target target;
  TileConfig tiles;
  Budget budget;
  std::vector<Candidate> candidates;  // every feasible configuration, best first
  std::string sketch;                 // TL sketch text (stage 1a)
  std::string code;                   // TL code text (stage 1b)
  std::string report;                 // markdown: decision, budget, candidates
};

Problem make_problem(const spec::AttentionSpec& s);
Target make_target(const hw::GpuFacts& g);

// Runs stages 1a and 1b. Reports PLAN01xx when no configuration fits the target (with the reason
// for the smallest one), PLAN0102 for an override that does not fit, and PLAN09xx if the rules
// engine produced TL that fails its own verification (an internal error, never expected).
std::optional<Plan> make_plan(const spec::AttentionSpec& s, const hw::GpuFacts& g, support::DiagSink& diags,
                              const PlanOptions& opts = {});

// The backward pass: FlashAttention-2's algorithm as a `Kernel NAME backward` program (docs/tl.md,
// "The backward pass"), tiles from the backward rules (a reason each), parsed, checked and compared
// with its sketch. PLAN0501 (variants: not differentiated yet), PLAN0502 (not fp16/bf16), PLAN0503
// (before sm80), PLAN0102 (tiles that do not fit).
std::optional<Plan> make_backward_plan(const spec::AttentionSpec& s, const hw::GpuFacts& g, support::DiagSink& diags,
                                       const PlanOptions& opts = {});
// What a backward program's tiles cost (shared memory: K, V, Q, dO, O, Pc, dSc, LSE) and whether
// they fit: BM and BN multiples of 16 * WARPS, the shared memory within the target's per-block limit.
Budget backward_budget(const Problem& p, const Target& t, const TileConfig& c);

// The combine step: the merge of `splits` partial results (O_part, LSE_part) into O and LSE as a
// `Kernel NAME combine` program (docs/tl.md, "Combining partial results"), one warp per query row.
// PLAN0601 (d_v not a multiple of 32), PLAN0102 (rows and warps that do not fit).
std::optional<Plan> make_combine_plan(const spec::AttentionSpec& s, const hw::GpuFacts& g, support::DiagSink& diags,
                                      const PlanOptions& opts = {});

// The TL oracle of stage 1: interprets the plan's TL code against the reference, in fp64 and in
// storage precision, at several problem sizes chosen from the program's own tiles (`Const BM, BN`,
// else the plan's) so that every loop and every tile boundary is crossed (verification_cases):
//   - lengths smaller than one tile, batch 2, two kv heads (GQA: two query heads each);
//   - seqlen_q over 3 query tiles and seqlen_k over 2 key tiles, seqlen_q > seqlen_k;
//   - seqlen_q over 3 query tiles and seqlen_k over 5 or more key tiles, seqlen_k > seqlen_q;
//   - a quarter query tile over 16 key tiles and a tail (not with a `document` mask);
// every length that spans tiles has a ragged tail (BM / 4 + 1, BN / 4 + 1 elements). With a
// `document` mask both lengths are equal (the second case is left out). An error or tolerance that
// is not finite fails (tl/verdict.h). The cases run in this order and stop at the first failure.
struct VerifyCase {
  std::string what;                     // e.g. "3 query tiles, 6 key tiles (BM 128, BN 64)"
  std::map<std::string, int64_t> dims;  // batch, heads_q, heads_kv, seqlen_q, seqlen_k
  bool ran = false;                     // false: not run
  tl::RunResult fp64, storage;
  bool passed() const { return ran && fp64.passed && storage.passed; }
};
std::vector<VerifyCase> verification_cases(const Plan& plan);

struct Verification {
  std::vector<VerifyCase> cases;        // every case (all run at once, on threads of their own)
  // The deciding case: the first that failed, else the one with the least storage-precision margin.
  std::map<std::string, int64_t> dims;
  tl::RunResult fp64, storage;
  bool passed() const;
  // One line: the sizes and their verdicts, e.g. "4 of 4 sizes (batch x heads_q/heads_kv x seqlen_q x
  // seqlen_k): 2x4/2x33x35 pass, 1x2/1x289x81 pass, 1x2/1x289x337 pass".
  std::string sizes() const;
};
Verification verify(const Plan& plan, support::DiagSink& diags);

}  // namespace qattn::plan
