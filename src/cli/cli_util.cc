#include "cli/cli_util.h"

#include <CLI/CLI.hpp>
#include <charconv>

#include "spec/spec.h"

namespace qattn::cli {

int& exit_status() {
  static int status = kOk;
  return status;
}

std::optional<std::map<std::string, int64_t>> parse_dims(const std::string& text, support::DiagSink& diags) {
  std::map<std::string, int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    int64_t value = 0;
    const char* first = item.data() + (eq == std::string::npos ? 0 : eq + 1);
    const char* last = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(first, last, value);
    if (eq == std::string::npos || eq == 0 || ec != std::errc() || ptr != last) {
      diags.error("CLI0001", {}, "malformed dimension '" + item + "' in --dims",
                  "write name=integer pairs separated by commas, e.g. --dims batch=2,seqlen_q=100,d=64");
      return std::nullopt;
    }
    out[item.substr(0, eq)] = value;
  }
  return out;
}

std::map<std::string, std::string> SpecArgs::given() const {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : values) {
    auto o = options.find(k);
    // A boolean flag given without a value (`--alibi`) passes "" (true); score/mask-mod "" clears.
    if (!v.empty() || (o != options.end() && o->second && o->second->count() > 0)) out[k] = v;
  }
  return out;
}

void add_spec_options(CLI::App* cmd, SpecArgs& args) {
  cmd->add_option("--preset", args.preset, "a named preset (see `qattn presets`)");
  cmd->add_option("--spec", args.spec_file, "an AttentionSpec JSON file (docs/spec.md)");
  for (const auto& name : spec::flag_names()) {
    args.values[name];  // create the slot; std::map nodes are stable
    CLI::Option* o = cmd->add_option("--" + name, args.values[name], "override the spec's " + name + " (docs/spec.md)");
    if (spec::flag_is_boolean(name)) o->expected(0, 1);
    args.options[name] = o;
  }
}

}  // namespace qattn::cli
