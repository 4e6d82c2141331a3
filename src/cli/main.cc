// The `qattn` command. Subcommands are registered by src/cli/cli_*.cc; see README.md ("The command line").
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>

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
  } catch (const std::bad_alloc&) {
    // The command boundary: no exception ends the process with abort() (exit 134).
    std::cerr << "error CLI0003: out of memory: the input asks for more memory than this machine gives\n"
                 "  hint: the inputs are bounded (TL and spec files 1 MiB, LLM replies 4 MiB, the interpreter "
                 "1 GiB); lower --max-memory or the problem size\n";
    return qattn::cli::kFailed;
  } catch (const std::exception& e) {
    std::cerr << "error CLI0004: internal error: " << e.what()
              << "\n  hint: this is a bug in qattn; please report it with the command line and its inputs\n";
    return qattn::cli::kFailed;
  } catch (...) {
    std::cerr << "error CLI0004: internal error: an unknown exception\n"
                 "  hint: this is a bug in qattn; please report it with the command line and its inputs\n";
    return qattn::cli::kFailed;
  }
  return qattn::cli::exit_status();
}
