// Helpers of the interpreter's tests (interp_test.cc, interp_backward_test.cc, ...): the golden corpus
// folder, reading a file, running TL text and collecting its diagnostic codes, the checker's codes.
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tl/checker.h"
#include "tl/interp.h"
#include "tl/parser.h"

namespace qattn::tl::testutil {

namespace fs = std::filesystem;

inline const fs::path kCorpus = fs::path(QATTN_SOURCE_DIR) / "tests" / "tl";

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The corpus program `file` with its first `from` after the Kernel line (past the heading comment)
// replaced by `to`; EXPECT-fails (and returns the program unchanged) when `from` is not there.
inline std::string corpus_with(const char* file, const std::string& from, const std::string& to) {
  std::string text = slurp(kCorpus / file);
  const size_t kernel = text.find("\nKernel ");
  const size_t at = text.find(from, kernel == std::string::npos ? 0 : kernel);
  EXPECT_NE(at, std::string::npos) << file << " no longer contains: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct Outcome {
  RunResult r;
  std::string diags;
  std::vector<std::string> codes;
  bool has(const std::string& code) const { return std::find(codes.begin(), codes.end(), code) != codes.end(); }
};

inline Outcome run_text(const std::string& text, RunConfig cfg, const std::string& file = "test.tl") {
  support::DiagSink diags(file);
  Program p = parse(text, diags, file);
  Outcome o;
  o.r = run(p, cfg, diags);
  o.diags = diags.render();
  for (const auto& d : diags.all()) o.codes.push_back(d.code);
  return o;
}

// The checker's codes for a program text (the interpreter's tests run without the checker).
inline std::vector<std::string> check_codes(const std::string& text) {
  support::DiagSink diags("test.tl");
  Program p = parse(text, diags, "test.tl");
  check(p, diags);
  std::vector<std::string> out;
  for (const auto& d : diags.all()) out.push_back(d.code);
  return out;
}

}  // namespace qattn::tl::testutil
