// The pipeline (see generate.h), stage by stage:
//   1. target     the spec's GPU (or the local one), its facts (hw/target.h)
//   2. plan       stage 1a + 1b on the rules engine (plan::make_plan), or by an LLM (llm::run), which
//                 is verified and repaired against the same checks
//   3. check      the TL code interpreted against the fp64 reference (plan::verify), on threads of
//                 its own while steps 4 and 5 run: both must pass before anything is written
//   4. translate  stage 2: TL -> kernel IR -> CUDA (backend::translate_text), or the LLM's CUDA
//   5. build      nvcc -> shared library with the C ABI (build::build_library, content-addressed cache)
//   6. write      the artifacts folder, whole: written beside it, renamed into place (OUT01xx)
//   7. GPU        on a local GPU of the target's architecture: python -m qattn.verify (numerics on
//                 fresh random inputs, fp64 reference) and python -m qattn.timing (TFLOPS next to
//                 SDPA's backends)
#include "pipeline/generate.h"

#include <cstdlib>
#include <future>

#include "backend/translate.h"
#include "build/nvcc.h"
#include "hw/gpu.h"
#include "hw/target.h"
#include "llm/pipeline.h"
#include "llm/verify.h"
#include "plan/plan.h"
#include "support/artifact_dir.h"
#include "support/io.h"
#include "support/process.h"

namespace qattn::pipeline {
namespace fs = std::filesystem;

namespace {

std::string python_of(const Options& o) {
  if (!o.python.empty()) return o.python;
  return support::default_python();
}

class Run {
 public:
  Run(const spec::AttentionSpec& s, const Options& o, support::DiagSink& d) : s_(s), o_(o), d_(d) {}

  std::optional<Result> run() {
    if (!target() || !plan()) return std::nullopt;
    // The interpreter checks the TL while it is translated and compiled (the slowest of the three
    // decides the time to a kernel); its verdict is awaited before anything is written.
    support::DiagSink check_diags(d_.file());
    std::string check_line;
    auto checked = std::async(std::launch::async, [&] { return check(check_diags, check_line); });
    auto await_check = [&] {
      const bool ok = checked.get();
      for (const auto& x : check_diags.all()) d_.add(x);
      if (!check_line.empty()) say(check_line);
      if (!ok) fail("the TL code does not match the reference: nothing written");
      return ok;
    };
    if (!translate()) {
      await_check();
      return std::nullopt;
    }
    stage_sources();
    say("[3/4] build");
    if (!toolchain_) toolchain_ = build::find_toolchain(d_);
    if (!toolchain_) {  // the sources are written, and the pipeline stops
      if (!await_check() || !write()) return std::nullopt;
      say("stopped before compiling: wrote " + r_.out.string() + "/{spec.json,sketch.tl,code.tl,plan.md,kernel.cu,kernel.kir}");
      r_.stopped = "no CUDA toolchain";
      return r_;
    }
    const bool built = build();
    if (!await_check() || !built || !write()) return std::nullopt;
    gpu();
    return r_;
  }

 private:
  void say(const std::string& line) const {
    if (o_.progress) o_.progress(line);
  }

  // 1. target
  bool target() {
    modes_ = llm::parse_modes(o_.mode, d_);
    if (modes_ && modes_->any_llm()) endpoint_ = llm::resolve_endpoint(o_.llm, d_);
    if (!modes_ || (modes_->any_llm() && !endpoint_)) return fail("nothing written");
    std::string note;
    g_ = hw::resolve_target(s_, d_, &note);
    if (!g_) return false;
    if (!out_folder()) return fail("nothing written");
    std::string why;
    local_ = o_.use_gpu ? hw::detect_local_gpu(&why) : std::nullopt;
    no_gpu_why_ = o_.use_gpu ? why : "--no-gpu";
    local_sm_ = local_ ? local_->cc_major * 10 + local_->cc_minor : 0;
    return true;
  }

  // 2. plan: the rules engine's, then (LLM modes) the LLM's, verified and repaired
  bool plan() {
    say("[1/4] plan: " + spec::summary(s_) + " on " + g_->name);
    plan::PlanOptions po;
    po.backward = o_.backward;
    po.combine = o_.combine;
    if (o_.backward && o_.combine) {
      d_.error("GEN0106", {}, "--backward and --combine name two different kernels", "generate one of them per call");
      return fail("no plan: nothing written");
    }
    if (o_.combine && modes_->any_llm()) {
      d_.error("GEN0105", {}, "--combine runs on the rules engine only: the LLM stages do not write the combine step yet",
               "drop --mode (the default `rules`)");
      return fail("no plan: nothing written");
    }
    if (o_.backward && modes_->llm_writes_cuda()) {
      d_.error("GEN0105", {}, "--backward with the LLM: it writes the backward TL (stages 1a and 1b), not its CUDA",
               "keep stage 2 on the rules translator: --mode 1a=llm,1b=llm (or 1a=llm+rules,1b=llm+rules)");
      return fail("no plan: nothing written");
    }
    plan_ = plan::make_plan(s_, *g_, d_, po);
    if (!plan_) return fail("no plan: nothing written");
    if (!modes_->any_llm()) return true;
    say("      --mode " + modes_->str() + ": " + endpoint_->model + " at " + endpoint_->url);
    llm::Client client(*endpoint_);
    llm::Options lo;
    lo.max_turns = o_.llm_turns;
    lo.progress = [this](const std::string& line) { say("      " + line); };
    if (modes_->llm_writes_cuda()) {
      toolchain_ = build::find_toolchain(d_);
      if (!toolchain_) return fail("the LLM's CUDA cannot be compiled here: nothing written");
      lo.cuda.toolchain = &*toolchain_;
      lo.cuda.build.use_cache = o_.use_cache;
      if (local_ && local_sm_ > plan_->target.sm) lo.cuda.build.also_sm = local_sm_;  // as the build below
      if (local_ && local_sm_ >= plan_->target.sm && o_.verify_on_gpu) lo.cuda.numerics = llm::gpu_numerics(python_of(o_));
    }
    by_llm_ = llm::run(s_, *g_, *plan_, *modes_, client, lo, d_);
    say(by_llm_->summary_md);
    if (!by_llm_->ok) return fail("the LLM stages failed: nothing written");
    r_.unverified = by_llm_->unverified;  // the LLM's CUDA without a numerics check: never "succeeded"
    plan_ = by_llm_->plan;
    vanilla_ = by_llm_->vanilla;
    return true;
  }

  // 3. check: the TL code against the reference (the vanilla baseline has no TL). Runs beside
  // translate and build: reports into its own sink and returns its progress line.
  bool check(support::DiagSink& diags, std::string& line) const {
    if (vanilla_) {
      line = "      vanilla baseline: no TL, the LLM wrote the CUDA directly";
      return true;
    }
    const auto v = plan::verify(*plan_, diags);
    line = "      tiles BM=" + std::to_string(plan_->tiles.bm) + " BN=" + std::to_string(plan_->tiles.bn) +
           " warps=" + std::to_string(plan_->tiles.warps) + " stages=" + std::to_string(plan_->tiles.stages) +
           "; TL interpreted: " + (v.passed() ? "PASS" : "FAIL") + " at " + v.sizes();
    return v.passed();
  }

  // 4. translate: TL -> kernel IR -> CUDA, unless the LLM wrote (and compiled) the CUDA
  bool translate() {
    if (by_llm_ && by_llm_->translation) {
      say(std::string("[2/4] CUDA written by the LLM (") + (vanilla_ ? "vanilla" : "stage 2") + "), compiled above");
      tr_ = by_llm_->translation;
    } else {
      say("[2/4] translate TL code -> kernel IR -> CUDA C++ (sm" + std::to_string(plan_->target.sm) +
          (plan_->target.sm >= 90 ? ": qattn's Hopper primitives)" : ": CuTe)"));
      tr_ = backend::translate_text(plan_->code, plan_->target, d_, "code.tl");
    }
    if (!tr_) return fail("translation failed: nothing written");
    return true;
  }

  // The artifacts folder (--out, else artifacts/<name>-<gpu>), checked before any work: a system
  // folder or one holding files qattn did not write is refused (OUT0101-OUT0103, artifact_dir.h).
  bool out_folder() {
    r_.out = !o_.out.empty() ? o_.out
                             : fs::path("artifacts") / (s_.name.empty() ? std::string("spec")
                                                                       : spec::safe_name(s_.name) + "-" +
                                                                             (s_.gpu.empty() ? g_->arch : spec::name_key(s_.gpu)));
    return support::check_out_folder(r_.out, d_);
  }

  void stage(const std::string& name, const std::string& text) {
    files_.stage(name, text);
    r_.files.push_back(name);
  }
  void stage_sources() {
    stage("spec.json", spec::to_json(s_));
    if (!vanilla_) {
      stage("sketch.tl", plan_->sketch);
      stage("code.tl", plan_->code);
      stage("plan.md", plan_->report);
    }
    stage("kernel.cu", tr_->cuda_source);
    if (!tr_->kir.empty()) stage("kernel.kir", tr_->kir);  // the kernel IR the CUDA was emitted from
    if (by_llm_)
      for (const auto& [name, text] : by_llm_->files) stage(name, text);
  }

  // 5. build
  bool build() {
    build::BuildOptions bo;
    bo.use_cache = o_.use_cache;
    // An older architecture's kernel on a newer local GPU (the sm80 path on an H100): also build
    // native code for the local GPU so it runs without JIT.
    if (local_ && local_sm_ > plan_->target.sm) bo.also_sm = local_sm_;
    bo.progress = [this](const std::string& line) { say("      " + line); };
    auto built = build::build_library(*tr_, *toolchain_, d_, bo);
    if (!built) return fail("build failed: nothing written");
    auto so = support::read_file(built->library, d_);
    if (!so) return false;
    stage("libqattn_kernel.so", *so);
    stage("build.log", built->log);
    r_.built = true;
    return true;
  }

  // 6. write the artifacts folder whole: a temporary sibling renamed into place (no stale files)
  bool write() { return files_.commit(r_.out, d_); }

  // 7. on a local GPU of the target's architecture: numerics, then timing (the package's modules)
  void gpu() {
    if (!local_) return stop("[4/4] no GPU (" + no_gpu_why_ + "): stopped after compiling", "no GPU");
    if (!o_.verify_on_gpu) return stop("[4/4] --no-verify: built for " + local_->name + ", not verified or timed", "--no-verify");
    if (local_sm_ < plan_->target.sm)
      return stop("[4/4] the local GPU (" + local_->name + ") is older than the target sm" + std::to_string(plan_->target.sm) +
                      ": stopped after compiling",
                  "an older local GPU");
    const std::string py = python_of(o_);
    for (const char* module : {"qattn.verify", "qattn.timing"}) {
      say(std::string("[4/4] ") + (std::string(module) == "qattn.verify" ? "verify" : "time") + " on " + local_->name + ": " + py +
          " -m " + module + " " + r_.out.string());
      // CUDA written by the LLM: its host code runs in the sandbox, writing only in the artifacts folder
      const auto p = by_llm_ && by_llm_->translation
                         ? llm::run_sandboxed_python(py, module, r_.out)
                         : support::run_process({py, "-m", module, r_.out.string()}, {support::python_path_env()});
      if (p.started && p.status == 3 && std::string(module) == "qattn.verify") {
        // no reference for this kernel (custom score_mod / mask_mod): built and interpreted, not GPU-verified
        r_.unverified = true;
        r_.unverified_why = "qattn.verify has no GPU reference for custom score_mod / mask_mod expressions (the TL "
                            "interpreter checked the program against them)";
        return stop("[4/4] not verified on " + local_->name + ": " + r_.unverified_why, "no GPU reference");
      }
      if (!p.started || p.status != 0) {
        d_.error("GEN0401", {}, std::string(module) + (p.started ? " failed (exit status " + std::to_string(p.status) + ")" : ": " + p.error),
                 std::string(module) == "qattn.verify"
                     ? "the kernel's results differ from the fp64 reference on this GPU (the table above); the artifacts are in " +
                           r_.out.string()
                     : "the timing step needs torch with CUDA and triton (" + py + " -m " + module + " " + r_.out.string() + ")");
        r_.gpu_failed = true;
        return;
      }
    }
    r_.reached = Reached::Verified;
  }

  bool fail(const std::string& note) {
    say(note);
    return false;
  }
  void stop(const std::string& line, const std::string& why) {
    say(line);
    r_.stopped = why;
  }

  const spec::AttentionSpec& s_;
  const Options& o_;
  support::DiagSink& d_;
  std::optional<llm::Modes> modes_;
  std::optional<llm::Endpoint> endpoint_;
  const hw::GpuFacts* g_ = nullptr;
  std::optional<hw::DetectedGpu> local_;
  std::string no_gpu_why_;
  int local_sm_ = 0;
  std::optional<plan::Plan> plan_;
  std::optional<llm::Result> by_llm_;
  std::optional<build::Toolchain> toolchain_;
  bool vanilla_ = false;
  std::optional<backend::Translation> tr_;
  support::ArtifactDir files_;
  Result r_;
};

}  // namespace

std::optional<Result> generate(const spec::AttentionSpec& s, const Options& o, support::DiagSink& diags) {
  return Run(s, o, diags).run();
}

}  // namespace qattn::pipeline
