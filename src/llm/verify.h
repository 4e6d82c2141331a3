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
//   For a backward program (the rules engine's code is `Kernel NAME backward`, `qattn generate
//     --backward`): the sketch's header says `backward`; Q, K, V, O, dO and LSE are copied in and dQ,
//     dK, dV out; one query loop, the five GEMMs, the D term (a RowSum and `Subtract dP, ...`)
//     (LLM0301); the code's dtypes and head dims (LLM0302), tiles from plan::backward_budget
//     (LLM0302), the interpreter against the fp64 gradients (TL0801).
//   verify_cuda (2, vanilla): defines the C ABI (LLM0305), includes only allowed headers
//     (BUILD0301, build::check_includes), compiles with nvcc through the build driver (BUILD0201,
//     BUILD0203), then passes the numerics check when one is given (LLM0304); without one the
//     kernel is compiled but unverified (llm::Result::unverified).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "backend/translate.h"
#include "build/nvcc.h"
#include "plan/plan.h"
#include "support/diag.h"
#include "support/process.h"

namespace qattn::llm {

// backward: the request is the backward pass (the rules engine's code is `Kernel NAME backward`).
bool verify_sketch(const std::string& text, const plan::Problem& p, const std::string* rules_code, support::DiagSink& diags,
                   bool backward = false);

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
// the built library, in the sandbox of untrusted_process (the library's host code is the LLM's).
NumericsCheck gpu_numerics(const std::string& python);

// How a process that loads LLM-written host code runs: in the sandbox of support::run_process with
// `scratch` as its only writable folder (and its HOME, TMPDIR, caches), a time limit, a 1 GiB file
// size limit, no core dumps, no network; forbid_exec: no exec or fork after start. Refuses to run
// where no file-write restriction is available (ProcessResult::error says why).
support::ProcessOptions untrusted_process(const std::filesystem::path& scratch, double timeout_s, bool forbid_exec);

// The GPU step of `qattn generate` (python -m qattn.verify / qattn.timing ARTIFACTS) for a kernel whose
// CUDA the LLM wrote: in untrusted_process's sandbox with the artifacts folder as scratch (HOME and
// caches in a .sandbox-home folder there, removed after); the protections applied go to stderr.
support::ProcessResult run_sandboxed_python(const std::string& python, const std::string& module,
                                            const std::filesystem::path& artifacts);

}  // namespace qattn::llm
