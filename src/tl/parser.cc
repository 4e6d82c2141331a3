// The TL parser (see parser.h for the contract, recovery and diagnostic codes).
// LineParser parses the tokens of one line; parse() strings lines together, tracks the `for`
// blocks on an explicit stack (no recursion over loop depth) and attaches comments and blanks.
#include "tl/parser.h"
#include "tl/variant.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "tl/lexer.h"

namespace qattn::tl {
namespace {

constexpr int kMaxExprDepth = 64;
constexpr int kMaxLoopDepth = 32;
constexpr int kMaxErrors = 100;

constexpr const char* kOps[] = {"GEMM", "Add",  "Subtract", "Multiply", "Divide",  "Max",
                                "Exp",  "Exp2", "Log",      "Log2",     "Convert", "RowMax",
                                "RowSum", "Rescale", "Normalize", "Mask", "Modify", "Derivative", "Gradient"};
constexpr const char* kOpsHint =
    "Compute ops are GEMM, Add, Subtract, Multiply, Divide, Max, Exp, Exp2, Log, Log2, Convert, "
    "RowMax, RowSum, Rescale, Normalize, Mask, Modify, Derivative, Gradient";
constexpr const char* kStmtHint =
    "a line starts with Kernel, Dim, Const, Grid, Let, Role, Phase, Merge, Allocate, Score, Mask, Copy, Compute, Reshape, for or end";
constexpr const char* kDTypeHint = "dtypes are fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 (and int32 for auxiliary global tensors)";
constexpr const char* kSpaceHint = "memory spaces are global, shared, register";
constexpr const char* kMaskHint = "masks are none, bounds, causal, causal_top_left, window(L, R)";
constexpr const char* kExprHint = "an expression is a number, a name, f(a, b), (e), -e, or e + e, e * e, ...";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Parses the tokens of one line. Every method returns false after the first error of the line
// (which is reported once); callers propagate the false.
class LineParser {
 public:
  LineParser(const std::vector<Token>& toks, support::DiagSink& diags, const std::string& file)
      : toks_(toks), diags_(diags), file_(file) {}

  const Token& peek(size_t k = 0) const {
    size_t i = pos_ + k;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  bool failed() const { return failed_; }

  bool fail(const char* code, support::SrcLoc loc, std::string msg, std::string hint) {
    if (!failed_) report(diags_, file_, code, loc, std::move(msg), std::move(hint));
    failed_ = true;
    return false;
  }
  bool expected(const std::string& what, const char* hint) {
    return fail("TL0201", peek().loc, "expected " + what + ", found " + describe(peek()), hint);
  }
  bool is_kw(const char* kw, size_t k = 0) const {
    return peek(k).kind == Tok::Name && iequals(peek(k).text, kw);
  }
  bool accept_kw(const char* kw) {
    if (!is_kw(kw)) return false;
    ++pos_;
    return true;
  }
  bool expect_kw(const char* kw, const std::string& context, const char* hint) {
    if (accept_kw(kw)) return true;
    return expected("'" + std::string(kw) + "' " + context, hint);
  }
  bool accept(Tok k) {
    if (peek().kind != k) return false;
    ++pos_;
    return true;
  }
  bool expect(Tok k, const char* spelled, const std::string& context, const char* hint) {
    if (accept(k)) return true;
    return expected("'" + std::string(spelled) + "' " + context, hint);
  }
  bool name(std::string& out, support::SrcLoc* loc, const std::string& what, const char* hint) {
    if (peek().kind != Tok::Name) return expected(what, hint);
    out = std::string(peek().text);
    if (loc) *loc = peek().loc;
    ++pos_;
    return true;
  }

  // ---- expressions ---------------------------------------------------------------------------
  // `depth` returns the height of the built tree; `level` counts the syntactic nesting.
  bool expr(Expr& out, int& depth, int level) {
    if (level > kMaxExprDepth)
      return fail("TL0206", peek().loc, "expression nested more than 64 levels deep",
                  "simplify the expression or name parts of it with Let");
    int d = 0;
    if (!term(out, d, level)) return false;
    while (peek().kind == Tok::Plus || peek().kind == Tok::Minus) {
      Token op = peek();
      ++pos_;
      Expr rhs;
      int rd = 0;
      if (!term(rhs, rd, level)) return false;
      d = std::max(d, rd) + 1;
      if (d > kMaxExprDepth)
        return fail("TL0206", op.loc, "expression more than 64 operators deep",
                    "simplify the expression or name parts of it with Let");
      out = Expr::binary(std::string(op.text), std::move(out), std::move(rhs), op.loc);
    }
    depth = d;
    return true;
  }
  bool term(Expr& out, int& depth, int level) {
    int d = 0;
    if (!unary(out, d, level)) return false;
    while (peek().kind == Tok::Star || peek().kind == Tok::Slash || peek().kind == Tok::Percent) {
      Token op = peek();
      ++pos_;
      Expr rhs;
      int rd = 0;
      if (!unary(rhs, rd, level)) return false;
      d = std::max(d, rd) + 1;
      if (d > kMaxExprDepth)
        return fail("TL0206", op.loc, "expression more than 64 operators deep",
                    "simplify the expression or name parts of it with Let");
      out = Expr::binary(std::string(op.text), std::move(out), std::move(rhs), op.loc);
    }
    depth = d;
    return true;
  }
  bool unary(Expr& out, int& depth, int level) {
    if (peek().kind != Tok::Minus) return primary(out, depth, level);
    support::SrcLoc loc = peek().loc;
    ++pos_;
    Expr arg;
    int d = 0;
    if (!primary(arg, d, level)) return false;
    out = Expr::unary("-", std::move(arg), loc);
    depth = d + 1;
    return true;
  }
  bool primary(Expr& out, int& depth, int level) {
    const Token& t = peek();
    depth = 1;
    if (t.kind == Tok::Int || t.kind == Tok::Real) {
      out = Expr::number(t.value, t.kind == Tok::Int, t.loc);
      ++pos_;
      return true;
    }
    if (t.kind == Tok::Name) {
      std::string n(t.text);
      support::SrcLoc loc = t.loc;
      ++pos_;
      if ((decl_ || index_ok_) && peek().kind == Tok::LBracket) {
        std::vector<Expr> args;
        int d = 0;
        if (!expr_list(Tok::LBracket, "[", Tok::RBracket, "]", args, d, level + 1, "to close the index of '" + n + "'"))
          return false;
        out = Expr::index(std::move(n), std::move(args), loc);
        depth = d + 1;
        return true;
      }
      if (peek().kind != Tok::LParen) {
        out = Expr::ident(std::move(n), loc);
        return true;
      }
      std::vector<Expr> args;
      int d = 0;
      if (!expr_list(Tok::LParen, "(", Tok::RParen, ")", args, d, level + 1, "to close the call of '" + n + "'"))
        return false;
      out = Expr::call(std::move(n), std::move(args), loc);
      depth = d + 1;
      return true;
    }
    if (t.kind == Tok::LParen) {
      ++pos_;
      if (decl_ ? !predicate(out, level + 1) : !expr(out, depth, level + 1)) return false;
      return expect(Tok::RParen, ")", "to close the parenthesis", kExprHint);
    }
    if (t.kind == Tok::Minus) return expected("an expression ('-' applies to a number, name or (...) only)", kExprHint);
    return expected("an expression", kExprHint);
  }
  // open expr { "," expr } close
  bool expr_list(Tok open, const char* open_s, Tok close, const char* close_s, std::vector<Expr>& out,
                 int& depth, int level, const std::string& context, const char* hint = kExprHint) {
    if (!expect(open, open_s, context, hint)) return false;
    depth = 0;
    do {
      Expr e;
      int d = 0;
      if (!expr(e, d, level)) return false;
      depth = std::max(depth, d);
      out.push_back(std::move(e));
    } while (accept(Tok::Comma));
    return expect(close, close_s, context, hint);
  }
  bool expression(Expr& out) {
    int d = 0;
    return expr(out, d, 1);
  }
  // Predicates of Score/Mask declarations: or_expr = and_expr {"or" and_expr};
  // and_expr = not_expr {"and" not_expr}; not_expr = "not" not_expr | cmp;
  // cmp = expr [("<" | "<=" | ">" | ">=" | "==" | "!=") expr]. Parentheses in `expr` may hold a
  // predicate again (`(a < b or c)`), so a whole predicate is also an `expr` here.
  bool predicate(Expr& out, int level) {
    if (level > kMaxExprDepth)
      return fail("TL0206", peek().loc, "predicate nested more than 64 levels deep", "simplify the predicate");
    if (!conjunction(out, level)) return false;
    while (peek().kind == Tok::Name && iequals(peek().text, "or")) {
      support::SrcLoc loc = peek().loc;
      ++pos_;
      Expr rhs;
      if (!conjunction(rhs, level + 1)) return false;
      out = Expr::binary("or", std::move(out), std::move(rhs), loc);
    }
    return true;
  }
  bool conjunction(Expr& out, int level) {
    if (!negation(out, level)) return false;
    while (peek().kind == Tok::Name && iequals(peek().text, "and")) {
      support::SrcLoc loc = peek().loc;
      ++pos_;
      Expr rhs;
      if (!negation(rhs, level + 1)) return false;
      out = Expr::binary("and", std::move(out), std::move(rhs), loc);
    }
    return true;
  }
  bool negation(Expr& out, int level) {
    if (peek().kind == Tok::Name && iequals(peek().text, "not")) {
      support::SrcLoc loc = peek().loc;
      ++pos_;
      Expr arg;
      if (level > kMaxExprDepth || !negation(arg, level + 1))
        return level > kMaxExprDepth ? fail("TL0206", loc, "predicate nested too deeply", "simplify the predicate") : false;
      out = Expr::unary("not", std::move(arg), loc);
      return true;
    }
    int d = 0;
    if (!expr(out, d, level)) return false;
    static const std::pair<Tok, const char*> kCmp[] = {{Tok::Less, "<"},      {Tok::LessEq, "<="}, {Tok::Greater, ">"},
                                                       {Tok::GreaterEq, ">="}, {Tok::EqEq, "=="},   {Tok::NotEq, "!="}};
    for (const auto& [tk, op] : kCmp) {
      if (peek().kind != tk) continue;
      support::SrcLoc loc = peek().loc;
      ++pos_;
      Expr rhs;
      if (!expr(rhs, d, level)) return false;
      out = Expr::binary(op, std::move(out), std::move(rhs), loc);
      break;
    }
    return true;
  }
  bool shape(std::vector<Expr>& out, const std::string& context, const char* hint) {
    if (peek().kind != Tok::LParen) return expected("a shape '(rows, cols)' " + context, hint);
    int d = 0;
    return expr_list(Tok::LParen, "(", Tok::RParen, ")", out, d, 1, "to close the shape", hint);
  }
  bool index(std::vector<Expr>& out, const std::string& context, const char* hint) {
    if (peek().kind != Tok::LBracket) return expected("an index '[r, c]' " + context, hint);
    int d = 0;
    return expr_list(Tok::LBracket, "[", Tok::RBracket, "]", out, d, 1, "to close the index", hint);
  }

  // ---- words ---------------------------------------------------------------------------------
  bool space(Space& out, const std::string& context) {
    if (peek().kind != Tok::Name) return expected("a memory space " + context, kSpaceHint);
    auto s = parse_space(lower(peek().text));
    if (!s) return fail("TL0209", peek().loc, "unknown memory space " + describe(peek()), kSpaceHint);
    out = *s;
    ++pos_;
    return true;
  }
  bool dtype(std::optional<DType>& out) {
    auto t = parse_dtype(lower(peek().text));
    if (peek().kind != Tok::Name || !t)
      return fail("TL0208", peek().loc, "unknown dtype " + describe(peek()), kDTypeHint);
    out = *t;
    ++pos_;
    return true;
  }
  bool mask(MaskSpec& m, bool allow_named = false) {
    const Token& t = peek();
    m.loc = t.loc;
    if (t.kind != Tok::Name) return expected("a mask", kMaskHint);
    std::string k = lower(t.text);
    if (k == "none") m.kind = MaskSpec::Kind::None;
    else if (k == "bounds") m.kind = MaskSpec::Kind::Bounds;
    else if (k == "causal") m.kind = MaskSpec::Kind::Causal;
    else if (k == "causal_top_left") m.kind = MaskSpec::Kind::CausalTopLeft;
    else if (k == "window") m.kind = MaskSpec::Kind::Window;
    else if (allow_named) m.kind = MaskSpec::Kind::Named, m.name = std::string(t.text);
    else return fail("TL0210", t.loc, "unknown mask " + describe(t), kMaskHint);
    ++pos_;
    if (m.kind != MaskSpec::Kind::Window) return true;
    const char* hint = "a sliding window is written window(L, R)";
    return expect(Tok::LParen, "(", "after 'window'", hint) && expression(m.left) &&
           expect(Tok::Comma, ",", "between the window's left and right extents", hint) &&
           expression(m.right) && expect(Tok::RParen, ")", "to close window(L, R)", hint);
  }
  bool attrs(std::vector<Attr>& out) {
    if (!accept(Tok::LBrace)) return true;
    const char* hint = "schedule attributes are written {key, key: value}";
    do {
      Attr a;
      if (!name(a.key, &a.loc, "an attribute name", hint)) return false;
      if (accept(Tok::Colon)) {
        Expr v;
        if (!expression(v)) return false;
        a.value = std::move(v);
      }
      out.push_back(std::move(a));
    } while (accept(Tok::Comma));
    return expect(Tok::RBrace, "}", "to close the attributes", hint);
  }
  bool finish() {
    if (peek().kind == Tok::End) return true;
    return fail("TL0205", peek().loc, "unexpected " + describe(peek()) + " after the end of the statement",
                "one statement per line; schedule attributes go last, in {...}");
  }

  // ---- statements ----------------------------------------------------------------------------
  bool kernel(KernelStmt& k) {
    const char* hint = "Kernel NAME [backward | combine] [with mask M]";
    if (!name(k.name, nullptr, "the kernel name after 'Kernel'", hint)) return false;
    k.backward = accept_kw("backward");
    k.combine = !k.backward && accept_kw("combine");
    if (!accept_kw("with")) return true;
    return expect_kw("mask", "after 'Kernel NAME with'", hint) && mask(k.mask);
  }
  bool dim(DimStmt& s) {
    const char* hint = "Dim NAME [= value], NAME [= value], ...";
    do {
      DimStmt::Item it;
      if (!name(it.name, &it.loc, "a dimension name", hint)) return false;
      if (accept(Tok::Assign)) {
        Expr v;
        if (!expression(v)) return false;
        it.value = std::move(v);
      }
      s.items.push_back(std::move(it));
    } while (accept(Tok::Comma));
    return true;
  }
  bool cnst(ConstStmt& s) {
    const char* hint = "Const NAME = value, NAME = value, ...";
    do {
      ConstStmt::Item it;
      if (!name(it.name, &it.loc, "a constant name", hint) ||
          !expect(Tok::Assign, "=", "after the constant name", hint) || !expression(it.value))
        return false;
      s.items.push_back(std::move(it));
    } while (accept(Tok::Comma));
    return true;
  }
  bool grid(GridStmt& s) {
    const char* hint = "Grid NAME = 0: EXTENT, NAME = 0: EXTENT, ...";
    do {
      GridStmt::Item it;
      if (!name(it.var, &it.loc, "a grid index name", hint) ||
          !expect(Tok::Assign, "=", "after the grid index name", hint))
        return false;
      if (peek().kind != Tok::Int || peek().value != 0)
        return fail("TL0211", peek().loc, "expected '0' (a grid range starts at 0), found " + describe(peek()), hint);
      ++pos_;
      if (!expect(Tok::Colon, ":", "after the grid range's start", hint) || !expression(it.extent)) return false;
      s.items.push_back(std::move(it));
    } while (accept(Tok::Comma));
    return true;
  }
  bool let(LetStmt& s) {
    const char* hint = "Let NAME = expression";
    if (!name(s.name, nullptr, "a name after 'Let'", hint) || !expect(Tok::Assign, "=", "after the name", hint)) return false;
    index_ok_ = true;
    const bool ok = expression(s.value);
    index_ok_ = false;
    return ok;
  }
  bool allocate(AllocateStmt& s) {
    const char* hint = "Allocate NAME in SPACE (shape) [DTYPE] [with offset [b, h]] [init VALUE]";
    if (!name(s.name, nullptr, "a tensor name after 'Allocate'", hint) ||
        !expect_kw("in", "after the tensor name", hint) || !space(s.space, "after 'in'") ||
        !shape(s.shape, "after the memory space", hint))
      return false;
    if (peek().kind == Tok::Name && !is_kw("with") && !is_kw("init") && !dtype(s.dtype)) return false;
    if (accept_kw("with")) {
      if (!expect_kw("offset", "after 'with'", hint) || !index(s.offset, "after 'with offset'", hint)) return false;
    }
    if (accept_kw("init")) {
      Expr v;
      if (!expression(v)) return false;
      s.init = std::move(v);
    }
    return true;
  }
  bool copy(CopyStmt& s) {
    const char* hint = "Copy NAME [(tile) in coordinate [r, c]] from SPACE to SPACE [and accumulate]";
    if (!name(s.name, nullptr, "a tensor name after 'Copy'", hint)) return false;
    if (peek().kind == Tok::LParen) {
      if (!shape(s.tile, "", hint) || !expect_kw("in", "after the tile shape", hint) ||
          !expect_kw("coordinate", "after 'in'", hint) || !index(s.coord, "after 'in coordinate'", hint))
        return false;
    }
    return expect_kw("from", s.tile.empty() ? "after the tensor name" : "after the tile coordinate", hint) &&
           space(s.from, "after 'from'") && expect_kw("to", "after the source space", hint) &&
           space(s.to, "after 'to'") &&
           (!accept_kw("and") || (expect_kw("accumulate", "after 'and' (a Copy to global may add: `and accumulate`)", hint) &&
                                  (s.accumulate = true)));
  }
  bool compute(ComputeStmt& s) {
    const char* hint = "Compute OP a, b [and get NAME [DTYPE] | and accumulate NAME] [at [r, c]] [with MASK]";
    if (peek().kind != Tok::Name) return expected("a Compute op", kOpsHint);
    for (const char* op : kOps)
      if (iequals(peek().text, op)) s.op = op;
    if (s.op.empty()) return fail("TL0207", peek().loc, "unknown Compute op " + describe(peek()), kOpsHint);
    ++pos_;
    do {
      Operand o;
      o.loc = peek().loc;
      if (!expression(o.expr)) return false;
      o.transposed = accept(Tok::TransposeT);
      s.operands.push_back(std::move(o));
    } while (accept(Tok::Comma));
    if (accept_kw("and")) {
      if (accept_kw("get")) {
        s.result = ComputeStmt::Result::Get;
        if (!name(s.target, &s.target_loc, "a result name after 'and get'", hint)) return false;
        if (peek().kind == Tok::Name && !is_kw("at") && !is_kw("with") && !dtype(s.target_dtype)) return false;
      } else if (accept_kw("accumulate")) {
        s.result = ComputeStmt::Result::Accumulate;
        if (!name(s.target, &s.target_loc, "an accumulator name after 'and accumulate'", hint)) return false;
      } else {
        return expected("'get' or 'accumulate' after 'and'", hint);
      }
    }
    if (accept_kw("at") && !index(s.at, "after 'at'", hint)) return false;
    if (accept_kw("with") && !mask(s.mask, true)) return false;
    return true;
  }
  // Role producer|consumer warpgroups EXPR registers EXPR [pingpong] [split columns]
  bool role(RoleStmt& s) {
    const char* hint =
        "Role producer warpgroups 1 registers 24  /  Role consumer warpgroups 2 registers 240 [pingpong | split columns]";
    if (accept_kw("producer")) s.producer = true;
    else if (accept_kw("consumer")) s.producer = false;
    else return expected("'producer' or 'consumer' after 'Role'", hint);
    if (!expect_kw("warpgroups", "after the role", hint) || !expression(s.warpgroups) ||
        !expect_kw("registers", "after the warpgroup count", hint) || !expression(s.registers))
      return false;
    // the modifiers in any order (the checker refuses the two together: TL0719)
    while (true) {
      if (accept_kw("pingpong")) {
        s.pingpong = true;
      } else if (accept_kw("split")) {
        if (!expect_kw("columns", "after 'split' (the consumer warpgroups share the rows: `split columns`)", hint)) return false;
        s.split_columns = true;
      } else {
        return true;
      }
    }
  }
  bool declaration_expr(Expr& out) {
    decl_ = true;
    bool ok = predicate(out, 1);
    decl_ = false;
    return ok;
  }
  bool variant(VariantStmt& s, bool is_mask) {
    const char* hint = is_mask ? "Mask NAME = predicate [empty when predicate] [full when predicate]"
                               : "Score NAME = expression (over score, q_idx, kv_idx, ...)";
    s.is_mask = is_mask;
    if (!name(s.name, nullptr, std::string("a name after '") + (is_mask ? "Mask" : "Score") + "'", hint) ||
        !expect(Tok::Assign, "=", "after the name", hint))
      return false;
    decl_ = true;
    bool ok = predicate(s.expr, 1);
    if (ok && is_mask && accept_kw("empty")) {
      Expr e;
      ok = expect_kw("when", "after 'empty'", hint) && predicate(e, 1);
      if (ok) s.empty_when = std::move(e);
    }
    if (ok && is_mask && accept_kw("full")) {
      Expr e;
      ok = expect_kw("when", "after 'full'", hint) && predicate(e, 1);
      if (ok) s.full_when = std::move(e);
    }
    decl_ = false;
    return ok;
  }
  bool layout(std::vector<std::string>& out, const char* context, const char* hint) {
    if (!expect(Tok::LParen, "(", context, hint)) return false;
    do {
      std::string n;
      if (!name(n, nullptr, "a layout name", hint)) return false;
      out.push_back(std::move(n));
    } while (accept(Tok::Comma));
    return expect(Tok::RParen, ")", "to close the layout", hint);
  }
  bool reshape(ReshapeStmt& s) {
    const char* hint = "Reshape NAME from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)";
    return name(s.name, nullptr, "a tensor name after 'Reshape'", hint) &&
           expect_kw("from", "after the tensor name", hint) && layout(s.from, "after 'from'", hint) &&
           expect_kw("to", "after the source layout", hint) && layout(s.to, "after 'to'", hint);
  }
  bool for_header(ForStmt& s) {
    const char* hint = "for NAME = LO: HI ... end";
    return name(s.var, nullptr, "a loop index name after 'for'", hint) &&
           expect(Tok::Assign, "=", "after the loop index", hint) && expression(s.lo) &&
           expect(Tok::Colon, ":", "between the loop bounds", hint) && expression(s.hi);
  }

  // Phase NAME (the block's statements follow, up to its `end`)
  bool phase_header(ForStmt& s) {
    return name(s.var, nullptr, "a phase name after 'Phase'", "Phase dot_do_o ... end");
  }
  // Merge AXIS (the merge's statements follow, up to its `end`)
  bool merge_header(ForStmt& s) {
    return name(s.var, nullptr, "the split Grid axis after 'Merge'", "Merge split ... end");
  }

  // One statement line (not `end`). True when the line holds a complete statement.
  bool statement(Stmt& s) {
    const Token& t = peek();
    s.loc = t.loc;
    if (t.kind == Tok::LBrace)
      return fail("TL0212", t.loc, "schedule attributes without a statement",
                  "write the attributes at the end of the statement they describe");
    if (t.kind != Tok::Name) return fail("TL0202", t.loc, "expected a statement, found " + describe(t), kStmtHint);
    std::string k = lower(t.text);
    ++pos_;
    bool ok = false;
    using K = Stmt::Kind;
    if (k == "kernel") s.kind = K::Kernel, ok = kernel(s.kernel);
    else if (k == "dim") s.kind = K::Dim, ok = dim(s.dim);
    else if (k == "const") s.kind = K::Const, ok = cnst(s.cnst);
    else if (k == "grid") s.kind = K::Grid, ok = grid(s.grid);
    else if (k == "let") s.kind = K::Let, ok = let(s.let);
    else if (k == "role") s.kind = K::Role, ok = role(s.role);
    else if (k == "allocate") s.kind = K::Allocate, ok = allocate(s.alloc);
    else if (k == "copy") s.kind = K::Copy, ok = copy(s.copy);
    else if (k == "compute") s.kind = K::Compute, ok = compute(s.compute);
    else if (k == "reshape") s.kind = K::Reshape, ok = reshape(s.reshape);
    else if (k == "for") s.kind = K::For, ok = for_header(s.loop);
    else if (k == "phase") s.kind = K::Phase, ok = phase_header(s.loop);
    else if (k == "merge") s.kind = K::Merge, ok = merge_header(s.loop);
    else if (k == "score") s.kind = K::Variant, ok = variant(s.variant, false);
    else if (k == "mask") s.kind = K::Variant, ok = variant(s.variant, true);
    else return fail("TL0202", t.loc, "unknown statement " + describe(t), kStmtHint);
    return ok && attrs(s.attrs) && finish();
  }

 private:
  const std::vector<Token>& toks_;
  support::DiagSink& diags_;
  const std::string& file_;
  size_t pos_ = 0;
  bool failed_ = false;
  bool decl_ = false;  // inside a Score/Mask declaration: T[i, j] reads and predicates allowed
  bool index_ok_ = false;  // a Let's value: T[i] reads allowed (the checker admits `Let seqlen_k = T[b]`)
};

struct Frame {
  Stmt stmt;               // kind For, Phase or Merge (meaningful unless poisoned)
  bool poisoned = false;   // the `for` line had an error: splice the body into the parent
  std::vector<Stmt> body;
};

void append(std::vector<Stmt>& body, Stmt s) {
  if (s.kind == Stmt::Kind::Blank && !body.empty() && body.back().kind == Stmt::Kind::Blank) return;
  body.push_back(std::move(s));
}

}  // namespace

Program parse(std::string_view text, support::DiagSink& diags, std::string file) {
  Program prog;
  prog.file = file;
  std::vector<Frame> stack;
  auto body = [&]() -> std::vector<Stmt>& { return stack.empty() ? prog.stmts : stack.back().body; };
  auto close = [&]() {
    Frame f = std::move(stack.back());
    stack.pop_back();
    if (f.poisoned) {
      for (auto& s : f.body) append(body(), std::move(s));
      return;
    }
    f.stmt.loop.body = std::move(f.body);
    append(body(), std::move(f.stmt));
  };
  const int errors_at_start = diags.error_count();
  if (text.size() > kMaxSourceBytes) {  // bounds the AST's memory (a few hundred bytes per input byte)
    report(diags, file, "TL0103", support::SrcLoc{1, 1},
           "the program is " + std::to_string(text.size()) + " bytes, over the limit of " +
               std::to_string(kMaxSourceBytes >> 20) + " MiB; nothing was parsed",
           "a TL program is a few kilobytes: check that this is the file you meant");
    return prog;
  }
  bool stopped = false;
  int statements = 0;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = text.substr(pos, end - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line_no == INT_MAX) break;
    ++line_no;
    if (diags.error_count() - errors_at_start >= kMaxErrors) {
      report(diags, file, "TL0299", support::SrcLoc{line_no, 1}, "too many errors; parsing stopped here",
             "fix the errors above and parse again");
      stopped = true;
      break;
    }
    LexedLine L = lex_line(line, line_no, diags, file);
    const Token& first = L.toks.front();
    if ((first.kind != Tok::End || L.has_comment) && ++statements > kMaxStatements) {
      report(diags, file, "TL0104", support::SrcLoc{line_no, 1},
             "more than " + std::to_string(kMaxStatements) + " statements and comment lines; parsing stopped here",
             "a TL program is a few hundred lines: check that this is the file you meant");
      stopped = true;
      break;
    }
    if (first.kind == Tok::End) {
      if (!L.ok) continue;
      Stmt s;
      if (L.has_comment) {
        s.kind = Stmt::Kind::Comment;
        s.loc = L.comment_loc;
        s.comment.text = L.comment;
      } else {
        s.kind = Stmt::Kind::Blank;
        s.loc = support::SrcLoc{line_no, 1};
      }
      append(body(), std::move(s));
      continue;
    }
    LineParser p(L.toks, diags, file);
    if (p.is_kw("end")) {
      if (stack.empty()) {
        report(diags, file, "TL0204", first.loc, "'end' without a matching 'for', 'Phase' or 'Merge'",
               "remove this 'end' or add the 'for' (or 'Phase', 'Merge') line it closes");
        continue;
      }
      if (L.ok && p.peek(1).kind == Tok::LBrace)
        report(diags, file, "TL0212", p.peek(1).loc, "schedule attributes are not allowed on 'end'",
               "put the attributes on the 'for' line");
      else if (L.ok && p.peek(1).kind != Tok::End)
        report(diags, file, "TL0205", p.peek(1).loc, "unexpected " + describe(p.peek(1)) + " after 'end'",
               "'end' stands alone on its line");
      stack.back().stmt.loop.end_loc = first.loc;
      if (L.has_comment) stack.back().stmt.loop.end_comment = L.comment;
      close();
      continue;
    }
    const bool is_for = p.is_kw("for") || p.is_kw("phase") || p.is_kw("merge");
    Stmt s;
    bool ok = L.ok && p.statement(s);
    if (is_for) {
      if (ok && static_cast<int>(stack.size()) >= kMaxLoopDepth) {
        report(diags, file, "TL0206", first.loc, "loops nested more than 32 deep",
               "TL kernels need a few loop levels at most");
        ok = false;
      }
      Frame f;
      f.poisoned = !ok;
      if (ok) {
        if (L.has_comment) s.trailing_comment = L.comment;
        f.stmt = std::move(s);
      }
      stack.push_back(std::move(f));
      continue;
    }
    if (!ok) continue;
    if (L.has_comment) s.trailing_comment = L.comment;
    append(body(), std::move(s));
  }
  // Close the blocks still open at the end of the file (reported at their `for`, outermost first).
  if (!stopped)
    for (const auto& f : stack)
      if (!f.poisoned)
        report(diags, file, "TL0203", f.stmt.loc,
               std::string(f.stmt.kind == Stmt::Kind::Phase ? "'Phase'" : f.stmt.kind == Stmt::Kind::Merge ? "'Merge'" : "'for'") +
                   " without a matching 'end'",
               std::string("close the ") +
                   (f.stmt.kind == Stmt::Kind::Phase ? "phase" : f.stmt.kind == Stmt::Kind::Merge ? "merge" : "loop body") +
                   " with a line holding 'end'");
  while (!stack.empty()) close();
  complete_clauses(prog);
  return prog;
}

std::optional<Expr> parse_expr(std::string_view text, support::DiagSink& diags) {
  LexedLine L = lex_line(text, 1, diags);
  if (!L.ok) return std::nullopt;
  const std::string file;  // outlives the parser, which keeps a reference
  LineParser p(L.toks, diags, file);
  Expr e;
  if (!p.expression(e) || !p.finish()) return std::nullopt;
  return e;
}

std::optional<Expr> parse_variant_expr(std::string_view text, support::DiagSink& diags) {
  LexedLine L = lex_line(text, 1, diags);
  if (!L.ok) return std::nullopt;
  const std::string file;
  LineParser p(L.toks, diags, file);
  Expr e;
  if (!p.declaration_expr(e) || !p.finish()) return std::nullopt;
  return e;
}

}  // namespace qattn::tl
