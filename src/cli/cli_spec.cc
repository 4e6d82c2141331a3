// `qattn presets`, `qattn spec show` and `qattn gpus`: the AttentionSpec and GPU facts on the
// command line.
//   presets [--json]                 table of the named presets (or their specs as JSON)
//   spec show --preset N|--spec F    the validated spec as JSON (flags override fields); with a
//             [--dtype ...]          "gpu", also checked against that GPU
//   gpus [NAME] [--json]             table of the GPU facts and the detected local GPU, or one
//                                    GPU's facts
#include <CLI/CLI.hpp>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "hw/gpu.h"
#include "hw/target.h"
#include "spec/spec.h"

namespace qattn::cli {
namespace {

std::string heads_str(const spec::AttentionSpec& s) {
  return std::to_string(s.heads_q) + "/" + std::to_string(s.heads_kv);
}

std::string dims_str(const spec::AttentionSpec& s) {
  return s.head_dim_qk == s.head_dim_v ? std::to_string(s.head_dim_qk)
                                       : std::to_string(s.head_dim_qk) + "/" + std::to_string(s.head_dim_v);
}

int cmd_presets(bool json) {
  if (json) {
    std::cout << "[\n";
    const auto& all = spec::presets();
    for (size_t i = 0; i < all.size(); ++i) {
      std::string t = spec::to_json(all[i].spec);
      t.pop_back();  // trailing newline
      std::cout << t << (i + 1 < all.size() ? ",\n" : "\n");
    }
    std::cout << "]\n";
    return kOk;
  }
  std::cout << std::left << std::setw(25) << "NAME" << std::setw(8) << "KIND" << std::setw(9) << "HEADS"
            << std::setw(9) << "HEAD_DIM" << std::setw(16) << "MASK" << "DESCRIPTION\n";
  for (const auto& p : spec::presets()) {
    const auto& s = p.spec;
    std::cout << std::left << std::setw(25) << s.name << std::setw(8) << spec::variant_name(s) << std::setw(9)
              << heads_str(s) << std::setw(9) << dims_str(s) << std::setw(16) << spec::describe(s.mask)
              << p.description << "\n";
  }
  std::cout << "\nAll presets default to bf16, bshd. Use one with --preset NAME; override fields with flags\n"
               "(--dtype fp16 --window 4096,0 ...); `qattn spec show --preset NAME` prints its JSON.\n";
  return kOk;
}

int cmd_spec_show(const SpecArgs& a) {
  support::DiagSink diags;
  auto s = spec::spec_from_cli(a.preset, a.spec_file, a.given(), diags);
  if (s && !s->gpu.empty()) {
    if (const hw::GpuFacts* g = hw::find_gpu(s->gpu, diags)) hw::validate_for_gpu(*s, *g, diags);
  }
  print_diags(diags);
  if (!s || diags.has_errors()) return kFailed;
  std::cout << spec::to_json(*s);
  std::cerr << spec::summary(*s) << ", softmax scale " << spec::effective_softmax_scale(*s) << "\n";
  return kOk;
}

std::string kb(int64_t bytes) { return std::to_string(bytes / 1024) + "K"; }

std::string tflops(const hw::GpuFacts& g, spec::DType t) {
  double v = g.peak_tflops(t);
  if (v <= 0) return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(0) << v;
  return os.str();
}

std::string features(const hw::GpuFacts& g) {
  std::vector<std::string> v;
  const auto& f = g.features;
  if (f.cp_async) v.push_back("cp.async");
  if (f.tma) v.push_back("tma");
  if (f.wgmma) v.push_back("wgmma");
  if (f.setmaxnreg) v.push_back("setmaxnreg");
  if (f.clusters) v.push_back("clusters");
  return v.empty() ? std::string("-") : spec::join(v, ",");
}

void print_gpu(const hw::GpuFacts& g) {
  std::cout << g.name << " (" << g.arch << ", compute capability " << g.cc_major << "." << g.cc_minor << ")\n";
  if (!g.aliases.empty()) std::cout << "  aliases:        " << spec::join(g.aliases) << "\n";
  std::cout << "  SMs:            " << g.sm_count << ", boost " << g.boost_clock_mhz << " MHz\n"
            << "  shared memory:  " << kb(g.smem_per_sm) << " per SM, " << kb(g.smem_per_block_optin)
            << " per block (opt-in), " << kb(g.smem_per_block_default) << " default\n"
            << "  registers:      " << g.regs_per_sm << " per SM, " << g.regs_per_thread_max << " per thread max\n"
            << "  threads:        " << g.max_threads_per_sm << " per SM, " << g.max_threads_per_block
            << " per block; " << g.max_blocks_per_sm << " blocks per SM\n"
            << "  L2:             " << g.l2_bytes / (1024 * 1024) << " MB\n"
            << "  memory:         " << g.memory_gb << " GB, " << g.memory_bandwidth_gbps << " GB/s\n"
            << "  fp32 (CUDA):    " << g.fp32_tflops << " TFLOPS\n";
  for (const auto& [t, instrs] : g.mma) {
    std::vector<std::string> names;
    for (const auto& m : instrs) names.push_back(m.text);
    std::cout << "  " << std::left << std::setw(16) << (std::string(spec::to_string(t)) + ":") << g.peak_tflops(t)
              << " TFLOPS dense, " << spec::join(names) << "\n";
  }
  std::cout << "  features:       " << features(g) << (g.features.ldmatrix ? ", ldmatrix" : "")
            << (g.features.stmatrix ? ", stmatrix" : "") << "\n"
            << "  nvcc:           " << g.nvcc_gencode << "\n";
  if (!g.notes.empty()) std::cout << "  notes:          " << g.notes << "\n";
}

int cmd_gpus(const std::string& name, bool json) {
  if (json && name.empty()) {
    std::cout << hw::gpus_json();
    return kOk;
  }
  if (!name.empty()) {
    support::DiagSink diags;
    const hw::GpuFacts* g = hw::find_gpu(name, diags);
    if (!g) {
      print_diags(diags);
      return kFailed;
    }
    print_gpu(*g);
    return kOk;
  }
  if (hw::gpus().empty()) {
    support::DiagSink diags;
    hw::find_gpu("?", diags);  // reports why the table failed to load
    print_diags(diags);
    return kFailed;
  }
  std::cout << std::left << std::setw(11) << "NAME" << std::setw(6) << "ARCH" << std::right << std::setw(5)
            << "SMs" << std::setw(8) << "SMEM/SM" << std::setw(9) << "SMEM/BLK" << std::setw(6) << "L2MB"
            << std::setw(7) << "GB/s" << std::setw(6) << "FP16" << std::setw(6) << "BF16" << std::setw(6) << "FP8"
            << "  FEATURES\n";
  for (const auto& g : hw::gpus()) {
    std::cout << std::left << std::setw(11) << g.name << std::setw(6) << g.arch << std::right << std::setw(5)
              << g.sm_count << std::setw(8) << kb(g.smem_per_sm) << std::setw(9) << kb(g.smem_per_block_optin)
              << std::setw(6) << g.l2_bytes / (1024 * 1024) << std::setw(7) << g.memory_bandwidth_gbps
              << std::setw(6) << tflops(g, spec::DType::F16) << std::setw(6) << tflops(g, spec::DType::BF16)
              << std::setw(6) << tflops(g, spec::DType::F8E4M3) << "  " << features(g) << "\n";
  }
  std::cout << "(tensor TFLOPS dense, fp32 accumulate; `qattn gpus NAME` shows one GPU in full)\n\n";
  std::string why;
  auto local = hw::detect_local_gpus(&why);
  if (local.empty()) std::cout << "local GPU: no GPU detected (" << why << ")\n";
  for (const auto& d : local) {
    std::cout << "local GPU " << d.ordinal << ": " << d.name << " (compute capability " << d.cc_major << "."
              << d.cc_minor << ", " << d.sm_count << " SMs, " << kb(d.smem_per_block_optin) << " smem/block, "
              << d.total_mem_bytes / (1024 * 1024 * 1024) << " GB) -> "
              << (d.facts ? d.facts->name + " (matched by " + d.match + ")" : std::string("not in the table"))
              << "\n";
  }
  return kOk;
}

}  // namespace

void register_spec_commands(CLI::App& app) {
  auto* presets = app.add_subcommand("presets", "list the named presets (real model attention shapes)");
  static bool presets_json = false;
  presets->add_flag("--json", presets_json, "print every preset as spec JSON");
  presets->callback([] { exit_status() = cmd_presets(presets_json); });

  auto* spec_cmd = app.add_subcommand("spec", "attention specs (docs/spec.md)");
  spec_cmd->require_subcommand(1);
  auto* show = spec_cmd->add_subcommand("show", "validate a spec (--preset or --spec, plus overrides) and print its JSON");
  static SpecArgs show_args;
  add_spec_options(show, show_args);
  show->callback([] { exit_status() = cmd_spec_show(show_args); });

  auto* gpus = app.add_subcommand("gpus", "list the GPU facts table and the detected local GPU");
  static std::string gpu_name;
  static bool gpus_json = false;
  gpus->add_option("name", gpu_name, "show one GPU in full (name or alias, e.g. h100, sm80)");
  gpus->add_flag("--json", gpus_json, "print the embedded data/gpus.json");
  gpus->callback([] { exit_status() = cmd_gpus(gpu_name, gpus_json); });
}

}  // namespace qattn::cli
