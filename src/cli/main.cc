// The `qattn` command. Subcommands are registered in src/cli/*.cc; see docs/cli.md.
#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"qattn: attention kernels from the Thinking Language (TL)"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
