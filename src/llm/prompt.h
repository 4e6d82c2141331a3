// Prompts as data: the templates in prompts/*.md, rendered with the run's facts.
//   {{name}}          a variable of the stage (spec, sketch, code, GPU facts, atoms, diagnostics...)
//   {{include PATH}}  a file of the source tree, verbatim (docs/tl.md, include/qattn/qattn.h)
//   {{example PATH}}  a few-shot TL file, verbatim. Every example is also a test file: tests/tl/*.tl
//                     run in the golden suite, prompts/fewshot/*.tl are checked by llm_prompt_test
//                     (so a few-shot example can never go stale against the TL front end).
// Paths are relative to support::source_dir(). Diagnostics: LLM0501 (unknown variable, unreadable
// file, unterminated placeholder) - a broken installation, not a user error.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/diag.h"

namespace qattn::llm {

using PromptVars = std::map<std::string, std::string>;

std::filesystem::path prompts_dir();  // <source dir>/prompts

std::optional<std::string> render(std::string_view tmpl, const PromptVars& vars, support::DiagSink& diags,
                                  const std::string& template_name = "prompt");

// Renders prompts/<name>.md.
std::optional<std::string> render_template(const std::string& name, const PromptVars& vars, support::DiagSink& diags);

// The PATHs of every {{example PATH}} in a template (for the tests that run them).
std::vector<std::string> example_paths(std::string_view tmpl);

}  // namespace qattn::llm
