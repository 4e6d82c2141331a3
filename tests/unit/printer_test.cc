// Printer tests: the canonical spelling of every statement and expression form, minimal
// parentheses, number formatting, comments/blanks, ASTs built by passes (not from text), and the
// fixed point print(parse(print(parse(t)))) == print(parse(t)) on the examples of docs/tl.md and on
// every tests/tl/*.tl and tests/tl_errors/*.tl file (globbed at run time).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tl/parser.h"
#include "tl/printer.h"

namespace qattn::tl {
namespace {

namespace fs = std::filesystem;

std::string fmt(const std::string& text) {
  support::DiagSink d;
  auto p = parse(text, d);
  EXPECT_FALSE(d.has_errors()) << text << "\n" << d.render();
  return print(p);
}

std::string expr(const std::string& text) {
  support::DiagSink d;
  auto e = parse_expr(text, d);
  EXPECT_TRUE(e) << text << "\n" << d.render();
  return e ? print_expr(*e) : "";
}

// The fixed-point property; `must_parse` also requires the text to parse without errors.
void expect_fixed_point(const std::string& text, const std::string& what, bool must_parse) {
  support::DiagSink d1;
  std::string first = print(parse(text, d1));
  if (must_parse) {
    EXPECT_FALSE(d1.has_errors()) << what << "\n" << d1.render();
  }
  support::DiagSink d2;
  std::string second = print(parse(first, d2));
  EXPECT_FALSE(d2.has_errors()) << what << ": the printed text does not parse\n" << first << d2.render();
  EXPECT_EQ(first, second) << what;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The ``` blocks of docs/tl.md except the grammar.
std::vector<std::string> doc_examples() {
  std::string doc = read(fs::path(QATTN_SOURCE_DIR) / "docs" / "tl.md");
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t a = doc.find("```\n", pos);
    if (a == std::string::npos) break;
    size_t b = doc.find("\n```", a + 4);
    if (b == std::string::npos) break;
    std::string block = doc.substr(a + 4, b - a - 4 + 1);
    if (block.find("program     =") == std::string::npos) out.push_back(block);
    pos = b + 4;
  }
  return out;
}

TEST(printer, Expressions) {
  EXPECT_EQ(expr("a-(b-c)"), "a - (b - c)");
  EXPECT_EQ(expr("(a-b)-c"), "a - b - c");
  EXPECT_EQ(expr("a+(b+c)"), "a + (b + c)");
  EXPECT_EQ(expr("(a+b)*c"), "(a + b) * c");
  EXPECT_EQ(expr("a+(b*c)"), "a + b * c");
  EXPECT_EQ(expr("a/(b*c)"), "a / (b * c)");
  EXPECT_EQ(expr("(a*b)%c"), "a * b % c");
  EXPECT_EQ(expr("a*-b"), "a * -b");
  EXPECT_EQ(expr("a - -b"), "a - -b");
  EXPECT_EQ(expr("-(a+b)"), "-(a + b)");
  EXPECT_EQ(expr("-(-a)"), "-(-a)");
  EXPECT_EQ(expr("-(cdiv(a,b))"), "-cdiv(a, b)");
  EXPECT_EQ(expr("((x))"), "x");
  EXPECT_EQ(expr("min(cdiv(seqlen_k,BN),cdiv((m_block+1)*BM+seqlen_k-seqlen_q,BN))"),
            "min(cdiv(seqlen_k, BN), cdiv((m_block + 1) * BM + seqlen_k - seqlen_q, BN))");
}

TEST(printer, Numbers) {
  EXPECT_EQ(expr("12"), "12");
  EXPECT_EQ(expr("0.125"), "0.125");
  EXPECT_EQ(expr("1e-3"), "0.001");
  EXPECT_EQ(expr("1e-5"), "1e-05");
  EXPECT_EQ(expr("2.0"), "2.0");
  EXPECT_EQ(expr("2e3"), "2000.0");
  EXPECT_EQ(expr("1e20"), "1e+20");
  EXPECT_EQ(expr("0.1"), "0.1");
  EXPECT_EQ(expr("100000000000000000000"), "100000000000000000000");
  EXPECT_EQ(expr("007"), "7");
  EXPECT_EQ(print_expr(Expr::number(-2, true)), "-2");
  EXPECT_EQ(print_expr(Expr::number(0.5, false)), "0.5");
  EXPECT_EQ(print_expr(Expr::unary("-", Expr::number(-2, true))), "-(-2)");
  EXPECT_EQ(print_expr(Expr::binary("-", Expr::ident("a"), Expr::number(-2, true))), "a - -2");
  EXPECT_EQ(print_expr(Expr::number(-std::numeric_limits<double>::infinity(), false)), "-inf");
}

TEST(printer, Statements) {
  EXPECT_EQ(fmt("kernel   k"), "Kernel k with mask none\n");
  EXPECT_EQ(fmt("KERNEL k WITH MASK WINDOW(1,2)"), "Kernel k with mask window(1, 2)\n");
  EXPECT_EQ(fmt("dim a,b=1"), "Dim a, b = 1\n");
  EXPECT_EQ(fmt("const BM=64,BN=32"), "Const BM = 64, BN = 32\n");
  EXPECT_EQ(fmt("grid m=0:cdiv(s,BM),h=0:H"), "Grid m = 0: cdiv(s, BM), h = 0: H\n");
  EXPECT_EQ(fmt("let x=(a)"), "Let x = a\n");
  EXPECT_EQ(fmt("allocate q in GLOBAL (s,d) FP16 with offset [b,h]"),
            "Allocate q in global (s, d) fp16 with offset [b, h]\n");
  EXPECT_EQ(fmt("Allocate m in register (BM) init -inf"), "Allocate m in register (BM) fp32 init -inf\n");
  EXPECT_EQ(fmt("Allocate K in shared (BN, d)"), "Allocate K in shared (BN, d)\n");
  EXPECT_EQ(fmt("copy Q (BM,d) in coordinate [m,0] from global to shared"),
            "Copy Q (BM, d) in coordinate [m, 0] from global to shared\n");
  EXPECT_EQ(fmt("copy Q from shared to register"), "Copy Q from shared to register\n");
  EXPECT_EQ(fmt("compute gemm Q,K^T and get S"), "Compute GEMM Q, K^T and get S\n");
  EXPECT_EQ(fmt("compute CONVERT P and get P16 FP16"), "Compute Convert P and get P16 fp16\n");
  EXPECT_EQ(fmt("compute gemm P16,V and accumulate O"), "Compute GEMM P16, V and accumulate O\n");
  EXPECT_EQ(fmt("compute mask S at [m,j] with causal"), "Compute Mask S at [m, j] with causal\n");
  EXPECT_EQ(fmt("compute mask S at [m,j]"), "Compute Mask S at [m, j] with none\n");
  EXPECT_EQ(fmt("reshape P from (a,b) to (c)"), "Reshape P from (a, b) to (c)\n");
  EXPECT_EQ(fmt("copy K from shared to register {async,stages:2}#x"),
            "Copy K from shared to register {async, stages: 2}  # x\n");
  EXPECT_EQ(fmt("for j=0:n {wait}\ncompute exp P\n   for i = 0: 2\n compute exp Q\nend#e\nEND"),
            "for j = 0: n {wait}\n  Compute Exp P\n  for i = 0: 2\n    Compute Exp Q\n  end  # e\nend\n");
}

TEST(printer, HopperSchedule) {
  EXPECT_EQ(fmt("role PRODUCER warpgroups (1) Registers 24"), "Role producer warpgroups 1 registers 24\n");
  EXPECT_EQ(fmt("ROLE consumer WARPGROUPS BM/64 registers 240 PINGPONG"),
            "Role consumer warpgroups BM / 64 registers 240 pingpong\n");
  EXPECT_EQ(fmt("allocate K in shared (BN,d) bf16 {stages:STAGES}"), "Allocate K in shared (BN, d) bf16 {stages: STAGES}\n");
  EXPECT_EQ(fmt("compute gemm Q,K^T and get S {wait:Q,wait:K,release:K}"),
            "Compute GEMM Q, K^T and get S {wait: Q, wait: K, release: K}\n");
  EXPECT_EQ(fmt("for j=0:n {skip:document,overlap}\nend"), "for j = 0: n {skip: document, overlap}\nend\n");
  // A built Role.
  Stmt r;
  r.kind = Stmt::Kind::Role;
  r.role.producer = false;
  r.role.warpgroups = Expr::number(3, true);
  r.role.registers = Expr::number(160, true);
  EXPECT_EQ(print_stmt(r, 2), "  Role consumer warpgroups 3 registers 160");
}

// A golden program (written canonically) parsed, printed and parsed again: fmt(x) == x, no errors,
// the same statements; the two programs for the caller's field checks.
std::pair<Program, Program> reparsed(const std::string& text) {
  EXPECT_EQ(fmt(text), text);
  support::DiagSink d;
  Program p = parse(text, d);
  Program again = parse(print(p), d);
  EXPECT_FALSE(d.has_errors()) << d.render();
  EXPECT_EQ(p.stmts.size(), again.stmts.size());
  return {std::move(p), std::move(again)};
}

// `split columns` and `{view: K}`: canonical spelling, and print(parse(x)) == x for the absorbed-MLA
// golden program with its fields kept.
TEST(printer, SplitColumnsAndViewRoundTrip) {
  EXPECT_EQ(fmt("ROLE consumer WARPGROUPS 2 registers 232 Split COLUMNS"), "Role consumer warpgroups 2 registers 232 split columns\n");
  EXPECT_EQ(fmt("allocate V in shared (BN,dv) bf16 {view:K}"), "Allocate V in shared (BN, dv) bf16 {view: K}\n");
  Stmt r;
  r.kind = Stmt::Kind::Role;
  r.role.warpgroups = Expr::number(2, true);
  r.role.registers = Expr::number(232, true);
  r.role.split_columns = true;
  EXPECT_EQ(print_stmt(r, 0), "Role consumer warpgroups 2 registers 232 split columns");
  const std::string text = read(fs::path(QATTN_SOURCE_DIR) / "tests" / "tl" / "mla_absorbed_paged.tl");
  ASSERT_NE(text.find("Role consumer warpgroups 2 registers 232 split columns\n"), std::string::npos);
  ASSERT_NE(text.find("Allocate V in shared (BN, dv) bf16 {view: K}\n"), std::string::npos);
  auto [p, again] = reparsed(text);
  ASSERT_EQ(p.stmts.size(), again.stmts.size());
  int roles = 0, views = 0;
  for (size_t i = 0; i < p.stmts.size(); ++i) {
    const Stmt &a = p.stmts[i], &b = again.stmts[i];
    if (a.kind == Stmt::Kind::Role) {
      ++roles;
      EXPECT_EQ(a.role.split_columns, b.role.split_columns);
      EXPECT_EQ(a.role.split_columns, !a.role.producer);
    }
    for (size_t k = 0; k < a.attrs.size() && k < b.attrs.size(); ++k)
      if (a.attrs[k].key == "view") {
        ++views;
        EXPECT_EQ(b.attrs[k].key, "view");
        ASSERT_TRUE(b.attrs[k].value);
        EXPECT_EQ(*b.attrs[k].value, Expr::ident("K"));
      }
  }
  EXPECT_EQ(roles, 2);
  EXPECT_EQ(views, 1);
}

// print(parse(x)) == x for a complete sm90 program (the golden one is written canonically).
TEST(printer, Sm90ProgramRoundTrips) {
  const std::string text = read(fs::path(QATTN_SOURCE_DIR) / "tests" / "tl" / "sm90_schedule.tl");
  ASSERT_NE(text.find("Role consumer warpgroups 2 registers 240 pingpong"), std::string::npos);
  auto [p, again] = reparsed(text);
  ASSERT_EQ(p.stmts.size(), again.stmts.size());
  for (size_t i = 0; i < p.stmts.size(); ++i) {
    EXPECT_EQ(p.stmts[i].kind, again.stmts[i].kind);
    EXPECT_EQ(p.stmts[i].attrs.size(), again.stmts[i].attrs.size());
    if (p.stmts[i].kind == Stmt::Kind::Role) {
      EXPECT_EQ(p.stmts[i].role.producer, again.stmts[i].role.producer);
      EXPECT_EQ(p.stmts[i].role.warpgroups, again.stmts[i].role.warpgroups);
      EXPECT_EQ(p.stmts[i].role.registers, again.stmts[i].role.registers);
      EXPECT_EQ(p.stmts[i].role.pingpong, again.stmts[i].role.pingpong);
    }
  }
}

TEST(printer, CommentsAndBlanks) {
  EXPECT_EQ(fmt("\n\n#a\n#  b  \n\n\n\nLet x = 1 #   c\n\n"), "# a\n#  b\n\nLet x = 1  #   c\n");
  EXPECT_EQ(fmt("#\n"), "#\n");
  EXPECT_EQ(fmt("for i = 0: 1\n\n  Let x = 1\n\n\n  Let y = 1\n\nend"),
            "for i = 0: 1\n  Let x = 1\n\n  Let y = 1\nend\n");
  EXPECT_EQ(fmt(""), "");
  EXPECT_EQ(fmt("\r\n \t\n"), "");
}

TEST(printer, PrintStmtIndentAndBuiltAsts) {
  Stmt s;
  s.kind = Stmt::Kind::Compute;
  s.compute.op = "Rescale";
  s.compute.operands.push_back(Operand{Expr::ident("O"), false, {}});
  s.compute.operands.push_back(Operand{Expr::ident("alpha"), false, {}});
  EXPECT_EQ(print_stmt(s, 4), "    Compute Rescale O, alpha");
  Stmt loop;
  loop.kind = Stmt::Kind::For;
  loop.loop.var = "j";
  loop.loop.lo = Expr::number(0, true);
  loop.loop.hi = Expr::ident("n");
  loop.loop.body.push_back(s);
  EXPECT_EQ(print_stmt(loop, 2), "  for j = 0: n\n    Compute Rescale O, alpha\n  end");
  Stmt c;
  c.kind = Stmt::Kind::Comment;
  c.comment.text = "hello";
  EXPECT_EQ(print_stmt(c), "# hello");
  Program p;
  p.stmts = {c, loop};
  EXPECT_EQ(print(p), "# hello\nfor j = 0: n\n  Compute Rescale O, alpha\nend\n");
  expect_fixed_point(print(p), "built program", true);
}

TEST(printer, DocExampleIsCanonical) {
  auto blocks = doc_examples();
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(fmt(blocks[0]), blocks[0]);  // the reference program is written in canonical form
  for (size_t i = 0; i < blocks.size(); ++i) expect_fixed_point(blocks[i], "docs/tl.md block " + std::to_string(i), true);
}

TEST(printer, FixedPointOnCorpus) {
  int n = 0;
  for (const char* dir : {"tests/tl", "tests/tl_errors", "tests/fuzz/corpus", "examples"}) {
    fs::path root = fs::path(QATTN_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      if (!entry.is_regular_file() || entry.path().extension() != ".tl") continue;
      // Golden files must parse; must-fail and fuzz seeds may hold syntax errors, and then the
      // printer prints what was kept, which must itself be a fixed point.
      bool must_parse = std::string(dir) == "tests/tl";
      expect_fixed_point(read(entry.path()), entry.path().string(), must_parse);
      ++n;
    }
  }
  std::cout << "fixed point checked on " << n << " files\n";
}

}  // namespace
}  // namespace qattn::tl
