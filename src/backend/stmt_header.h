// What the statement-by-statement lowerings (src/backend/bwd, src/backend/combine) share: the header
// facts of a TL program read statement by statement, and the `// TL n:` comment that names the
// statement a block of generated code lowers.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/diag.h"
#include "tl/ast.h"
#include "tl/eval.h"

namespace qattn::backend {

struct HeaderFacts {
  const tl::Stmt* kernel = nullptr;
  const tl::Stmt* grid = nullptr;
  tl::Env& env;                                        // fixed Dims and Consts, as they are read
  std::vector<std::pair<std::string, int64_t>>& fixed;  // the same, in source order
  std::vector<std::string>& runtime;                    // Dims without a value (given at launch)
};

// Reads one top-level statement into h: the Kernel and Grid statements, fixed Dims and Consts (a value
// that is not a compile-time constant is XL0201, with `constant_hint`), run-time Dims; a Grid of more
// than 3 axes is XL0203. Other statements: nothing. False after a diagnostic.
bool read_header_stmt(const tl::Stmt& s, HeaderFacts& h, support::DiagSink& diags, const std::string& constant_hint);

// "// TL <line>: <the statement's first line>" (a loop: its `for` line).
std::string tl_ref(const tl::Stmt& s);

}  // namespace qattn::backend
