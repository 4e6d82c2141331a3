// Running a helper program without a shell: argv is passed as is (no quoting, no word splitting,
// no expansion), so a path or name from a spec or an LLM reply cannot become a command.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace qattn::support {

struct ProcessResult {
  bool started = false;   // false: the program could not be started (error says why)
  int status = -1;        // exit status; 128 + N when killed by signal N
  std::string output;     // stdout + stderr when captured
  std::string error;
};

// Runs argv[0] (looked up in PATH when it has no '/') with argv, the environment plus `env` (added
// or replaced), stdin closed. capture: stdout and stderr are collected in `output` (at most
// `max_output` bytes kept, the rest discarded); otherwise they go to this process's.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env = {},
                          bool capture = false, size_t max_output = 1 << 20);

}  // namespace qattn::support
