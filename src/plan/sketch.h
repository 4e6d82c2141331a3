// Stages 1a and 1b on the built-in rules.
//   sketch_text: spec -> TL sketch (statements only: no Allocate, tiles, coordinates, Reshape)
//   code_text:   sketch + target + tiles -> TL code (the parameterised program)
// Both come from one statement list (tl_text.cc), so the code refines the sketch by
// construction; plan::refines() checks that property for any pair (LLM output included).
#pragma once
#include <string>
#include <vector>

#include "plan/problem.h"
#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::plan {

std::string sketch_text(const Problem& p, const Target& t);
std::string code_text(const Problem& p, const Target& t, const TileConfig& tiles);

// The kernel name used in TL ("flash_fwd_llama3_8b").
std::string kernel_name(const Problem& p);
// The spec's Score / Mask declarations as TL lines, in application order (what both passes declare).
std::vector<std::string> variant_declarations(const Problem& p);
// The Mask whose `empty when` clause lets a loop skip whole tiles (`{skip: NAME}`), empty when none
// has one: document, else prefix_lm, else a mask_mod whose clauses the front end derives.
std::string skip_mask_name(const Problem& p);

// True when `code` keeps every statement of `sketch` in order (same statement kinds, ops, tensor
// names and operands), adding only parameters, Allocate, Reshape and header statements.
// Reports PLAN0201 at the first sketch statement the code drops or changes.
bool refines(const tl::Program& sketch, const tl::Program& code, support::DiagSink& diags);

// The rules engine's own check of what it wrote: sketch and code parse, the code passes tl::check
// and refines the sketch. The diagnostics go to `inner`; true when there are none.
bool check_written(const std::string& sketch, const std::string& code, support::DiagSink& inner);

}  // namespace qattn::plan
