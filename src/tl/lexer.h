// The TL lexer. TL is line-oriented, so the lexer works one line at a time.
// Input: the text of one line (without its '\n') and its 1-based line number.
// Output: the line's tokens (ending with Tok::End), and the text of a `#` comment if the line has
// one (everything after '#', one leading space and trailing whitespace removed).
// Diagnostics: TL0101 unexpected character (including non-ASCII bytes and a '^' not followed by
// 'T'), TL0102 malformed or out-of-range number. Lexing stops at the first error of a line
// (LexedLine::ok = false); the parser then drops that line. Never throws.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "support/diag.h"

namespace qattn::tl {

enum class Tok {
  Name,        // [A-Za-z_][A-Za-z0-9_]*  (keywords are names; the parser compares them)
  Int,         // 12
  Real,        // 0.125, 1e-3
  Comma,       // ,
  Assign,      // =
  Colon,       // :
  LParen,      // (
  RParen,      // )
  LBracket,    // [
  RBracket,    // ]
  LBrace,      // {
  RBrace,      // }
  Plus,        // +
  Minus,       // -
  Star,        // *
  Slash,       // /
  Percent,     // %
  TransposeT,  // ^T
  Less,        // <     (comparisons: Score/Mask declarations only)
  LessEq,      // <=
  Greater,     // >
  GreaterEq,   // >=
  EqEq,        // ==
  NotEq,       // !=
  End,         // end of the line (a comment, if any, is not a token)
};

struct Token {
  Tok kind = Tok::End;
  std::string_view text;  // points into the line passed to lex_line
  double value = 0;       // Int / Real
  support::SrcLoc loc;
};

struct LexedLine {
  std::vector<Token> toks;      // always ends with one Tok::End
  bool ok = true;               // false: a lexical error was reported for this line
  bool has_comment = false;
  std::string comment;          // text after '#': one leading space and trailing blanks stripped
  support::SrcLoc comment_loc;  // location of the '#'
};

// Lexes one line. `file` is recorded in diagnostics (empty: the sink's file).
// Reports an error diagnostic for `file` (the sink's file when empty); shared by lexer and parser.
void report(support::DiagSink& diags, const std::string& file, const char* code, support::SrcLoc loc,
            std::string msg, std::string hint);

LexedLine lex_line(std::string_view line, int line_no, support::DiagSink& diags, const std::string& file = {});

// A token as it should appear in a message: 'with', '(' or "end of line".
std::string describe(const Token& t);

// Lowercase ASCII copy (keywords are case-insensitive).
std::string lower(std::string_view s);

}  // namespace qattn::tl
