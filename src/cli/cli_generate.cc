// `qattn generate`: the whole pipeline for one spec on one GPU.
//   [1/4] stage 1 (rules): sketch + TL code, checked and interpreted against the reference
//   [2/4] stage 2: TL code -> CUDA C++ on CuTe
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
};

int cmd_generate(const GenerateArgs& a) {
  support::DiagSink diags;
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
  auto v = plan::verify(*plan, diags);
  std::cerr << "      tiles BM=" << plan->tiles.bm << " BN=" << plan->tiles.bn << " warps=" << plan->tiles.warps
            << " stages=" << plan->tiles.stages << "; TL interpreted: " << (v.passed() ? "PASS" : "FAIL") << "\n";
  if (!v.passed()) {
    print_diags(diags);
    std::cerr << "the TL code does not match the reference: nothing written\n";
    return kFailed;
  }
  std::cerr << "[2/4] translate TL code -> CUDA C++ on CuTe (sm" << plan->target.sm << ")\n";
  auto tr = backend::translate_text(plan->code, plan->target, diags, "code.tl");
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
  files.stage(out / "sketch.tl", plan->sketch);
  files.stage(out / "code.tl", plan->code);
  files.stage(out / "plan.md", plan->report);
  files.stage(out / "kernel.cu", tr->cuda_source);

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
  std::string why;
  auto local = a.no_gpu ? std::nullopt : hw::detect_local_gpu(&why);
  if (a.no_gpu) why = "--no-gpu";
  const int local_sm = local ? local->cc_major * 10 + local->cc_minor : 0;
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
  std::cout << "wrote " << out.string() << "/{spec.json,sketch.tl,code.tl,plan.md,kernel.cu,libqattn_kernel.so,build.log}\n";

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
  gen->callback([] { exit_status() = cmd_generate(ga); });
}

}  // namespace qattn::cli
