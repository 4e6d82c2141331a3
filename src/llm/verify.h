// The verifiers an LLM answer must pass, stage by stage: the same front end, planner checks,
// translator and build driver the rules engine is held to. Each reports diagnostics with stable
// codes; the repair loop sends them back to the LLM verbatim.
//   verify_sketch (1a): parses; Kernel header with the spec's mask; the global tensors Q, K, V are
//     copied in and O out, one K/V loop, two GEMMs, Normalize (LLM0301); when stage 1b runs on the
//     rules engine, its TL code must refine the sketch (PLAN0201).
//   verify_code (1b): parses, passes tl::check, refines the sketch (PLAN0201), states the spec's
//     mask, dtypes, head dims and LSE (LLM0302), tiles that fit the target (LLM0302, from the
//     resource model), interprets correctly against the reference at small sizes (TL0801), and,
//     when stage 2 runs on the rules engine, translates (XL....).
//   verify_cuda (2, vanilla): defines the C ABI (LLM0305), compiles with nvcc through the build
//     driver (BUILD0201), then passes the numerics check when one is given (LLM0304).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "backend/translate.h"
#include "build/nvcc.h"
#include "plan/plan.h"
#include "support/diag.h"

namespace qattn::llm {

bool verify_sketch(const std::string& text, const plan::Problem& p, const std::string* rules_code, support::DiagSink& diags);

// On success returns the plan with the LLM's sketch, code and tiles (budget re-estimated).
std::optional<plan::Plan> verify_code(const std::string& text, const std::string& sketch, const plan::Plan& rules,
                                      bool translate_too, support::DiagSink& diags);

// The numerics step of stage 2: given the built library, pass or report LLM0304. On a GPU it is
// gpu_numerics (python -m qattn.verify); tests inject a fake one (there is no GPU in CI).
using NumericsCheck = std::function<bool(const build::BuildResult& built, support::DiagSink& diags)>;

struct CudaCheck {
  const build::Toolchain* toolchain = nullptr;  // required
  build::BuildOptions build;
  NumericsCheck numerics;                       // empty: compile only (no GPU here)
};

// `meta` carries the kernel name, architecture and nvcc flags; its source is replaced by `source`.
std::optional<backend::Translation> verify_cuda(const std::string& source, const backend::Translation& meta,
                                                const CudaCheck& check, support::DiagSink& diags);

// Runs `PYTHON -m qattn.verify` (the package in support::python_dir()) on a temporary folder holding
// the built library.
NumericsCheck gpu_numerics(const std::string& python);

}  // namespace qattn::llm
