// Hostile inputs, "Bounds" (issue 18): the interpreter's memory budget (TL0906 at the statement
// that asks, never std::bad_alloc; buffers freed or given back are no longer counted) and the size
// caps of TL text (TL0103), spec text (SPEC0112) and LLM replies (LLM0203).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "diag_test_util.h"
#include "llm/extract.h"
#include "spec/spec.h"
#include "support/bounded_io.h"
#include "tl/interp.h"
#include "tl/parser.h"

namespace qattn {
namespace {

namespace fs = std::filesystem;
using test::contains;
using test::find;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const fs::path kSource = fs::path(QATTN_SOURCE_DIR);

tl::Program parse_ok(const std::string& text) {
  support::DiagSink d;
  auto p = tl::parse(text, d);
  EXPECT_FALSE(d.has_errors()) << d.render();
  return p;
}

// tests/tl/mha.tl with `extra` inserted before its first shared Allocate (line 14 of the file).
std::string mha_with(const std::string& extra, int* extra_line = nullptr) {
  std::string text = slurp(kSource / "tests/tl/mha.tl");
  size_t at = text.find("Allocate Q in shared");
  if (extra_line) *extra_line = 1 + int(std::count(text.begin(), text.begin() + long(at), '\n'));
  return text.substr(0, at) + extra + text.substr(at);
}

tl::RunConfig small(int64_t budget_mib) {
  tl::RunConfig cfg;
  cfg.dims = {{"batch", 1}, {"heads_q", 1}, {"heads_kv", 1}, {"seqlen_q", 40}, {"seqlen_k", 70}, {"d", 16}};
  cfg.memory_budget = budget_mib << 20;
  return cfg;
}

TEST(InterpBudget, AnAllocateOverTheBudgetIsTL0906AtItsLine) {
  // 1 Mi elements (8 MiB in the interpreter) each: the third does not fit in 20 MiB.
  int line = 0;
  std::string extra;
  for (int i = 0; i < 4; ++i) extra += "Allocate X" + std::to_string(i) + " in register (1024, 1024) fp32 init 0\n";
  auto prog = parse_ok(mha_with(extra, &line));
  support::DiagSink d;
  auto r = tl::run(prog, small(20), d);
  EXPECT_FALSE(r.ran);
  const auto* e = find(d, "TL0906");
  ASSERT_NE(e, nullptr) << d.render();
  EXPECT_EQ(e->loc.line, line + 2);  // X2
  EXPECT_TRUE(contains(e->message, "register buffer 'X2'")) << e->message;
  EXPECT_TRUE(contains(e->message, "20 MiB")) << e->message;
  EXPECT_TRUE(contains(e->hint, "--max-memory")) << e->hint;
  // The same program within a budget it fits: runs and passes.
  support::DiagSink d2;
  auto r2 = tl::run(prog, small(64), d2);
  EXPECT_TRUE(r2.passed) << d2.render() << r2.summary;
}

TEST(InterpBudget, BuffersOfEndedIterationsAreNotCounted) {
  // 8 MiB allocated afresh in each of 200 iterations (1.6 GB in all) within a budget of 20 MiB:
  // each iteration's buffer is freed at its end.
  std::string text = slurp(kSource / "tests/tl/mha.tl");
  const std::string loop = "for j = 0: cdiv(seqlen_k, BN)\n";
  size_t at = text.find(loop);
  ASSERT_NE(at, std::string::npos);
  text = text.substr(0, at) + "for t = 0: 200\n  Allocate W in register (1024, 1024) fp32 init 0\nend\n" + text.substr(at);
  support::DiagSink pd;
  auto prog = tl::parse(text, pd);
  ASSERT_FALSE(pd.has_errors()) << pd.render();
  support::DiagSink d;
  auto r = tl::run(prog, small(20), d);
  EXPECT_TRUE(r.passed) << d.render();
}

TEST(InterpBudget, NestedRebindingsAddUp) {
  // A buffer rebound in nested loops: every level keeps the outer one until its iteration ends.
  std::string nest, close;
  for (int i = 0; i < 6; ++i) {
    nest += std::string(size_t(2 * i), ' ') + "for i" + std::to_string(i) + " = 0: 1\n" + std::string(size_t(2 * i + 2), ' ') +
            "Allocate Z in register (1024, 1024) fp32 init 0\n";
    close = std::string(size_t(2 * i), ' ') + "end\n" + close;
  }
  auto prog = parse_ok(mha_with(nest + close));
  support::DiagSink d;
  auto r = tl::run(prog, small(30), d);
  EXPECT_FALSE(r.ran);
  ASSERT_NE(find(d, "TL0906"), nullptr) << d.render();
  support::DiagSink d2;
  EXPECT_TRUE(tl::run(prog, small(60), d2).passed) << d2.render();
}

TEST(InterpBudget, AnOuterProductGemmIsRefusedBeforeItIsComputed) {
  // (30000, 1) x (1, 30000): 7.2 GB of doubles were allocated (std::bad_alloc) before the budget.
  auto prog = parse_ok(mha_with("Allocate A in register (30000, 1) fp32 init 1\nAllocate B in register (30000, 1) fp32 init 1\n"
                                 "Compute GEMM A, B^T and get C\n"));
  support::DiagSink d;
  auto r = tl::run(prog, small(1024), d);
  EXPECT_FALSE(r.ran);
  EXPECT_TRUE(find(d, "TL0902") || find(d, "TL0906")) << d.render();
}

TEST(InterpBudget, TheGlobalTensorsCount) {
  auto prog = parse_ok(slurp(kSource / "tests/tl/mha.tl"));
  tl::RunConfig cfg = small(1);
  cfg.dims = {{"batch", 2}, {"heads_q", 3}, {"heads_kv", 3}, {"seqlen_q", 77}, {"seqlen_k", 130}, {"d", 32}};
  support::DiagSink d;
  EXPECT_FALSE(tl::run(prog, cfg, d).ran);
  const auto* e = find(d, "TL0906");
  ASSERT_NE(e, nullptr) << d.render();
  EXPECT_TRUE(contains(e->message, "global tensors")) << e->message;
  EXPECT_EQ(e->loc.line, 5);  // the Kernel line
}

TEST(InputCaps, TlTextOver1MiBIsTL0103) {
  std::string text = "Kernel k with mask none\n" + std::string(support::kMaxTlBytes, '\n');
  support::DiagSink d;
  auto p = tl::parse(text, d, "big.tl");
  ASSERT_NE(find(d, "TL0103"), nullptr) << d.render();
  EXPECT_TRUE(p.stmts.empty());
  support::DiagSink ok;
  tl::parse(std::string(support::kMaxTlBytes - 100, '\n'), ok);
  EXPECT_FALSE(ok.has_errors()) << ok.render();
}

// 400k comment lines (800 KB, under the byte cap) once took 1.28 GB to parse: the statement cap
// stops the parser at line 10001 with TL0104; 10000 comments and any number of blank lines parse.
TEST(InputCaps, TooManyStatementsIsTL0104) {
  std::string many;
  for (int i = 0; i < 400000; ++i) many += "#\n";
  support::DiagSink d;
  auto p = tl::parse(many, d, "comments.tl");
  const auto* e = find(d, "TL0104");
  ASSERT_NE(e, nullptr) << d.render();
  EXPECT_EQ(e->loc.line, tl::kMaxStatements + 1);
  EXPECT_LE(p.stmts.size(), size_t(tl::kMaxStatements));
  std::string fine = "Kernel k with mask none\n" + std::string(100000, '\n');
  for (int i = 0; i < tl::kMaxStatements - 1; ++i) fine += "# c\n";
  support::DiagSink ok;
  tl::parse(fine, ok);
  EXPECT_EQ(find(ok, "TL0104"), nullptr) << ok.render();
}

TEST(InputCaps, SpecTextOver1MiBIsSPEC0112) {
  std::string text = R"({"heads_q": 8, "head_dim": 64)" + std::string(support::kMaxSpecBytes, ' ') + "}";
  support::DiagSink d;
  EXPECT_FALSE(spec::parse_json(text, d));
  EXPECT_NE(find(d, "SPEC0112"), nullptr) << d.render();
  support::DiagSink ok;
  EXPECT_TRUE(spec::parse_json(R"({"heads_q": 8, "head_dim": 64})" + std::string(1000, ' '), ok)) << ok.render();
}

TEST(InputCaps, ReplyOver4MiBIsLLM0203) {
  std::string reply = "```tl\nKernel k with mask none\n```\n" + std::string(support::kMaxReplyBytes, 'x');
  support::DiagSink d;
  EXPECT_FALSE(llm::extract_block(reply, {"tl"}, d));
  EXPECT_NE(find(d, "LLM0203"), nullptr) << d.render();
  support::DiagSink ok;
  EXPECT_TRUE(llm::extract_block("```tl\nKernel k with mask none\n```\n" + std::string(1000, 'x'), {"tl"}, ok));
}

TEST(InputCaps, FilesAreReadOneBytePastTheCapAtMost) {
  support::DiagSink d;
  EXPECT_FALSE(support::read_file_capped("/dev/zero", 4096, "a test input", d));  // would never end
  const auto* e = find(d, "IO0003");
  ASSERT_NE(e, nullptr) << d.render();
  EXPECT_TRUE(contains(e->message, "larger than 4 KiB, the limit of a test input")) << e->message;
  support::DiagSink d2;
  auto t = support::read_file_capped(kSource / "tests/tl/mha.tl", support::kMaxTlBytes, "a TL program", d2);
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, slurp(kSource / "tests/tl/mha.tl"));
}

}  // namespace
}  // namespace qattn
