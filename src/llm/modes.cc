// parse_modes: the --mode option of `qattn generate` (see pipeline.h).
#include "llm/pipeline.h"
#include "llm/text.h"

namespace qattn::llm {
namespace {

std::optional<Engine> engine(std::string_view s) {
  if (s == "rules") return Engine::Rules;
  if (s == "llm") return Engine::Llm;
  if (s == "llm+rules") return Engine::LlmThenRules;
  return std::nullopt;
}

using text::trim;

}  // namespace

const char* to_string(Engine e) {
  switch (e) {
    case Engine::Rules: return "rules";
    case Engine::Llm: return "llm";
    case Engine::LlmThenRules: return "llm+rules";
  }
  return "?";
}

std::string Modes::str() const {
  if (vanilla) return "vanilla";
  return std::string("1a=") + to_string(sketch) + ",1b=" + to_string(params) + ",2=" + to_string(translate);
}

std::optional<Modes> parse_modes(std::string_view text, support::DiagSink& diags) {
  const std::string hint =
      "--mode rules|llm|llm+rules|vanilla, or per stage: --mode 1a=llm,1b=llm+rules,2=rules (stages 1a sketch, "
      "1b parameters, 2 translation; stages not named stay rules)";
  Modes m;
  const std::string all = trim(text);
  if (all == "vanilla") {
    m.vanilla = true;
    return m;
  }
  if (all.empty()) {
    diags.error("LLM0401", {}, "empty --mode", hint);
    return std::nullopt;
  }
  size_t pos = 0;
  bool first = true;
  while (pos <= all.size()) {
    size_t comma = all.find(',', pos);
    std::string item = trim(std::string_view(all).substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? all.size() + 1 : comma + 1;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      auto e = engine(item);
      if (!e || !first) {
        diags.error("LLM0401", {}, "malformed --mode '" + all + "': '" + item + "'" +
                                       (e ? " (an engine for all stages must come first)" : " is not an engine"),
                    hint);
        return std::nullopt;
      }
      m.sketch = m.params = m.translate = *e;
      first = false;
      continue;
    }
    first = false;
    std::string stage = trim(item.substr(0, eq));
    auto e = engine(trim(item.substr(eq + 1)));
    Engine* slot = stage == "1a" || stage == "sketch"        ? &m.sketch
                   : stage == "1b" || stage == "params"      ? &m.params
                   : stage == "2" || stage == "translate"    ? &m.translate
                                                             : nullptr;
    if (!slot || !e) {
      diags.error("LLM0401", {}, "malformed --mode '" + all + "': '" + item + "'", hint);
      return std::nullopt;
    }
    *slot = *e;
  }
  return m;
}

}  // namespace qattn::llm
