// The whole qattn pipeline as one library function: an attention spec in, a verified kernel out.
//
//   spec -> plan (stage 1a+1b: TL sketch, TL code; rules engine or LLM) -> TL interpreted against the
//   reference -> TL -> kernel IR -> CUDA (stage 2) -> nvcc (shared library with the C ABI) ->
//   artifacts folder -> on a local GPU of the target's architecture: numerics and timing
//
// The stages are listed in order in generate.cc. `qattn generate` (src/cli/cli_generate.cc) is this
// function plus argument parsing; the Python package runs that command. Nothing here runs from the
// source tree's tests/: the GPU step runs the package's modules qattn.verify and qattn.timing.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "llm/client.h"
#include "spec/spec.h"
#include "support/diag.h"

namespace qattn::pipeline {

struct Options {
  std::string mode = "rules";     // who does stages 1a/1b/2: rules, llm, llm+rules, 1a=..,1b=..,2=.., vanilla
  llm::EndpointFlags llm;         // the endpoint of the LLM modes (docs/llm.md)
  int llm_turns = 3;              // LLM answers per stage, repairs included
  std::filesystem::path out;      // artifacts folder ("": artifacts/<name>-<gpu>)
  bool use_cache = true;          // the kernel cache of the build driver
  bool use_gpu = true;            // false: stop after compiling even with a GPU present
  bool verify_on_gpu = true;      // false: build native code for the local GPU, skip numerics and timing
  std::string python;             // the interpreter of the GPU step ("": $PYTHON, else python3)
  bool combine = false;           // the combine step (plan::PlanOptions::combine): a qattn_combine library
  bool backward = false;          // the backward pass (plan::PlanOptions::backward): a qattn_bwd library
  std::function<void(const std::string&)> progress;  // one line per step (the CLI prints them to stderr)
};

// How far the pipeline went.
enum class Reached {
  Written,   // artifacts written, nothing ran on a GPU (no toolchain: no library; no GPU, --no-gpu,
             // --no-verify or an older GPU: the library, not run)
  Verified,  // the GPU step ran and passed (numerics and timing)
};

struct Result {
  Reached reached = Reached::Written;
  std::filesystem::path out;          // the artifacts folder
  std::vector<std::string> files;     // what it holds, relative to out
  bool built = false;                 // libqattn_kernel.so is there (false: no CUDA toolchain)
  std::string stopped;                // why it stopped before the GPU step ("" when it ran)
  bool gpu_failed = false;            // the GPU step ran and failed (GEN0401 in the diagnostics)
  bool unverified = false;            // no GPU numerics check ran on the kernel (the LLM wrote the
                                      // CUDA without a GPU, or qattn.verify has no reference for it):
                                      // compiled but unverified (`qattn generate` exits 3)
  std::string unverified_why;         // why, when it is not the LLM's CUDA
};

// Runs the pipeline for `s`. nullopt: a stage failed, diagnostics in `diags`, nothing written.
// Otherwise the artifacts folder is written (all or nothing; without a CUDA toolchain the sources
// only) and the result says how far it went.
std::optional<Result> generate(const spec::AttentionSpec& s, const Options& o, support::DiagSink& diags);

}  // namespace qattn::pipeline
