// The resource model: shared memory, registers and alignment of one tile configuration on one
// target, with a human-readable reason for every rejection. Used to validate the rules table and
// to enumerate the feasible candidates (for autotuning).
//
// Model (documented in docs/planner.md):
//  - shared memory: sm75-89: Q tile + STAGES x (K tile + V tile); sm90: the same, with the O
//    staging tile of the epilogue sharing Q's buffer (Q is dead after the last QK^T GEMM).
//  - registers per consumer thread: O accumulator + S accumulator (+ P in registers and the next
//    S on sm90, which overlaps softmax with the next GEMM) + operand slices + bookkeeping.
//  - alignment: MMA tile multiples per architecture, head dims multiples of 16 (32 for fp8).
#pragma once
#include <string>
#include <vector>

#include "plan/problem.h"

namespace qattn::plan {

// "12 KB": a byte count in messages (rounded up).
inline std::string kb(int64_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KB"; }

Budget estimate(const Problem& p, const Target& t, const TileConfig& c);

// Register ceiling per consumer thread for a configuration (setmaxnreg split on sm90).
int register_cap(const Problem& p, const Target& t, const TileConfig& c);

// Every configuration of the candidate space that fits, best first (by the model's score).
struct Candidate {
  TileConfig tiles;
  Budget budget;
  double score = 0;  // larger is better: work per block and occupancy, see budget.cc
};
std::vector<Candidate> enumerate_candidates(const Problem& p, const Target& t);

// The smallest configuration of the candidate space (what "nothing fits" is explained with).
TileConfig smallest_candidate(const Problem& p, const Target& t);

}  // namespace qattn::plan
