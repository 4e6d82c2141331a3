// Prompts as data: every template in prompts/ renders with the variables its stage provides, and
// every few-shot example it includes passes the TL front end (tests/tl/*.tl: parse + check; the
// prompts/fewshot/*.tl sketches: refined by the golden program named on their `# refined-by:`
// line). A few-shot example cannot go stale.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "llm/prompt.h"
#include "plan/sketch.h"
#include "support/io.h"
#include "tl/checker.h"
#include "tl/parser.h"

namespace qattn::llm {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  support::DiagSink d;
  return support::read_file(p, d).value_or("");
}

PromptVars all_vars() {
  PromptVars v;
  for (const char* n : {"spec_json", "spec_summary", "gpu_name", "gpu_arch", "gpu_facts", "kernel_name", "mask", "dtype",
                        "out_dtype", "head_dim_qk", "head_dim_v", "lse", "tensor_cores", "atoms", "sketch", "code", "what",
                        "lang", "diagnostics", "turn", "max_turns"})
    v[n] = std::string("<") + n + ">";
  return v;
}

TEST(LlmPrompts, EveryTemplateRenders) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(prompts_dir())) {
    if (e.path().extension() != ".md") continue;
    ++n;
    support::DiagSink d;
    auto text = render_template(e.path().stem().string(), all_vars(), d);
    ASSERT_TRUE(text) << e.path() << "\n" << d.render();
    EXPECT_EQ(text->find("{{"), std::string::npos) << e.path();
  }
  EXPECT_GE(n, 6);  // system, sketch, params, translate, vanilla, repair
  support::DiagSink d;
  auto sketch = render_template("sketch", all_vars(), d);
  ASSERT_TRUE(sketch);
  EXPECT_NE(sketch->find("## What the checker verifies"), std::string::npos) << "docs/tl.md is included";
}

TEST(LlmPrompts, UnknownVariableAndMissingFileAreDiagnostics) {
  support::DiagSink d;
  EXPECT_FALSE(render("{{nope}}", {}, d));
  EXPECT_NE(d.render().find("LLM0501"), std::string::npos);
  support::DiagSink d2;
  EXPECT_FALSE(render("{{include docs/does-not-exist.md}}", {}, d2));
  support::DiagSink d3;
  EXPECT_FALSE(render("{{unterminated", {}, d3));
  support::DiagSink d4;
  EXPECT_EQ(render("a {{ x }} b", {{"x", "1"}}, d4).value_or(""), "a 1 b");
}

TEST(LlmPrompts, FewShotExamplesPassTheFrontEnd) {
  int examples = 0;
  for (const auto& e : fs::directory_iterator(prompts_dir())) {
    if (e.path().extension() != ".md") continue;
    for (const auto& rel : example_paths(read(e.path()))) {
      ++examples;
      const fs::path path = support::source_dir() / rel;
      const std::string text = read(path);
      ASSERT_FALSE(text.empty()) << rel;
      support::DiagSink d(rel);
      auto prog = tl::parse(text, d, rel);
      std::smatch m;
      if (std::regex_search(text, m, std::regex("# refined-by: (\\S+)"))) {
        // A sketch: the golden program it names must refine it.
        support::DiagSink g;
        auto golden = tl::parse(read(support::source_dir() / m[1].str()), g, m[1].str());
        EXPECT_FALSE(g.has_errors()) << g.render();
        EXPECT_TRUE(plan::refines(prog, golden, d)) << rel << "\n" << d.render();
      } else {
        // A complete program (a golden test file: its interpreter runs are in the golden suite).
        EXPECT_EQ(rel.rfind("tests/tl/", 0), 0u) << rel << ": complete few-shot programs live in tests/tl/";
        tl::check(prog, d);
      }
      EXPECT_FALSE(d.has_errors()) << rel << "\n" << d.render();
    }
  }
  EXPECT_GE(examples, 3);
}

}  // namespace
}  // namespace qattn::llm
