// `qattn sketch` and `qattn plan`: stage 1 on the built-in rules.
//   sketch  spec -> sketch.tl
//   plan    spec + GPU -> sketch.tl, code.tl, plan.md, spec.json (checked, refined, interpreted)
// Output folders are written all-or-nothing: a request that fails leaves no files behind.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "hw/gpu.h"
#include "hw/target.h"
#include "plan/plan.h"
#include "plan/rules.h"
#include "plan/sketch.h"
#include "support/artifact_dir.h"
#include "support/io.h"

namespace qattn::cli {
namespace {

struct PlanArgs {
  SpecArgs spec;
  std::string out;
  std::string tiles;
  bool candidates = false;
  bool no_verify = false;
  bool rules = false;
  bool print = false;
  bool backward = false;
  std::string bwd_form;
  bool combine = false;
};

// The target: --gpu (or the spec's "gpu"), else the local GPU, else an error that says what to do.
const hw::GpuFacts* resolve_gpu(const spec::AttentionSpec& s, support::DiagSink& diags) {
  std::string note;
  const hw::GpuFacts* g = hw::resolve_target(s, diags, &note);
  if (g && !note.empty()) std::cerr << "target: " << g->name << " (" << note << ")\n";
  return g;
}

std::string default_out(const spec::AttentionSpec& s, const hw::GpuFacts& g) {
  // The GPU as the user named it ("h100"), else the architecture of the detected one ("sm90").
  std::string gpu = s.gpu.empty() ? g.arch : spec::name_key(s.gpu);
  return "artifacts/" + (s.name.empty() ? std::string("spec") : spec::safe_name(s.name)) + "-" + gpu;
}

std::optional<spec::AttentionSpec> load_spec(const SpecArgs& a, support::DiagSink& diags) {
  return spec::spec_from_cli(a.preset, a.spec_file, a.given(), diags);
}

int cmd_sketch(const PlanArgs& a) {
  support::DiagSink diags;
  auto s = load_spec(a.spec, diags);
  const hw::GpuFacts* g = s ? resolve_gpu(*s, diags) : nullptr;
  if (!s || !g) {
    print_diags(diags);
    return kFailed;
  }
  if (!a.out.empty() && !support::check_out_folder(a.out, diags)) {  // before any work, as generate does
    print_diags(diags);
    return kFailed;
  }
  auto text = plan::sketch_text(plan::make_problem(*s), plan::make_target(*g));
  if (a.out.empty()) {
    std::cout << text;
    return kOk;
  }
  support::ArtifactDir files;  // the folder written whole (support/artifact_dir.h)
  files.stage("spec.json", spec::to_json(*s));
  files.stage("sketch.tl", text);
  if (!files.commit(a.out, diags)) {
    print_diags(diags);
    return kFailed;
  }
  std::cout << "wrote " << a.out << "/sketch.tl\n";
  return kOk;
}

bool parse_tiles(const std::string& text, plan::PlanOptions& o, support::DiagSink& diags) {
  int v[4] = {0, 0, 0, 0};
  int n = std::sscanf(text.c_str(), "%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3]);
  if (n < 2 || v[0] <= 0 || v[1] <= 0 || v[2] < 0 || v[3] < 0) {
    diags.error("CLI0003", {}, "malformed --tiles '" + text + "'", "write BM,BN[,WARPS[,STAGES]], e.g. --tiles 128,64,4,2");
    return false;
  }
  o.bm = v[0], o.bn = v[1], o.warps = n > 2 ? v[2] : 0, o.stages = n > 3 ? v[3] : 0;
  return true;
}

int cmd_plan(const PlanArgs& a) {
  if (a.rules) {
    std::cout << plan::rules_markdown();
    return kOk;
  }
  support::DiagSink diags;
  auto s = load_spec(a.spec, diags);
  const hw::GpuFacts* g = s ? resolve_gpu(*s, diags) : nullptr;
  plan::PlanOptions opts;
  opts.backward = a.backward;
  opts.combine = a.combine;
  if (!a.bwd_form.empty()) {
    if (a.bwd_form != "natural" && a.bwd_form != "transposed" && a.bwd_form != "natural-mma") {
      diags.error("CLI0005", {}, "--bwd-form '" + a.bwd_form + "' is not a backward form",
                  "write --bwd-form natural, transposed or natural-mma");
      print_diags(diags);
      return kFailed;
    }
    if (!a.backward) {
      diags.error("CLI0005", {}, "--bwd-form is an option of the backward pass", "add --backward");
      print_diags(diags);
      return kFailed;
    }
    opts.bwd_form = a.bwd_form == "natural" ? 1 : a.bwd_form == "transposed" ? 2 : 3;
  }
  if (a.backward && a.combine) {
    diags.error("CLI0005", {}, "--backward and --combine name two different kernels", "plan one of them per call");
    print_diags(diags);
    return kFailed;
  }
  if (!s || !g || (!a.tiles.empty() && !parse_tiles(a.tiles, opts, diags))) {
    print_diags(diags);
    return kFailed;
  }
  // --out is checked before any stage runs (a refused folder costs no planning), as generate does
  const std::string out = a.out.empty() ? default_out(*s, *g) : a.out;
  if (!a.print && !support::check_out_folder(out, diags)) {
    print_diags(diags);
    return kFailed;
  }
  std::cerr << "[1/3] stage 1a+1b: " << spec::summary(*s) << " on " << g->name << "\n";
  auto p = plan::make_plan(*s, *g, diags, opts);
  if (!p) {
    print_diags(diags);
    std::cerr << "no plan: nothing written\n";
    return kFailed;
  }
  std::cerr << "      tiles BM=" << p->tiles.bm << " BN=" << p->tiles.bn << " warps=" << p->tiles.warps
            << " stages=" << p->tiles.stages << " (" << p->tiles.reason << ")\n";
  std::cerr << "[2/3] TL code parsed, checked and refines the sketch\n";
  if (a.candidates) std::cout << p->report;
  std::string verdict = "not interpreted (--no-verify)";
  if (!a.no_verify) {
    auto v = plan::verify(*p, diags);
    std::ostringstream os;
    os << std::scientific << std::setprecision(2) << "interpreter fp64 rel_err=" << v.fp64.rel_err
       << ", storage max_abs_err=" << v.storage.max_abs_err << " (tolerance " << v.storage.tolerance << ") at "
       << v.sizes();
    verdict = os.str();
    std::cerr << "[3/3] " << verdict << (v.passed() ? ": PASS" : ": FAIL") << "\n";
    if (!v.passed()) {
      print_diags(diags);
      std::cerr << "the TL code does not match the reference: nothing written\n";
      return kFailed;
    }
  }
  if (a.print) {
    std::cout << p->code;
    return kOk;
  }
  support::ArtifactDir files;  // the folder written whole (support/artifact_dir.h)
  files.stage("spec.json", spec::to_json(*s));
  files.stage("sketch.tl", p->sketch);
  files.stage("code.tl", p->code);
  files.stage("plan.md", p->report + "\nVerification: " + verdict + "\n");
  if (!files.commit(out, diags)) {
    print_diags(diags);
    return kFailed;
  }
  std::cout << "wrote " << out << "/{spec.json,sketch.tl,code.tl,plan.md}\n";
  return kOk;
}

}  // namespace

void register_plan_commands(CLI::App& app) {
  static PlanArgs sk, pl;
  auto* sketch = app.add_subcommand("sketch", "stage 1a: write the TL sketch of a spec (rules engine)");
  add_spec_options(sketch, sk.spec);
  sketch->add_option("--out", sk.out, "folder for spec.json and sketch.tl (default: print)");
  sketch->callback([] { exit_status() = cmd_sketch(sk); });

  auto* plan = app.add_subcommand("plan", "stages 1a+1b: sketch and TL code for a spec on a GPU, verified");
  add_spec_options(plan, pl.spec);
  plan->add_option("--out", pl.out, "output folder (default artifacts/<name>-<gpu>)");
  plan->add_option("--tiles", pl.tiles, "override the rules table: BM,BN[,WARPS[,STAGES]]");
  plan->add_flag("--candidates", pl.candidates, "print the decision and every feasible tile configuration");
  plan->add_flag("--no-verify", pl.no_verify, "skip interpreting the TL code against the reference");
  plan->add_flag("--rules", pl.rules, "print the tile rules tables and exit");
  plan->add_flag("--print", pl.print, "print code.tl instead of writing files");
  plan->add_flag("--backward", pl.backward, "the backward pass: TL code of dQ, dK, dV (docs/tl.md, \"The backward pass\")");
  plan->add_option("--bwd-form", pl.bwd_form,
                   "the backward's GEMM orientation: natural (S = Q K^T; on wgmma at d256 on sm90), transposed (S^T = K Q^T; the "
                   "sm90 default at d64 / d128, every GEMM a wgmma) or natural-mma (the natural form on mma.sync's layouts)");
  plan->add_flag("--combine", pl.combine,
                 "the combine step of a split over the keys: TL code that merges partial results by their LSE (docs/tl.md, "
                 "\"Combining partial results\")");
  plan->callback([] { exit_status() = cmd_plan(pl); });
}

}  // namespace qattn::cli
