// Parser tests: every statement form and its AST fields, expressions (precedence, locations),
// comments/blanks/attributes, each syntax diagnostic with its location, recovery (several errors
// per file), and robustness on hostile input (deep nesting, NUL bytes, random mutations).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "tl/parser.h"
#include "tl/printer.h"

namespace qattn::tl {
namespace {

Program ok(const std::string& text) {
  support::DiagSink d;
  Program p = parse(text, d, "t.tl");
  EXPECT_FALSE(d.has_errors()) << text << "\n" << d.render();
  return p;
}

// Parses text that must fail; returns the diagnostics.
std::vector<support::Diagnostic> errs(const std::string& text) {
  support::DiagSink d;
  parse(text, d, "t.tl");
  EXPECT_TRUE(d.has_errors()) << text;
  return d.all();
}

// The single error of `text`: its code, line and column.
void expect_error(const std::string& text, const std::string& code, int line, int col = 0) {
  auto ds = errs(text);
  ASSERT_EQ(ds.size(), 1u) << text;
  EXPECT_EQ(ds[0].code, code) << text << "\n" << render(ds[0]);
  EXPECT_EQ(ds[0].loc.line, line) << text;
  if (col) {
    EXPECT_EQ(ds[0].loc.col, col) << text << "\n" << render(ds[0]);
  }
  EXPECT_FALSE(ds[0].message.empty());
  EXPECT_FALSE(ds[0].hint.empty());
  EXPECT_EQ(ds[0].file, "t.tl");
}

const Stmt& only(const Program& p) {
  static const Stmt kNone;
  EXPECT_EQ(p.stmts.size(), 1u);
  return p.stmts.empty() ? kNone : p.stmts[0];
}

TEST(parser, Kernel) {
  auto s = only(ok("Kernel flash_fwd"));
  EXPECT_EQ(s.kind, Stmt::Kind::Kernel);
  EXPECT_EQ(s.kernel.name, "flash_fwd");
  EXPECT_EQ(s.kernel.mask.kind, MaskSpec::Kind::None);
  s = only(ok("kernel k WITH MASK Causal_Top_Left"));
  EXPECT_EQ(s.kernel.mask.kind, MaskSpec::Kind::CausalTopLeft);
  s = only(ok("Kernel k with mask window(128, 0)"));
  EXPECT_EQ(s.kernel.mask.kind, MaskSpec::Kind::Window);
  EXPECT_EQ(s.kernel.mask.left, Expr::number(128, true));
  EXPECT_EQ(s.kernel.mask.right, Expr::number(0, true));
  EXPECT_EQ(s.kernel.mask.loc.col, 20);
}

TEST(parser, DimConstGridLet) {
  auto p = ok("Dim batch, d = 128\nConst BM = 64, BN = 2 * 32\nGrid m = 0: cdiv(seqlen_q, BM), b = 0: batch\n"
              "Let kv_head = head / (heads_q / heads_kv)");
  ASSERT_EQ(p.stmts.size(), 4u);
  const auto& dim = p.stmts[0].dim;
  ASSERT_EQ(dim.items.size(), 2u);
  EXPECT_EQ(dim.items[0].name, "batch");
  EXPECT_FALSE(dim.items[0].value);
  EXPECT_EQ(dim.items[1].name, "d");
  EXPECT_EQ(*dim.items[1].value, Expr::number(128, true));
  EXPECT_EQ(dim.items[1].loc.col, 12);
  const auto& c = p.stmts[1].cnst;
  ASSERT_EQ(c.items.size(), 2u);
  EXPECT_EQ(c.items[1].name, "BN");
  EXPECT_EQ(c.items[1].value, Expr::binary("*", Expr::number(2, true), Expr::number(32, true)));
  const auto& g = p.stmts[2].grid;
  ASSERT_EQ(g.items.size(), 2u);
  EXPECT_EQ(g.items[0].var, "m");
  EXPECT_EQ(g.items[0].extent, Expr::call("cdiv", {Expr::ident("seqlen_q"), Expr::ident("BM")}));
  EXPECT_EQ(g.items[1].extent, Expr::ident("batch"));
  EXPECT_EQ(p.stmts[3].kind, Stmt::Kind::Let);
  EXPECT_EQ(p.stmts[3].let.name, "kv_head");
  EXPECT_EQ(p.stmts[3].let.value,
            Expr::binary("/", Expr::ident("head"), Expr::binary("/", Expr::ident("heads_q"), Expr::ident("heads_kv"))));
  EXPECT_EQ(p.stmts[3].loc.line, 4);
}

TEST(parser, Allocate) {
  auto s = only(ok("Allocate Q in global (seqlen_q, d) fp16 with offset [b, head]"));
  EXPECT_EQ(s.kind, Stmt::Kind::Allocate);
  EXPECT_EQ(s.alloc.name, "Q");
  EXPECT_EQ(s.alloc.space, Space::Global);
  ASSERT_EQ(s.alloc.shape.size(), 2u);
  EXPECT_EQ(s.alloc.shape[1], Expr::ident("d"));
  EXPECT_EQ(s.alloc.dtype, DType::F16);
  ASSERT_EQ(s.alloc.offset.size(), 2u);
  EXPECT_EQ(s.alloc.offset[1], Expr::ident("head"));
  EXPECT_FALSE(s.alloc.init);
  s = only(ok("allocate m IN Register (BM) init -inf"));
  EXPECT_EQ(s.alloc.space, Space::Register);
  EXPECT_FALSE(s.alloc.dtype);
  ASSERT_TRUE(s.alloc.init);
  EXPECT_EQ(*s.alloc.init, Expr::unary("-", Expr::ident("inf")));
  s = only(ok("Allocate P in shared (BM, BN) FP8_E4M3"));
  EXPECT_EQ(s.alloc.space, Space::Shared);
  EXPECT_EQ(s.alloc.dtype, DType::F8E4M3);
  s = only(ok("Allocate O in register (BM, d) bf16 init 0"));
  EXPECT_EQ(s.alloc.dtype, DType::BF16);
  EXPECT_EQ(*s.alloc.init, Expr::number(0, true));
}

TEST(parser, Copy) {
  auto s = only(ok("Copy Q (BM, d) in coordinate [m_block, 0] from global to shared"));
  EXPECT_EQ(s.kind, Stmt::Kind::Copy);
  EXPECT_EQ(s.copy.name, "Q");
  ASSERT_EQ(s.copy.tile.size(), 2u);
  ASSERT_EQ(s.copy.coord.size(), 2u);
  EXPECT_EQ(s.copy.coord[0], Expr::ident("m_block"));
  EXPECT_EQ(s.copy.from, Space::Global);
  EXPECT_EQ(s.copy.to, Space::Shared);
  s = only(ok("COPY K FROM shared TO register"));
  EXPECT_TRUE(s.copy.tile.empty());
  EXPECT_TRUE(s.copy.coord.empty());
  EXPECT_EQ(s.copy.from, Space::Shared);
  EXPECT_EQ(s.copy.to, Space::Register);
}

TEST(parser, Compute) {
  auto s = only(ok("Compute GEMM Q, K^T and get S"));
  EXPECT_EQ(s.kind, Stmt::Kind::Compute);
  EXPECT_EQ(s.compute.op, "GEMM");
  ASSERT_EQ(s.compute.operands.size(), 2u);
  EXPECT_FALSE(s.compute.operands[0].transposed);
  EXPECT_TRUE(s.compute.operands[1].transposed);
  EXPECT_EQ(s.compute.operands[1].expr, Expr::ident("K"));
  EXPECT_EQ(s.compute.operands[1].loc.col, 17);
  EXPECT_EQ(s.compute.result, ComputeStmt::Result::Get);
  EXPECT_EQ(s.compute.target, "S");
  EXPECT_EQ(s.compute.target_loc.col, 29);
  EXPECT_FALSE(s.compute.target_dtype);
  s = only(ok("compute convert P and get P16 fp16"));
  EXPECT_EQ(s.compute.op, "Convert");
  EXPECT_EQ(s.compute.target_dtype, DType::F16);
  s = only(ok("Compute gemm P16, V and accumulate O"));
  EXPECT_EQ(s.compute.result, ComputeStmt::Result::Accumulate);
  EXPECT_EQ(s.compute.target, "O");
  s = only(ok("Compute Multiply S, softmax_scale * log2e"));
  EXPECT_EQ(s.compute.op, "Multiply");
  EXPECT_EQ(s.compute.result, ComputeStmt::Result::InPlace);
  EXPECT_EQ(s.compute.operands[1].expr, Expr::binary("*", Expr::ident("softmax_scale"), Expr::ident("log2e")));
  s = only(ok("Compute Mask S at [m_block, j] with window(64, 0)"));
  EXPECT_EQ(s.compute.op, "Mask");
  ASSERT_EQ(s.compute.at.size(), 2u);
  EXPECT_EQ(s.compute.at[1], Expr::ident("j"));
  EXPECT_EQ(s.compute.mask.kind, MaskSpec::Kind::Window);
  const char* ops[] = {"GEMM", "Add", "Subtract", "Multiply", "Divide", "Max", "Exp", "Exp2", "Log", "Log2",
                       "Convert", "RowMax", "RowSum", "Rescale", "Normalize", "Mask"};
  for (const char* op : ops) {
    std::string lowered = op;
    for (auto& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(only(ok("Compute " + lowered + " X")).compute.op, op);
  }
  s = only(ok("Compute Max m, -inf"));
  EXPECT_EQ(s.compute.operands[1].expr, Expr::unary("-", Expr::ident("inf")));
}

TEST(parser, Reshape) {
  auto s = only(ok("Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)"));
  EXPECT_EQ(s.kind, Stmt::Kind::Reshape);
  EXPECT_EQ(s.reshape.name, "P16");
  EXPECT_EQ(s.reshape.from, (std::vector<std::string>{"MMA_C", "MMA_M", "MMA_N"}));
  EXPECT_EQ(s.reshape.to, (std::vector<std::string>{"MMA_A", "MMA_M", "MMA_K"}));
}

TEST(parser, ForLoops) {
  auto p = ok("for j = 0: cdiv(seqlen_k, BN)  # kv loop\n  Compute Exp P\n  FOR i = 1: 2\n    Compute Exp Q\n"
              "  End  # inner\n  Compute Exp R\nend\nCompute Exp T");
  ASSERT_EQ(p.stmts.size(), 2u);
  const auto& f = p.stmts[0];
  EXPECT_EQ(f.kind, Stmt::Kind::For);
  EXPECT_EQ(f.loop.var, "j");
  EXPECT_EQ(f.loop.lo, Expr::number(0, true));
  EXPECT_EQ(f.trailing_comment, "kv loop");
  EXPECT_EQ(f.loop.end_loc.line, 7);
  ASSERT_EQ(f.loop.body.size(), 3u);
  const auto& inner = f.loop.body[1];
  EXPECT_EQ(inner.kind, Stmt::Kind::For);
  EXPECT_EQ(inner.loop.lo, Expr::number(1, true));
  EXPECT_EQ(inner.loop.end_loc.line, 5);
  EXPECT_EQ(inner.loop.end_loc.col, 3);
  EXPECT_EQ(inner.loop.end_comment, "inner");
  ASSERT_EQ(inner.loop.body.size(), 1u);
  EXPECT_EQ(inner.loop.body[0].compute.operands[0].expr, Expr::ident("Q"));
  EXPECT_EQ(p.stmts[1].loc.line, 8);
}

TEST(parser, CommentsBlanksAttrs) {
  auto p = ok("# header\n#no space\n\n\n   \nCopy K from shared to register {async, stages: 2}  # tail   \n"
              "for j = 0: 4 {role: 1}\nend\n");
  ASSERT_EQ(p.stmts.size(), 5u);
  EXPECT_EQ(p.stmts[0].kind, Stmt::Kind::Comment);
  EXPECT_EQ(p.stmts[0].comment.text, "header");
  EXPECT_EQ(p.stmts[1].comment.text, "no space");
  EXPECT_EQ(p.stmts[2].kind, Stmt::Kind::Blank);
  const auto& c = p.stmts[3];
  EXPECT_EQ(c.kind, Stmt::Kind::Copy);
  ASSERT_EQ(c.attrs.size(), 2u);
  EXPECT_EQ(c.attrs[0].key, "async");
  EXPECT_FALSE(c.attrs[0].value);
  EXPECT_EQ(c.attrs[1].key, "stages");
  EXPECT_EQ(*c.attrs[1].value, Expr::number(2, true));
  EXPECT_EQ(c.attrs[1].loc.col, 40);
  EXPECT_EQ(c.trailing_comment, "tail");
  ASSERT_EQ(p.stmts[4].attrs.size(), 1u);
  EXPECT_EQ(p.stmts[4].attrs[0].key, "role");
}

TEST(parser, Role) {
  auto s = only(ok("Role producer warpgroups 1 registers 24"));
  EXPECT_EQ(s.kind, Stmt::Kind::Role);
  EXPECT_TRUE(s.role.producer);
  EXPECT_EQ(s.role.warpgroups, Expr::number(1, true));
  EXPECT_EQ(s.role.registers, Expr::number(24, true));
  EXPECT_FALSE(s.role.pingpong);
  EXPECT_EQ(s.role.warpgroups.loc.col, 26);
  EXPECT_EQ(s.role.registers.loc.col, 38);
  s = only(ok("role CONSUMER Warpgroups NC registers 2 * 120 PingPong {x: 1}  # two consumers"));
  EXPECT_EQ(s.kind, Stmt::Kind::Role);
  EXPECT_FALSE(s.role.producer);
  EXPECT_EQ(s.role.warpgroups, Expr::ident("NC"));
  EXPECT_EQ(s.role.registers, Expr::binary("*", Expr::number(2, true), Expr::number(120, true)));
  EXPECT_TRUE(s.role.pingpong);
  ASSERT_EQ(s.attrs.size(), 1u);
  EXPECT_EQ(s.trailing_comment, "two consumers");
  // The schedule attributes: repeated keys kept in order.
  auto g = only(ok("Compute GEMM Q, K^T and get S {wait: Q, wait: K, release: K}"));
  ASSERT_EQ(g.attrs.size(), 3u);
  EXPECT_EQ(g.attrs[0].key, "wait");
  EXPECT_EQ(*g.attrs[0].value, Expr::ident("Q"));
  EXPECT_EQ(g.attrs[1].key, "wait");
  EXPECT_EQ(*g.attrs[1].value, Expr::ident("K"));
  EXPECT_EQ(g.attrs[2].key, "release");
  auto a = only(ok("Allocate K in shared (BN, d) bf16 {stages: STAGES}"));
  EXPECT_EQ(a.alloc.dtype, DType::BF16);
  ASSERT_EQ(a.attrs.size(), 1u);
  EXPECT_EQ(*a.attrs[0].value, Expr::ident("STAGES"));
}

// `split columns` (the consumer warpgroups share the rows) and a shared view `{view: K}`.
TEST(parser, SplitColumnsAndView) {
  auto s = only(ok("Role consumer warpgroups 2 registers 232 split columns"));
  EXPECT_FALSE(s.role.producer);
  EXPECT_TRUE(s.role.split_columns);
  EXPECT_FALSE(s.role.pingpong);
  EXPECT_EQ(s.role.registers, Expr::number(232, true));
  s = only(ok("Role consumer warpgroups NC registers 232 SPLIT Columns pingpong  # both: the checker refuses"));
  EXPECT_TRUE(s.role.split_columns);
  EXPECT_TRUE(s.role.pingpong);
  EXPECT_FALSE(only(ok("Role consumer warpgroups 2 registers 240 pingpong")).role.split_columns);
  auto v = only(ok("Allocate V in shared (BN, dv) bf16 {view: K}"));
  EXPECT_EQ(v.kind, Stmt::Kind::Allocate);
  EXPECT_EQ(v.alloc.space, Space::Shared);
  ASSERT_EQ(v.alloc.shape.size(), 2u);
  EXPECT_EQ(v.alloc.shape[1], Expr::ident("dv"));
  ASSERT_EQ(v.attrs.size(), 1u);
  EXPECT_EQ(v.attrs[0].key, "view");
  ASSERT_TRUE(v.attrs[0].value);
  EXPECT_EQ(*v.attrs[0].value, Expr::ident("K"));
  EXPECT_EQ(v.attrs[0].loc.col, 37);
  expect_error("Role consumer warpgroups 2 registers 232 split", "TL0201", 1, 47);
  expect_error("Role consumer warpgroups 2 registers 232 split rows", "TL0201", 1, 48);
  expect_error("Role consumer warpgroups 2 registers 232 split columns twice", "TL0205", 1, 56);
}

TEST(parser, Expressions) {
  support::DiagSink d;
  auto e = parse_expr("a - b - c", d);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, Expr::binary("-", Expr::binary("-", Expr::ident("a"), Expr::ident("b")), Expr::ident("c")));
  e = parse_expr("a + b * c % 3", d);
  EXPECT_EQ(*e, Expr::binary("+", Expr::ident("a"),
                             Expr::binary("%", Expr::binary("*", Expr::ident("b"), Expr::ident("c")),
                                          Expr::number(3, true))));
  e = parse_expr("-x * y", d);
  EXPECT_EQ(*e, Expr::binary("*", Expr::unary("-", Expr::ident("x")), Expr::ident("y")));
  e = parse_expr("max(1, min(a, 2), 3)", d);
  EXPECT_EQ(e->kind, Expr::Kind::Call);
  EXPECT_EQ(e->args.size(), 3u);
  e = parse_expr("0.125 + 1e-3 + 12 + 2E+2", d);
  EXPECT_EQ(*e, Expr::binary("+", Expr::binary("+", Expr::binary("+", Expr::number(0.125, false),
                                                                  Expr::number(1e-3, false)),
                                               Expr::number(12, true)),
                             Expr::number(200, false)));
  e = parse_expr("(a + b) * c", d);
  EXPECT_EQ(e->loc.col, 9);  // a binary expression is located at its operator
  EXPECT_EQ(e->args[0].loc.col, 4);
  EXPECT_EQ(e->args[0].args[0].loc.col, 2);
  EXPECT_FALSE(d.has_errors()) << d.render();
  EXPECT_FALSE(parse_expr("--x", d));
  EXPECT_FALSE(parse_expr("a +", d));
  EXPECT_FALSE(parse_expr("f()", d));
  EXPECT_TRUE(d.has_errors());
}

TEST(parser, NamesAreCaseSensitive) {
  auto s = only(ok("LET Abc = aBC"));
  EXPECT_EQ(s.let.name, "Abc");
  EXPECT_EQ(s.let.value, Expr::ident("aBC"));
}

TEST(parser, EachSyntaxError) {
  expect_error("Kernel k\nAllocat Q in global (a, b)\n", "TL0202", 2, 1);
  expect_error("(a)", "TL0202", 1, 1);
  expect_error("Let x = 1\nfor j = 0: 4\n  Let y = 2\n", "TL0203", 2, 1);
  expect_error("Let x = 1\n  end\n", "TL0204", 2, 3);
  expect_error("Let x = a @ b", "TL0101", 1, 11);
  expect_error("Let x = a \xC3\xA9", "TL0101", 1, 11);
  expect_error("Let x = a ^ b", "TL0101", 1, 11);
  expect_error(std::string("Let x = a\0", 10), "TL0101", 1, 10);
  expect_error("Let x = 12abc", "TL0102", 1, 9);
  expect_error("Let x = 1.", "TL0102", 1, 9);
  expect_error("Let x = 1e", "TL0102", 1, 9);
  expect_error("Let x = 1e999", "TL0102", 1, 9);
  expect_error("Allocate Q in global (a, b fp16", "TL0201", 1, 28);
  expect_error("Copy K (BN, d) in coordinate [j, 0] global to shared", "TL0201", 1, 37);
  expect_error("Copy K from shared register", "TL0201", 1, 20);
  expect_error("Allocate Q in shared (a, b) fp64", "TL0208", 1, 29);
  expect_error("Compute Convert P and get P16 half", "TL0208", 1, 31);
  expect_error("Allocate Q in local (a, b)", "TL0209", 1, 15);
  expect_error("Kernel k with mask sliding", "TL0210", 1, 20);
  expect_error("Compute Softmax S", "TL0207", 1, 9);
  expect_error("Grid m = 1: 4", "TL0211", 1, 10);
  expect_error("Let x = 1 2", "TL0205", 1, 11);
  expect_error("{async}", "TL0212", 1, 1);
  expect_error("for j = 0: 2\nend {async}", "TL0212", 2, 5);
  expect_error("for j = 0: 2\nend j", "TL0205", 2, 5);
  expect_error("Compute GEMM A, B and put C", "TL0201", 1, 23);
  expect_error("Role worker warpgroups 1 registers 24", "TL0201", 1, 6);
  expect_error("Role producer warpgroups 1", "TL0201", 1, 27);
  expect_error("Role producer registers 24", "TL0201", 1, 15);
  expect_error("Role consumer warpgroups 2 registers 240 pingpong twice", "TL0205", 1, 51);
  expect_error("Let x = " + std::string(100, '(') + "1" + std::string(100, ')'), "TL0206", 1);
}

TEST(parser, Recovery) {
  auto ds = errs("Kernel k\nBogus line\nLet x = (1\nLet y = 2\nend\nCopy Q from global to nowhere\nLet z = 3\n");
  ASSERT_EQ(ds.size(), 4u);
  EXPECT_EQ(ds[0].code, "TL0202");
  EXPECT_EQ(ds[0].loc.line, 2);
  EXPECT_EQ(ds[1].code, "TL0201");
  EXPECT_EQ(ds[1].loc.line, 3);
  EXPECT_EQ(ds[2].code, "TL0204");
  EXPECT_EQ(ds[2].loc.line, 5);
  EXPECT_EQ(ds[3].code, "TL0209");
  EXPECT_EQ(ds[3].loc.line, 6);
  support::DiagSink d;
  auto p = parse("Kernel k\nBogus line\nLet y = 2\nLet z = 3\n", d);
  ASSERT_EQ(p.stmts.size(), 3u);  // the bad line is left out, the rest kept
  EXPECT_EQ(p.stmts[2].let.name, "z");
}

TEST(parser, MalformedForStillMatchesItsEnd) {
  support::DiagSink d;
  auto p = parse("for j = 0 4\n  Let x = 1\nend\nLet y = 2\n", d);
  ASSERT_EQ(d.all().size(), 1u) << d.render();
  EXPECT_EQ(d.all()[0].code, "TL0201");
  ASSERT_EQ(p.stmts.size(), 2u);  // the body is kept at the outer level
  EXPECT_EQ(p.stmts[0].let.name, "x");
}

TEST(parser, MissingEndsReportedAtTheirFor) {
  support::DiagSink d;
  auto p = parse("for i = 0: 2\n  for j = 0: 2\n    Let x = 1\n", d);
  ASSERT_EQ(d.all().size(), 2u);
  EXPECT_EQ(d.all()[0].loc.line, 1);
  EXPECT_EQ(d.all()[1].loc.line, 2);
  ASSERT_EQ(p.stmts.size(), 1u);  // closed at the end of the file
  EXPECT_EQ(p.stmts[0].loop.body.size(), 1u);
}

TEST(parser, TooManyErrors) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "end\n";
  support::DiagSink d;
  parse(text, d);
  ASSERT_EQ(d.all().size(), 101u);
  EXPECT_EQ(d.all().back().code, "TL0299");
}

TEST(parser, HostileInputs) {
  struct Case { std::string text; const char* code; };
  std::vector<Case> cases = {
      {"Compute Exp " + std::string(100000, '('), "TL0206"},
      {"Let x = " + std::string(100000, '('), "TL0206"},
      {"Let x = 1" + [] { std::string s; for (int i = 0; i < 50000; ++i) s += " + 1"; return s; }(), "TL0206"},
      {"Let x = -" + std::string(100000, '-'), "TL0201"},
      {std::string(100000, '\0'), "TL0101"},
      {std::string(1 << 20, 'a'), "TL0202"},
      {"\xff\xfe\x80", "TL0101"},
  };
  std::string fors;
  for (int i = 0; i < 80000; ++i) fors += "for i = 0: 1\n";  // 1,040,000 bytes: under the 1 MiB cap
  cases.push_back({fors, "TL0206"});
  cases.push_back({fors + std::string(10000, '\n'), "TL0103"});  // over it: nothing parsed
  for (const auto& c : cases) {
    support::DiagSink d;
    Program p = parse(c.text, d);
    ASSERT_TRUE(d.has_errors());
    EXPECT_EQ(d.all()[0].code, c.code) << d.all()[0].message;
    (void)print(p);
  }
}

TEST(parser, DeepButLegalNesting) {
  std::string e = std::string(60, '(') + "x" + std::string(60, ')');
  EXPECT_EQ(only(ok("Let y = " + e)).let.value, Expr::ident("x"));
  std::string text;
  for (int i = 0; i < 32; ++i) text += "for i" + std::to_string(i) + " = 0: 1\n";
  for (int i = 0; i < 32; ++i) text += "end\n";
  ok(text);
}

// Random byte flips, deletions and insertions of a valid program: parse and print never crash,
// and the printed text (of a clean parse, or of what recovery kept) is a fixed point.
TEST(parser, RandomMutations) {
  const std::string base =
      "Kernel k with mask causal\nDim batch, heads_q, seqlen_q, seqlen_k, d = 64\nConst BM = 64, BN = 32\n"
      "Grid m = 0: cdiv(seqlen_q, BM), h = 0: heads_q, b = 0: batch\nLet kv = h / 2\n"
      "Allocate Q in global (seqlen_q, d) fp16 with offset [b, h]\nAllocate m in register (BM) init -inf\n"
      "# comment\nCopy Q (BM, d) in coordinate [m, 0] from global to shared {async}\n"
      "for j = 0: min(cdiv(seqlen_k, BN), 4)  # loop\n  Compute GEMM Q, K^T and get S fp32\n"
      "  Compute Mask S at [m, j] with window(3, 0)\n  Compute Exp2 S\nend\nCompute Normalize O, l\n"
      "Reshape P from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n";
  const std::string alphabet = "abcTx_0123456789.e+-*/%^,=:()[]{}# \n\t\0\xff";
  std::mt19937 rng(12345);
  int clean = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string t = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !t.empty(); ++k) {
      size_t pos = rng() % t.size();
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: t[pos] = c; break;
        case 1: t.erase(pos, 1 + rng() % 8); break;
        default: t.insert(pos, 1 + rng() % 3, c); break;
      }
    }
    support::DiagSink d;
    Program p = parse(t, d);
    std::string first = print(p);
    support::DiagSink d2;
    std::string second = print(parse(first, d2));
    // What was kept from a broken file is a valid program too: it also prints to a fixed point.
    ASSERT_FALSE(d2.has_errors()) << t << "\n---\n" << first << d2.render();
    ASSERT_EQ(first, second) << t;
    if (!d.has_errors()) ++clean;
  }
  EXPECT_GT(clean, 100);
}

// Each tests/tl_errors/syntax_*.tl reports exactly the (code, line) pairs its `# expect-error:`
// lines list (the full must-fail runner, tl_errors_test, also runs the checker on other files).
TEST(parser, SyntaxErrorCorpus) {
  namespace fs = std::filesystem;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(QATTN_SOURCE_DIR) / "tests" / "tl_errors")) {
    std::string name = entry.path().filename().string();
    if (name.rfind("syntax_", 0) != 0 || entry.path().extension() != ".tl") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    std::set<std::pair<std::string, int>> want, got;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
      char code[16];
      int line = 0;
      if (std::sscanf(l.c_str(), "# expect-error: %15s line %d", code, &line) == 2) want.insert({code, line});
    }
    support::DiagSink d;
    parse(text, d, name);
    for (const auto& diag : d.all()) got.insert({diag.code, diag.loc.line});
    EXPECT_FALSE(want.empty()) << name;
    EXPECT_EQ(want, got) << name << "\n" << d.render();
    ++files;
  }
  EXPECT_GE(files, 6);
}

}  // namespace
}  // namespace qattn::tl
