// Subcommand registration: each src/cli/cli_<area>.cc adds its commands to the app.
#pragma once
namespace CLI {
class App;
}

namespace qattn::cli {
void register_tl_commands(CLI::App& app);    // qattn tl check|fmt|run      (cli_tl.cc)
void register_plan_commands(CLI::App& app);  // qattn sketch|plan            (cli_plan.cc)
void register_spec_commands(CLI::App& app);  // qattn presets|spec show|gpus (cli_spec.cc)
void register_generate_commands(CLI::App& app);  // qattn generate     (cli_generate.cc)
}  // namespace qattn::cli
