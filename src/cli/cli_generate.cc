// `qattn generate`: the whole pipeline for one spec on one GPU.
//   [1/4] stage 1 (rules): sketch + TL code, checked and interpreted against the reference
//   [2/4] stage 2: TL code -> CUDA C++ on CuTe
//   (--mode llm|llm+rules|1a=..,1b=..,2=..|vanilla: stages 1a/1b/2 by an LLM, verified and repaired
//    in src/llm (llm::run); the transcript and summary go to <out>/llm/)
//   [3/4] nvcc -> shared library with the C ABI (content-addressed cache)
//   [4/4] on a GPU of the target's architecture: numerics and TFLOPS (tests/gpu/verify.py)
// The artifacts folder (spec.json, sketch.tl, code.tl, plan.md, kernel.cu, libqattn_kernel.so,
// build.log) is written all-or-nothing once the last step that can run has succeeded.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "backend/translate.h"
#include "build/nvcc.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "hw/gpu.h"
#include "hw/target.h"
#include "llm/pipeline.h"
#include "plan/plan.h"
#include "support/io.h"

namespace qattn::cli {
namespace {
namespace fs = std::filesystem;

struct GenerateArgs {
  SpecArgs spec;
  std::string out;
  bool no_cache = false;
  bool no_gpu = false;
  bool no_verify = false;
  std::string mode = "rules";
  llm::EndpointFlags llm;
  int llm_turns = 3;
};

int cmd_generate(const GenerateArgs& a) {
  support::DiagSink diags;
  auto modes = llm::parse_modes(a.mode, diags);
  std::optional<llm::Endpoint> endpoint;
  if (modes && modes->any_llm()) endpoint = llm::resolve_endpoint(a.llm, diags);
  if (!modes || (modes->any_llm() && !endpoint)) {
    print_diags(diags);
    std::cerr << "nothing written\n";
    return kFailed;
  }
  auto s = spec::spec_from_cli(a.spec.preset, a.spec.spec_file, a.spec.given(), diags);
  std::string note;
  const hw::GpuFacts* g = s ? hw::resolve_target(*s, diags, &note) : nullptr;
  if (!s || !g) {
    print_diags(diags);
    return kFailed;
  }
  std::cerr << "[1/4] plan: " << spec::summary(*s) << " on " << g->name << "\n";
  auto plan = plan::make_plan(*s, *g, diags);
  if (!plan) {
    print_diags(diags);
    std::cerr << "no plan: nothing written\n";
    return kFailed;
  }
  std::string why;
  auto local = a.no_gpu ? std::nullopt : hw::detect_local_gpu(&why);
  if (a.no_gpu) why = "--no-gpu";
  const int local_sm = local ? local->cc_major * 10 + local->cc_minor : 0;
  std::optional<llm::Result> by_llm;
  if (modes->any_llm()) {
    std::cerr << "      --mode " << modes->str() << ": " << endpoint->model << " at " << endpoint->url << "\n";
    llm::Client client(*endpoint);
    llm::Options lo;
    lo.max_turns = a.llm_turns;
    lo.progress = [](const std::string& line) { std::cerr << "      " << line << "\n"; };
    std::optional<build::Toolchain> ltc;
    if (modes->llm_writes_cuda()) {
      ltc = build::find_toolchain(diags);
      if (!ltc) {
        print_diags(diags);
        std::cerr << "the LLM's CUDA cannot be compiled here: nothing written\n";
        return kFailed;
      }
      lo.cuda.toolchain = &*ltc;
      lo.cuda.build.use_cache = !a.no_cache;
      if (local && local_sm > plan->target.sm) lo.cuda.build.also_sm = local_sm;  // as the build below
      if (local && local_sm >= plan->target.sm && !a.no_verify)
        lo.cuda.numerics = llm::gpu_numerics(std::getenv("PYTHON") ? std::getenv("PYTHON") : "python3");
    }
    by_llm = llm::run(*s, *g, *plan, *modes, client, lo, diags);
    std::cerr << by_llm->summary_md;
    if (!by_llm->ok) {
      print_diags(diags);
      std::cerr << "the LLM stages failed: nothing written\n";
      return kFailed;
    }
    plan = by_llm->plan;
  }
  const bool vanilla = by_llm && by_llm->vanilla;  // the paper's baseline: CUDA straight from the spec, no TL
  auto v = vanilla ? plan::Verification{} : plan::verify(*plan, diags);
  if (vanilla)
    std::cerr << "      vanilla baseline: no TL, the LLM wrote the CUDA directly\n";
  else
    std::cerr << "      tiles BM=" << plan->tiles.bm << " BN=" << plan->tiles.bn << " warps=" << plan->tiles.warps
              << " stages=" << plan->tiles.stages << "; TL interpreted: " << (v.passed() ? "PASS" : "FAIL") << "\n";
  if (!vanilla && !v.passed()) {
    print_diags(diags);
    std::cerr << "the TL code does not match the reference: nothing written\n";
    return kFailed;
  }
  if (by_llm && by_llm->translation)
    std::cerr << "[2/4] CUDA written by the LLM (" << (vanilla ? "vanilla" : "stage 2") << "), compiled above\n";
  else
    std::cerr << "[2/4] translate TL code -> CUDA C++ on CuTe (sm" << plan->target.sm << ")\n";
  auto tr = by_llm && by_llm->translation ? by_llm->translation
                                           : backend::translate_text(plan->code, plan->target, diags, "code.tl");
  if (!tr) {
    print_diags(diags);
    std::cerr << "translation failed: nothing written\n";
    return kFailed;
  }
  fs::path out = a.out.empty() ? fs::path("artifacts") / (s->name.empty() ? std::string("spec") : s->name + "-" +
                                                          (s->gpu.empty() ? g->arch : spec::name_key(s->gpu)))
                               : fs::path(a.out);
  support::ArtifactSet files;
  files.stage(out / "spec.json", spec::to_json(*s));
  if (!vanilla) {
    files.stage(out / "sketch.tl", plan->sketch);
    files.stage(out / "code.tl", plan->code);
    files.stage(out / "plan.md", plan->report);
  }
  files.stage(out / "kernel.cu", tr->cuda_source);
  if (!tr->kir.empty()) files.stage(out / "kernel.kir", tr->kir);  // the kernel IR the CUDA was emitted from
  if (by_llm)
    for (const auto& [name, text] : by_llm->files) files.stage(out / name, text);

  std::cerr << "[3/4] build\n";
  auto tc = build::find_toolchain(diags);
  if (!tc) {
    print_diags(diags);
    if (!files.commit(diags)) return kFailed;
    std::cerr << "stopped before compiling: wrote " << out.string() << "/{spec.json,sketch.tl,code.tl,plan.md,kernel.cu}\n";
    return kFailed;
  }
  build::BuildOptions bo;
  bo.use_cache = !a.no_cache;
  // An older architecture's kernel on a newer local GPU (the sm80 path on an H100): also build
  // native code for the local GPU so it runs without JIT.
  if (local && local_sm > plan->target.sm) bo.also_sm = local_sm;
  bo.progress = [](const std::string& line) { std::cerr << "      " << line << "\n"; };
  auto built = build::build_library(*tr, *tc, diags, bo);
  if (!built) {
    print_diags(diags);
    std::cerr << "build failed: nothing written\n";
    return kFailed;
  }
  support::DiagSink ignore;
  auto so = support::read_file(built->library, diags);
  if (!so) {
    print_diags(diags);
    return kFailed;
  }
  files.stage(out / "libqattn_kernel.so", *so);
  files.stage(out / "build.log", built->log);
  if (!files.commit(diags)) {
    print_diags(diags);
    return kFailed;
  }
  std::cout << "wrote " << out.string()
            << (vanilla ? "/{spec.json,kernel.cu,libqattn_kernel.so,build.log}"
                        : "/{spec.json,sketch.tl,code.tl,plan.md,kernel.cu,libqattn_kernel.so,build.log}")
            << (by_llm ? " and llm/{transcript.jsonl,summary.json,summary.md}" : "") << "\n";

  if (!local) {
    std::cerr << "[4/4] no GPU (" << why << "): stopped after compiling\n";
    return kOk;
  }
  if (a.no_verify) {
    std::cerr << "[4/4] --no-verify: built for " << local->name << ", not verified or timed\n";
    return kOk;
  }
  if (local_sm < plan->target.sm) {
    std::cerr << "[4/4] the local GPU (" << local->name << ") is older than the target sm" << plan->target.sm
              << ": stopped after compiling\n";
    return kOk;
  }
  const fs::path gpu_tests = support::source_dir() / "tests" / "gpu";
  std::string py = std::getenv("PYTHON") ? std::getenv("PYTHON") : "python3";
  std::string verify = py + " '" + (gpu_tests / "verify.py").string() + "' '" + out.string() + "'";
  std::string time = py + " '" + (gpu_tests / "time_kernel.py").string() + "' '" + out.string() + "'";
  std::cerr << "[4/4] verify and time on " << local->name << ": " << verify << "\n";
  int rc = std::system(verify.c_str());
  if (rc == 0) rc = std::system(time.c_str());
  return rc == 0 ? kOk : kFailed;
}

}  // namespace

void register_generate_commands(CLI::App& app) {
  static GenerateArgs ga;
  auto* gen = app.add_subcommand("generate", "spec -> TL -> CUDA -> shared library; verified and timed on a GPU");
  add_spec_options(gen, ga.spec);
  gen->add_option("--out", ga.out, "artifacts folder (default artifacts/<name>-<gpu>)");
  gen->add_flag("--no-cache", ga.no_cache, "rebuild even when the kernel cache has this kernel");
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
