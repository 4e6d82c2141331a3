// The TL parser: recursive descent over the lexer's tokens, one statement per line, following the
// EBNF in docs/tl.md. Input: program text (any bytes). Output: a Program (statements in source
// order, loop bodies nested) plus diagnostics. Never throws, never asserts.
//
// Recovery: a line with an error is reported once and left out of the AST; parsing continues on
// the next line, so one file reports several errors (at most 100, then TL0299). A malformed `for`
// line still opens a block so that its `end` matches; the body of such a block is kept at the
// enclosing level. A `for` without `end` is closed at the end of the file (reported at the `for`).
//
// Diagnostics (codes also listed in docs/tl.md):
//   TL0101 unexpected character          TL0102 malformed / out-of-range number
//   TL0103 the text is over kMaxSourceBytes (1 MiB): nothing is parsed
//   TL0104 more than kMaxStatements statements and comment lines: parsing stopped there
//   TL0201 expected token (generic)      TL0202 unknown statement
//   TL0203 `for` without matching `end`  TL0204 `end` without matching `for`
//   TL0205 extra tokens after a statement
//   TL0206 nesting too deep (expression depth > 64, loop depth > 32)
//   TL0207 unknown Compute op            TL0208 unknown dtype
//   TL0209 unknown memory space          TL0210 unknown mask
//   TL0211 Grid range not starting at 0  TL0212 misplaced schedule attributes
//   TL0299 too many errors, parsing stopped
//
// Canonicalisation done by the parser: keywords are case-insensitive; Compute op names take the
// spellings of ast.h; `-inf` is Unary(-, Name inf). Whole-line comments become CommentStmt and
// trailing ones Stmt::trailing_comment (text after '#', one leading space and trailing blanks
// removed); runs of blank lines become one BlankStmt. Omitted dtypes stay std::nullopt.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::tl {

inline constexpr size_t kMaxSourceBytes = size_t(1) << 20;  // support::kMaxTlBytes
// Statements and comment lines (blank lines are not counted): each is an AST node of a few
// kilobytes, so this bounds the parser's memory (~40 MB) whatever the text holds.
inline constexpr int kMaxStatements = 10000;

Program parse(std::string_view text, support::DiagSink& diags, std::string file = {});

// Parses one expression (the whole text; `expr` of the EBNF). For tools and tests.
std::optional<Expr> parse_expr(std::string_view text, support::DiagSink& diags);

// Parses the expression of a Score or Mask declaration (predicates, `T[i, j]` reads): for the
// planner, which writes declarations from a spec's score_mod / mask_mod strings.
std::optional<Expr> parse_variant_expr(std::string_view text, support::DiagSink& diags);

}  // namespace qattn::tl
