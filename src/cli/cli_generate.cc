// `qattn generate`: the whole pipeline for one spec on one GPU: the arguments of
// pipeline::generate (src/pipeline/generate.h, which lists the stages), its progress on stderr.
//   [1/4] stage 1 (rules or an LLM): sketch + TL code, checked and interpreted against the reference
//   [2/4] stage 2: TL code -> kernel IR -> CUDA C++ (CuTe; on Hopper qattn's own PTX primitives)
//   [3/4] nvcc -> shared library with the C ABI (content-addressed cache)
//   [4/4] on a GPU of the target's architecture: numerics and TFLOPS (python -m qattn.verify, qattn.timing)
// The artifacts folder (spec.json, sketch.tl, code.tl, plan.md, kernel.cu, kernel.kir,
// libqattn_kernel.so, build.log; llm/ in the LLM modes) is written all-or-nothing.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "llm/client.h"
#include "pipeline/generate.h"

namespace qattn::cli {
namespace {
namespace fs = std::filesystem;

struct GenerateArgs {
  SpecArgs spec;
  std::string out;
  bool no_cache = false;
  bool no_gpu = false;
  bool no_verify = false;
  bool backward = false;
  bool combine = false;
  std::string mode = "rules";
  llm::EndpointFlags llm;
  int llm_turns = 3;
};

int cmd_generate(const GenerateArgs& a) {
  support::DiagSink diags;
  auto s = spec::spec_from_cli(a.spec.preset, a.spec.spec_file, a.spec.given(), diags);
  if (!s) {
    print_diags(diags);
    return kFailed;
  }
  pipeline::Options o;
  o.mode = a.mode;
  o.llm = a.llm;
  o.llm_turns = a.llm_turns;
  o.out = a.out;
  o.use_cache = !a.no_cache;
  o.use_gpu = !a.no_gpu;
  o.verify_on_gpu = !a.no_verify;
  o.backward = a.backward;
  o.combine = a.combine;
  o.progress = [](const std::string& line) { std::cerr << line << (line.empty() || line.back() != '\n' ? "\n" : ""); };
  const auto r = pipeline::generate(*s, o, diags);
  print_diags(diags);
  if (!r) return kFailed;
  if (!r->built) return kFailed;  // no CUDA toolchain: the sources only
  std::string files;
  for (const auto& f : r->files) files += (files.empty() ? "" : ",") + f;
  std::cout << "wrote " << r->out.string() << "/{" << files << "}\n";
  if (r->gpu_failed) return kFailed;
  if (r->unverified) {  // compiled, nothing checked its numerics on a GPU: never "succeeded"
    std::cerr << "compiled but unverified: "
              << (r->unverified_why.empty() ? "the LLM wrote this kernel's CUDA and no GPU numerics check ran on it"
                                             : r->unverified_why)
              << " (exit " << kUnverified << ")\n";
    return kUnverified;
  }
  return kOk;
}

}  // namespace

void register_generate_commands(CLI::App& app) {
  static GenerateArgs ga;
  auto* gen = app.add_subcommand("generate", "spec -> TL -> CUDA -> shared library; verified and timed on a GPU");
  add_spec_options(gen, ga.spec);
  gen->add_option("--out", ga.out, "artifacts folder (default artifacts/<name>-<gpu>)");
  gen->add_flag("--no-cache", ga.no_cache, "rebuild even when the kernel cache has this kernel");
  gen->add_flag("--backward", ga.backward,
                "the backward pass: a kernel of dQ, dK, dV exporting qattn_bwd (docs/tl.md, \"The backward pass\")");
  gen->add_flag("--combine", ga.combine,
                "the combine step of a split over the keys: a kernel exporting qattn_combine (docs/tl.md, \"Combining partial "
                "results\")");
  gen->add_flag("--no-gpu", ga.no_gpu, "stop after compiling even when a GPU is present");
  gen->add_flag("--no-verify", ga.no_verify,
                "build native code for the local GPU too, but skip the GPU numerics and timing step");
  gen->add_option("--mode", ga.mode,
                  "who does stages 1a (sketch), 1b (parameters), 2 (translation): rules (default), llm, llm+rules "
                  "(LLM, rules engine on failure), per stage 1a=llm,1b=rules,2=llm; or vanilla (the LLM writes the "
                  "CUDA directly). The LLM modes need an endpoint (docs/llm.md)");
  gen->add_option("--llm-url", ga.llm.url, "OpenAI-compatible base URL (default $QATTN_LLM_URL), e.g. https://api.deepseek.com/v1");
  gen->add_option("--llm-model", ga.llm.model, "model name (default $QATTN_LLM_MODEL), e.g. deepseek-chat");
  gen->add_option("--llm-key-env", ga.llm.key_env,
                  "NAME of the environment variable holding the API key (default QATTN_LLM_API_KEY)");
  gen->add_option("--llm-timeout", ga.llm.timeout_s, "seconds per request (default 300)");
  gen->add_option("--llm-retries", ga.llm.retries, "retries after 429, 5xx and timeouts (default 4)");
  gen->add_option("--llm-backoff", ga.llm.backoff_s, "seconds before the first retry, doubled each time (default 2)");
  gen->add_option("--llm-max-tokens", ga.llm.max_tokens, "max_tokens of each request (default 8192)");
  gen->add_option("--llm-turns", ga.llm_turns, "LLM answers per stage, repairs included (default 3)")
      ->check(CLI::Range(1, 20));
  gen->callback([] { exit_status() = cmd_generate(ga); });
}

}  // namespace qattn::cli
