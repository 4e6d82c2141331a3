// `qattn tl check|fmt|run`: the TL front end on the command line.
//   check FILE...   parse + check; diagnostics on stderr; exit 1 on any error
//   fmt FILE        print the canonical form (or rewrite with -i; --check only reports)
//   run FILE        check, then interpret against the fp64 reference for --dims
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "support/bounded_io.h"
#include "support/edit_file.h"
#include "support/io.h"
#include "tl/checker.h"
#include "tl/interp.h"
#include "tl/verdict.h"
#include "tl/parser.h"
#include "tl/printer.h"

namespace qattn::cli {
namespace {

// Reads and parses FILE; reports into diags. Returns nullopt when the file cannot be read.
std::optional<tl::Program> load(const std::string& file, support::DiagSink& diags) {
  auto text = support::read_file_capped(file, support::kMaxTlBytes, "a TL program", diags);
  if (!text) return std::nullopt;
  return tl::parse(*text, diags, file);
}

int cmd_check(const std::vector<std::string>& files) {
  int rc = kOk;
  for (const auto& f : files) {
    support::DiagSink diags(f);
    auto prog = load(f, diags);
    if (prog && !diags.has_errors()) tl::check(*prog, diags);
    print_diags(diags);
    if (diags.has_errors()) {
      std::cerr << f << ": " << diags.error_count() << " error(s)\n";
      rc = kFailed;
    } else {
      std::cout << f << ": ok\n";
    }
  }
  return rc;
}

int cmd_fmt(const std::string& file, bool in_place, bool check_only) {
  support::DiagSink diags(file);
  // -i edits regular files only (through symlinks): refused before anything is read, so a FIFO or
  // a device is neither read nor replaced.
  if (in_place && !check_only && !support::editable_file(file, diags)) {
    print_diags(diags);
    return kFailed;
  }
  auto prog = load(file, diags);
  if (!prog || diags.has_errors()) {
    print_diags(diags);
    std::cerr << file << ": not formatted (fix the syntax errors first)\n";
    return kFailed;
  }
  std::string out = tl::print(*prog);
  if (check_only) {
    support::DiagSink d2(file);
    auto original = support::read_file_capped(file, support::kMaxTlBytes, "a TL program", d2);
    if (original && *original == out) return kOk;
    std::cerr << file << ": not in canonical form (run `qattn tl fmt -i " << file << "`)\n";
    return kFailed;
  }
  if (in_place) {
    if (!support::rewrite_file(file, out, diags)) {
      print_diags(diags);
      return kFailed;
    }
    return kOk;
  }
  std::cout << out;
  return kOk;
}

struct RunArgs {
  std::string file;
  std::string dims;
  std::string precision = "storage";
  uint64_t seed = 1;
  double scale = 0;
  std::string window;          // "L,R" (-1: unbounded): the builtins window_left / window_right
  std::optional<double> softcap;
  int64_t max_memory_mib = tl::kDefaultMemoryBudget >> 20;
};

int cmd_run(const RunArgs& a) {
  support::DiagSink diags(a.file);
  auto prog = load(a.file, diags);
  if (prog && !diags.has_errors()) tl::check(*prog, diags);
  if (!prog || diags.has_errors()) {
    print_diags(diags);
    std::cerr << a.file << ": not run: the program does not pass the checker\n";
    return kFailed;
  }
  tl::RunConfig cfg;
  auto dims = parse_dims(a.dims, diags);
  if (!dims) {
    print_diags(diags);
    return kUsage;
  }
  cfg.dims = *dims;
  cfg.seed = a.seed;
  if (a.max_memory_mib < 1 || a.max_memory_mib > (int64_t(1) << 30)) {
    std::cerr << "error CLI0002: --max-memory " << a.max_memory_mib << " is out of range\n  hint: give MiB between 1 and 2^30\n";
    return kUsage;
  }
  cfg.memory_budget = a.max_memory_mib << 20;
  if (a.scale > 0) cfg.softmax_scale = a.scale;
  if (!a.window.empty()) {
    long long l = 0, r = 0;
    char end = 0;
    if (std::sscanf(a.window.c_str(), "%lld,%lld%c", &l, &r, &end) != 2 || l < -1 || r < -1 || l > (1ll << 30) ||
        r > (1ll << 30)) {
      std::cerr << "error CLI0002: --window '" << a.window << "' is not LEFT,RIGHT\n  hint: two integers >= -1 (-1: unbounded), e.g. --window 128,0\n";
      return kUsage;
    }
    cfg.window_left = l;
    cfg.window_right = r;
  }
  cfg.softcap = a.softcap;
  if (a.precision == "fp64") {
    cfg.precision = tl::Precision::FP64;
  } else if (a.precision == "storage") {
    cfg.precision = tl::Precision::Storage;
  } else {
    std::cerr << "error CLI0002: unknown --precision '" << a.precision << "'\n  hint: use fp64 or storage\n";
    return kUsage;
  }
  auto r = tl::run(*prog, cfg, diags);
  tl::require_finite(r, cfg.precision, diags);
  print_diags(diags);
  if (!r.ran) {
    std::cerr << a.file << ": the interpreter stopped (see the diagnostics above)\n";
    return kFailed;
  }
  std::cout << r.summary << (r.summary.empty() || r.summary.back() == '\n' ? "" : "\n");
  std::cout << (r.passed ? "PASS" : "FAIL") << "  max_abs_err=" << std::setprecision(3) << std::scientific
            << r.max_abs_err << "  rel_err=" << r.rel_err << "  tolerance=" << r.tolerance << "\n";
  return r.passed ? kOk : kFailed;
}

}  // namespace

void register_tl_commands(CLI::App& app) {
  auto* tl = app.add_subcommand("tl", "TL front end: check, format and interpret TL programs");
  tl->require_subcommand(1);

  auto* check = tl->add_subcommand("check", "parse and verify TL files");
  static std::vector<std::string> check_files;
  check->add_option("files", check_files, "TL files")->required();
  check->callback([] { exit_status() = cmd_check(check_files); });

  auto* fmt = tl->add_subcommand("fmt", "print a TL file in canonical form");
  static std::string fmt_file;
  static bool fmt_in_place = false, fmt_check = false;
  fmt->add_option("file", fmt_file, "TL file")->required();
  fmt->add_flag("-i,--in-place", fmt_in_place, "rewrite the file");
  fmt->add_flag("--check", fmt_check, "only report whether the file is canonical (exit 1 if not)");
  fmt->callback([] { exit_status() = cmd_fmt(fmt_file, fmt_in_place, fmt_check); });

  auto* run = tl->add_subcommand("run", "check, then interpret a TL program against the fp64 reference");
  static RunArgs run_args;
  run->add_option("file", run_args.file, "TL file")->required();
  run->add_option("--dims", run_args.dims, "problem dimensions, e.g. batch=2,heads_q=4,heads_kv=2,seqlen_q=100,seqlen_k=130,d=64");
  run->add_option("--precision", run_args.precision, "fp64 (no rounding) or storage (round to each buffer's dtype)")
      ->capture_default_str();
  run->add_option("--seed", run_args.seed, "seed of the random inputs")->capture_default_str();
  run->add_option("--scale", run_args.scale, "softmax scale (default 1/sqrt(head dim))");
  run->add_option("--window", run_args.window,
                  "the builtins window_left,window_right (-1: unbounded; default " + std::to_string(tl::kDefaultWindowLeft) +
                      "," + std::to_string(tl::kDefaultWindowRight) + ")");
  run->add_option("--softcap", run_args.softcap, "the builtin softcap (default 30)");
  run->add_option("--max-memory", run_args.max_memory_mib, "the interpreter's memory budget in MiB (TL0906 above it)")
      ->capture_default_str();
  run->callback([] { exit_status() = cmd_run(run_args); });
}

}  // namespace qattn::cli
