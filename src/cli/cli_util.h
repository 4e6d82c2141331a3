// Small helpers shared by the CLI's subcommands: printing diagnostics, parsing --dims.
#pragma once
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "support/diag.h"

namespace CLI {
class App;
class Option;
}

namespace qattn::cli {

// Exit codes of every subcommand (README.md).
// kUnverified: `generate` compiled CUDA written by an LLM that no GPU numerics check ran on.
enum Exit : int { kOk = 0, kFailed = 1, kUsage = 2, kUnverified = 3 };

// The process exit status, set by the subcommand that ran.
int& exit_status();

inline void print_diags(const support::DiagSink& diags, std::ostream& os = std::cerr) {
  os << diags.render();
}

// "seqlen_q=100,d=64" -> map. Reports CLI0001 on malformed input.
std::optional<std::map<std::string, int64_t>> parse_dims(const std::string& text, support::DiagSink& diags);

// The options that describe an attention request on any subcommand: --preset / --spec FILE plus one
// option per spec::flag_names() entry (--dtype, --mask, --window, --heads, --head-dim, ...).
struct SpecArgs {
  std::string preset;
  std::string spec_file;
  std::map<std::string, std::string> values;  // flag name -> value as typed
  std::map<std::string, const CLI::Option*> options;  // flag name -> its option (boolean flags: no value = true)
  std::map<std::string, std::string> given() const;  // only the flags the user passed
};
void add_spec_options(CLI::App* cmd, SpecArgs& args);

}  // namespace qattn::cli
