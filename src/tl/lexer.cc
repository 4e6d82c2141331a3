// The TL lexer: one line in, tokens + comment out. See lexer.h for the contract and the codes.
#include "tl/lexer.h"

#include <charconv>
#include <cstdio>
#include <system_error>

namespace qattn::tl {
namespace {

bool is_ident_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string char_name(unsigned char c) {
  if (c >= 0x21 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
  return buf;
}

// Scans a number starting at line[i] (a digit). Sets `end` to one past it and `is_int`.
// Returns false if the text is not a well-formed number (then `end` is past the bad text).
bool scan_number(std::string_view line, size_t i, size_t& end, bool& is_int) {
  size_t j = i;
  is_int = true;
  while (j < line.size() && is_digit(line[j])) ++j;
  bool ok = true;
  if (j < line.size() && line[j] == '.') {
    is_int = false;
    ++j;
    size_t f = j;
    while (j < line.size() && is_digit(line[j])) ++j;
    if (j == f) ok = false;  // "1." needs digits after the point
  }
  if (j < line.size() && (line[j] == 'e' || line[j] == 'E')) {
    size_t k = j + 1;
    if (k < line.size() && (line[k] == '+' || line[k] == '-')) ++k;
    size_t f = k;
    while (k < line.size() && is_digit(line[k])) ++k;
    if (k == f) {
      ok = false;  // "1e" or "1e+": exponent digits missing
      j = k;
    } else {
      is_int = false;
      j = k;
    }
  }
  // A number glued to a name or another '.' ("12abc", "1.2.3") is malformed.
  if (j < line.size() && (is_ident_char(line[j]) || line[j] == '.')) {
    ok = false;
    while (j < line.size() && (is_ident_char(line[j]) || line[j] == '.')) ++j;
  }
  end = j;
  return ok;
}

}  // namespace

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string describe(const Token& t) {
  if (t.kind == Tok::End) return "end of line";
  std::string_view s = t.text;
  if (s.size() > 40) return "'" + std::string(s.substr(0, 40)) + "...'";
  return "'" + std::string(s) + "'";
}

LexedLine lex_line(std::string_view line, int line_no, support::DiagSink& diags, const std::string& file) {
  LexedLine out;
  size_t i = 0;
  size_t comment_pos = 0;
  auto loc_at = [&](size_t pos) {
    support::SrcLoc l;
    l.line = line_no;
    l.col = pos + 1 > 0x7fffffff ? 0x7fffffff : static_cast<int>(pos + 1);
    return l;
  };
  auto push = [&](Tok k, size_t start, size_t len) {
    Token t;
    t.kind = k;
    t.text = line.substr(start, len);
    t.loc = loc_at(start);
    out.toks.push_back(t);
  };
  while (i < line.size()) {
    char c = line[i];
    if (is_blank(c)) {
      ++i;
      continue;
    }
    if (c == '#') {
      out.has_comment = true;
      out.comment_loc = loc_at(i);
      comment_pos = i;
      std::string_view text = line.substr(i + 1);
      if (!text.empty() && text.front() == ' ') text.remove_prefix(1);
      while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
      out.comment = std::string(text);
      break;
    }
    if (is_ident_start(c)) {
      size_t j = i;
      while (j < line.size() && is_ident_char(line[j])) ++j;
      push(Tok::Name, i, j - i);
      i = j;
      continue;
    }
    if (is_digit(c)) {
      size_t end = i;
      bool is_int = true;
      bool ok = scan_number(line, i, end, is_int);
      std::string_view text = line.substr(i, end - i);
      double v = 0;
      if (ok) {
        auto r = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
        if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
          report(diags, file, "TL0102", loc_at(i), "number " + describe(Token{Tok::Real, text, 0, {}}) +
                 " is out of range", "numbers must fit a double (at most about 1.8e308, not below 2.2e-308)");
          out.ok = false;
          break;
        }
      } else {
        report(diags, file, "TL0102", loc_at(i), "malformed number " + describe(Token{Tok::Real, text, 0, {}}),
               "numbers look like 12, 0.125 or 1e-3; a name cannot start with a digit");
        out.ok = false;
        break;
      }
      push(is_int ? Tok::Int : Tok::Real, i, end - i);
      out.toks.back().value = v;
      i = end;
      continue;
    }
    if (c == '<' || c == '>' || (c == '=' && i + 1 < line.size() && line[i + 1] == '=') || c == '!') {
      const bool eq = i + 1 < line.size() && line[i + 1] == '=';
      if (c == '!' && !eq) {
        report(diags, file, "TL0101", loc_at(i), "expected '=' after '!'", "'not equal' is written !=, negation `not`");
        out.ok = false;
        break;
      }
      Tok ck = c == '<' ? (eq ? Tok::LessEq : Tok::Less) : c == '>' ? (eq ? Tok::GreaterEq : Tok::Greater)
             : c == '=' ? Tok::EqEq : Tok::NotEq;
      push(ck, i, eq ? 2 : 1);
      i += eq ? 2 : 1;
      continue;
    }
    Tok k = Tok::End;
    switch (c) {
      case ',': k = Tok::Comma; break;
      case '=': k = Tok::Assign; break;
      case ':': k = Tok::Colon; break;
      case '(': k = Tok::LParen; break;
      case ')': k = Tok::RParen; break;
      case '[': k = Tok::LBracket; break;
      case ']': k = Tok::RBracket; break;
      case '{': k = Tok::LBrace; break;
      case '}': k = Tok::RBrace; break;
      case '+': k = Tok::Plus; break;
      case '-': k = Tok::Minus; break;
      case '*': k = Tok::Star; break;
      case '/': k = Tok::Slash; break;
      case '%': k = Tok::Percent; break;
      case '^':
        if (i + 1 < line.size() && line[i + 1] == 'T' && !(i + 2 < line.size() && is_ident_char(line[i + 2]))) {
          push(Tok::TransposeT, i, 2);
          i += 2;
          continue;
        }
        report(diags, file, "TL0101", loc_at(i), "expected 'T' after '^'",
               "a transposed GEMM operand is written K^T");
        out.ok = false;
        break;
      default:
        report(diags, file, "TL0101", loc_at(i), "unexpected character " + char_name(static_cast<unsigned char>(c)),
               "TL uses names, numbers, , = : ( ) [ ] { } + - * / % ^T < <= > >= == != and # comments");
        out.ok = false;
        break;
    }
    if (!out.ok) break;
    push(k, i, 1);
    ++i;
  }
  Token end;
  end.kind = Tok::End;
  end.loc = loc_at(out.has_comment ? comment_pos : line.size());
  out.toks.push_back(end);
  return out;
}

void report(support::DiagSink& diags, const std::string& file, const char* code, support::SrcLoc loc,
            std::string msg, std::string hint) {
  support::Diagnostic d;
  d.code = code;
  d.file = file.empty() ? diags.file() : file;
  d.loc = loc;
  d.message = std::move(msg);
  d.hint = std::move(hint);
  diags.add(std::move(d));
}

}  // namespace qattn::tl
