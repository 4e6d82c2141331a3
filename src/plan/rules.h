// The tile rules: one readable table per architecture, a reason per row, in the spirit of
// FlashAttention-2's launch templates (sm75-sm89) and FlashAttention-3's tile_size.h (sm90).
// Every row is checked against the resource model by tests/unit/plan_test.cc.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plan/problem.h"

namespace qattn::plan {

struct RuleRow {
  int sm_lo, sm_hi;        // architectures the row applies to (inclusive)
  bool fp8;                // row for fp8 storage
  int d_max;               // applies when d_qk <= d_max (first matching row wins)
  int causal;              // -1 any, 0 non-causal only, 1 causal/sliding only
  TileConfig tiles;        // BM, BN, warps, stages and the reason
};

const std::vector<RuleRow>& rules_table();

// The first row that applies, or nullopt.
std::optional<TileConfig> rule_for(const Problem& p, const Target& t);

// The rules table as markdown, one table per architecture (docs/planner.md and `qattn plan --rules`).
std::string rules_markdown();

}  // namespace qattn::plan
