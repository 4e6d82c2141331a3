// The `qattn` command. Subcommands are registered by src/cli/cli_*.cc; see README.md ("The command line").
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/cli_util.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"qattn: attention kernels generated through the Thinking Language (TL)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qattn 0.1.0");
  qattn::cli::register_tl_commands(app);
  qattn::cli::register_plan_commands(app);
  qattn::cli::register_generate_commands(app);
  qattn::cli::register_spec_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : qattn::cli::kUsage;
  }
  return qattn::cli::exit_status();
}
