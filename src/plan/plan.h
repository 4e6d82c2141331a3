// Stage 1 driver: AttentionSpec + GPU facts -> sketch (1a) and TL code (1b) on the built-in rules,
// with the tile decision, its resource budget and every feasible candidate. The TL code is parsed,
// checked (tl::check) and compared with the sketch (plan::refines) before it is returned; the
// interpreter check at small dimensions is plan::verify.
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
};

// GQA packing (TL `{pack: heads_q / heads_kv}`, sm90): on when the spec states a query length whose
// tiles one head alone fills poorly (decoding, chunked prefill). Sets `pack`; returns the reason
// (empty when the question does not arise: no GQA/MQA, not sm90, variants, no stated length).
std::string pack_gqa_decision(const Problem& p, const Target& t, const TileConfig& tiles, bool& pack);

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

// Interprets the plan's TL code at small dimensions (ragged sequence lengths, two or more K/V
// tiles, batch 2) in fp64 and storage precision against the reference. Returns the two results.
struct Verification {
  std::map<std::string, int64_t> dims;
  tl::RunResult fp64, storage;
  bool passed() const { return fp64.passed && storage.passed; }
};
Verification verify(const Plan& plan, support::DiagSink& diags);

}  // namespace qattn::plan
