// The must-fail corpus runner and the golden-corpus check.
//  - Every tests/tl_errors/*.tl (globbed when the test program starts) is parsed, and checked when
//    it parses without errors; each `# expect-error: CODE line N` line in the file must be matched
//    by a diagnostic with that code at that line; no diagnostic's message may contain the TEXT of a
//    `# expect-no-message: TEXT` line (a follow-up error that misstates the program). A file without
//    expectations fails, and nothing may crash.
//  - Every tests/tl/*.tl golden program must parse and pass the checker with no diagnostics.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tl/checker.h"
#include "tl/parser.h"

namespace qattn::tl {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> tl_files(const std::string& sub) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::path dir = fs::path(QATTN_SOURCE_DIR) / "tests" / sub;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".tl") out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string n = fs::path(info.param).stem().string();
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n.empty() ? "unnamed" : n;
}

struct Expectation {
  std::string code;
  int line = 0;
};

std::vector<Expectation> expectations(const std::string& text) {
  static const std::regex re(R"(^# expect-error: (TL[0-9]{4}) line ([0-9]+)[ \t\r]*$)");
  std::vector<Expectation> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out.push_back({m[1].str(), std::stoi(m[2].str())});
  }
  return out;
}

// The TEXT of every `# expect-no-message: TEXT` line.
std::vector<std::string> unwanted_messages(const std::string& text) {
  static const std::regex re(R"(^# expect-no-message: (.+?)[ \t\r]*$)");
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out.push_back(m[1].str());
  }
  return out;
}

// ---- must-fail corpus --------------------------------------------------------------------------

class tl_errors : public testing::TestWithParam<std::string> {};

TEST_P(tl_errors, ReportsExpectedDiagnostics) {
  const std::string text = slurp(GetParam());
  auto expect = expectations(text);
  ASSERT_FALSE(expect.empty()) << GetParam() << ": no `# expect-error: TLxxxx line N` line";
  support::DiagSink diags(GetParam());
  Program p = parse(text, diags, GetParam());
  if (!diags.has_errors()) check(p, diags);
  for (const auto& e : expect) {
    bool found = false;
    for (const auto& d : diags.all()) found = found || (d.code == e.code && d.loc.line == e.line);
    EXPECT_TRUE(found) << GetParam() << ": expected " << e.code << " at line " << e.line << ", got:\n"
                       << diags.render();
  }
  for (const auto& unwanted : unwanted_messages(text))
    for (const auto& d : diags.all())
      EXPECT_EQ(d.message.find(unwanted), std::string::npos) << GetParam() << ": a diagnostic says \"" << unwanted << "\":\n"
                                                             << support::render(d);
  for (const auto& d : diags.all()) {
    EXPECT_FALSE(d.code.empty()) << support::render(d);
    EXPECT_FALSE(d.message.empty()) << support::render(d);
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, tl_errors, testing::ValuesIn(tl_files("tl_errors")), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(tl_errors);

TEST(tl_errors_corpus, SemanticCasesPresent) {
  const char* required[] = {"missing_reshape",       "transpose_confusion_gemm", "transpose_confusion_copy",
                            "undeclared_tensor",     "copy_before_allocate",     "shape_mismatch",
                            "loop_carried_inside_loop", "use_before_def",        "operand_in_global",
                            "tile_out_of_range",     "bad_global"};
  auto files = tl_files("tl_errors");
  for (const char* r : required) {
    bool found = false;
    for (const auto& f : files) found = found || fs::path(f).stem() == r;
    EXPECT_TRUE(found) << "tests/tl_errors/" << r << ".tl is missing";
  }
}

// The semantic cases (not syntax_*) must parse cleanly: their bug is for the checker to find.
TEST(tl_errors_corpus, SemanticCasesParse) {
  for (const auto& f : tl_files("tl_errors")) {
    if (fs::path(f).stem().string().rfind("syntax_", 0) == 0) continue;
    support::DiagSink diags(f);
    parse(slurp(f), diags, f);
    EXPECT_FALSE(diags.has_errors()) << diags.render();
  }
}

// ---- golden corpus -----------------------------------------------------------------------------

class tl_errors_golden : public testing::TestWithParam<std::string> {};

TEST_P(tl_errors_golden, PassesChecker) {
  const std::string text = slurp(GetParam());
  support::DiagSink diags(GetParam());
  Program p = parse(text, diags, GetParam());
  ASSERT_FALSE(diags.has_errors()) << diags.render();
  EXPECT_TRUE(check(p, diags)) << diags.render();
  EXPECT_TRUE(diags.all().empty()) << diags.render();
}

INSTANTIATE_TEST_SUITE_P(Corpus, tl_errors_golden, testing::ValuesIn(tl_files("tl")), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(tl_errors_golden);

TEST(tl_errors_golden_corpus, Present) {
  if (tl_files("tl").empty()) GTEST_SKIP() << "no tests/tl/*.tl golden programs yet";
  SUCCEED();
}

}  // namespace
}  // namespace qattn::tl
