#include "llm/prompt.h"

#include "support/io.h"
#include "llm/text.h"

namespace qattn::llm {
namespace {

using text::trim;

}  // namespace

std::filesystem::path prompts_dir() { return support::source_dir() / "prompts"; }

std::optional<std::string> render(std::string_view tmpl, const PromptVars& vars, support::DiagSink& diags,
                                  const std::string& template_name) {
  std::string out;
  size_t pos = 0;
  bool ok = true;
  while (pos < tmpl.size()) {
    size_t open = tmpl.find("{{", pos);
    if (open == std::string_view::npos) {
      out.append(tmpl.substr(pos));
      break;
    }
    out.append(tmpl.substr(pos, open - pos));
    size_t close = tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) {
      diags.error("LLM0501", {}, "prompt template " + template_name + ": unterminated {{", "close it with }}");
      return std::nullopt;
    }
    std::string inner = trim(tmpl.substr(open + 2, close - open - 2));
    pos = close + 2;
    std::string cmd, arg;
    if (size_t sp = inner.find(' '); sp != std::string::npos) {
      cmd = inner.substr(0, sp);
      arg = trim(inner.substr(sp + 1));
    }
    if (cmd == "include" || cmd == "example") {
      support::DiagSink inner_diags;
      auto text = support::read_file(support::source_dir() / arg, inner_diags);
      if (!text) {
        diags.error("LLM0501", {}, "prompt template " + template_name + ": cannot read '" + arg + "'",
                    "the prompts and the files they include ship with the source tree (set QATTN_HOME)");
        ok = false;
        continue;
      }
      out += *text;
      continue;
    }
    auto it = vars.find(inner);
    if (it == vars.end()) {
      diags.error("LLM0501", {}, "prompt template " + template_name + ": unknown variable {{" + inner + "}}",
                  "the variables of each stage are listed in docs/llm.md");
      ok = false;
      continue;
    }
    out += it->second;
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<std::string> render_template(const std::string& name, const PromptVars& vars, support::DiagSink& diags) {
  support::DiagSink inner;
  auto tmpl = support::read_file(prompts_dir() / (name + ".md"), inner);
  if (!tmpl) {
    diags.error("LLM0501", {}, "cannot read the prompt template prompts/" + name + ".md",
                "the prompts ship with the source tree; set QATTN_HOME to it when the binary was moved");
    return std::nullopt;
  }
  return render(*tmpl, vars, diags, "prompts/" + name + ".md");
}

std::vector<std::string> example_paths(std::string_view tmpl) {
  std::vector<std::string> out;
  for (size_t pos = tmpl.find("{{"); pos != std::string_view::npos; pos = tmpl.find("{{", pos + 2)) {
    size_t close = tmpl.find("}}", pos);
    if (close == std::string_view::npos) break;
    std::string inner = trim(tmpl.substr(pos + 2, close - pos - 2));
    if (inner.rfind("example ", 0) == 0) out.push_back(trim(inner.substr(8)));
  }
  return out;
}

}  // namespace qattn::llm
