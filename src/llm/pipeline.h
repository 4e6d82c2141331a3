// The LLM-driven stages of `qattn generate --mode ...`: stage 1a (sketch), 1b (parameters, TL
// code), 2 (TL -> CUDA) each on the rules engine, on the LLM, or on the LLM with the rules engine
// as fallback; or the paper's "vanilla" baseline (the LLM asked directly for a CUDA kernel).
// Every LLM answer passes the verifiers of verify.h inside the repair loop of repair.h; the run is
// recorded in a Transcript. Nothing is written here: the caller stages Result::files with the
// other artifacts and commits them all-or-nothing.
//
// Modes (--mode): "rules" (default), "llm", "llm+rules", "vanilla", or per stage
// "1a=llm,1b=rules,2=llm+rules" (stages not named stay rules; a bare engine first sets all three:
// "llm,2=rules"). Diagnostics: LLM0401 malformed --mode; stage failures as in repair.h/verify.h.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/translate.h"
#include "hw/gpu.h"
#include "llm/client.h"
#include "llm/verify.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "support/diag.h"

namespace qattn::llm {

enum class Engine { Rules, Llm, LlmThenRules };
const char* to_string(Engine e);  // "rules", "llm", "llm+rules"

struct Modes {
  Engine sketch = Engine::Rules, params = Engine::Rules, translate = Engine::Rules;
  bool vanilla = false;
  bool any_llm() const { return vanilla || sketch != Engine::Rules || params != Engine::Rules || translate != Engine::Rules; }
  bool llm_writes_cuda() const { return vanilla || translate != Engine::Rules; }
  std::string str() const;  // "1a=llm,1b=llm,2=rules" or "vanilla"
};

std::optional<Modes> parse_modes(std::string_view text, support::DiagSink& diags);

struct Options {
  int max_turns = 3;          // LLM answers per stage (1 + repair turns)
  CudaCheck cuda;             // stage 2 / vanilla: toolchain, build options, numerics (may be empty)
  std::function<void(const std::string&)> progress;  // one line per step; may be empty
};

struct Result {
  bool ok = false;
  plan::Plan plan;                                   // sketch, code, tiles the run settled on
  std::optional<backend::Translation> translation;   // set when the LLM wrote the CUDA
  bool vanilla = false;                              // no TL: the CUDA came straight from the spec
  bool unverified = false;  // the LLM wrote CUDA that compiled, but no numerics check ran (no GPU)
  std::vector<std::pair<std::string, std::string>> files;  // llm/transcript.jsonl, llm/summary.{json,md}
  std::string summary_md;
};

// `rules` is the rules engine's plan for the same spec and GPU (the fallback and the source of the
// target facts). Reports into diags; Result::ok says whether the run produced everything asked.
Result run(const spec::AttentionSpec& s, const hw::GpuFacts& g, const plan::Plan& rules, const Modes& modes,
           Client& client, const Options& opts, support::DiagSink& diags);

}  // namespace qattn::llm
