// The TL printer: the canonical text of a Program, statement or expression.
// Input: an AST (from the parser or built by a pass). Output: text that the parser reads back to
// the same AST, with print(parse(print(p))) == print(p) for every parsed p. No diagnostics.
//
// Canonical form: keywords in the spelling of docs/tl.md; loop bodies indented two spaces;
// binary operators spaced (`a + b`), minimal parentheses (left-associative, so a right operand of
// equal precedence keeps its parentheses); integers as integers, reals in the shortest form that
// round-trips (`0.125`, `1e-05`, `2.0`); `Kernel` always states its mask; a register Allocate
// without a dtype prints `fp32` (its default), other omitted dtypes stay omitted; a `Compute Mask`
// always prints `with M`; comments as `# text`, trailing ones after two spaces; blank lines
// collapse to one and are dropped at the start and end of the program and of loop bodies.
#pragma once
#include <string>

#include "tl/ast.h"

namespace qattn::tl {

// The whole program, one line per statement, each line ending in '\n' ("" for an empty program).
std::string print(const Program& p);

// One expression.
std::string print_expr(const Expr& e);

// One statement, indented by `indent` spaces, without a final '\n'. A For prints its header, its
// body (indented two more spaces) and its `end` on separate lines.
std::string print_stmt(const Stmt& s, int indent = 0);

}  // namespace qattn::tl
