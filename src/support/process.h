// Running a helper program without a shell: argv is passed as is (no quoting, no word splitting,
// no expansion), so a path or name from a spec or an LLM reply cannot become a command.
//
// Options (ProcessOptions) bound what the child may do: a wall-clock timeout (the child's whole
// process group is killed), rlimits, a working directory, and a sandbox for untrusted code (the
// host code of a library an LLM wrote): no_new_privs, file writes only beneath a scratch folder
// (Landlock), no network (a user + network namespace, else Landlock's TCP rules), no signals to
// processes outside (Landlock scope), a seccomp filter against ptrace / mount / namespaces / bpf /
// keyrings and, optionally, against any execve or fork after the program started. Each protection
// is applied when this kernel offers it; ProcessResult::protections lists those applied and
// ProcessResult::missing what was not available and why. Without any option the program is started
// with posix_spawn as before.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qattn::support {

struct ProcessResult {
  bool started = false;   // false: the program could not be started (error says why)
  int status = -1;        // exit status; 128 + N when killed by signal N
  std::string output;     // stdout + stderr when captured
  std::string error;
  bool timed_out = false;               // killed (SIGKILL to its process group) after timeout_s
  std::vector<std::string> protections;  // sandbox: what was applied, e.g. "landlock-abi7 writes:/tmp/x"
  std::vector<std::string> missing;      // sandbox: what was asked for and not available, with the reason
};

struct ProcessLimits {
  double timeout_s = 0;         // wall clock; 0: none
  uint64_t address_space = 0;   // RLIMIT_AS bytes; 0: unchanged
  uint64_t data = 0;            // RLIMIT_DATA bytes; 0: unchanged
  uint64_t cpu_s = 0;           // RLIMIT_CPU seconds; 0: unchanged
  uint64_t file_size = 0;       // RLIMIT_FSIZE bytes; 0: unchanged
  uint64_t processes = 0;       // RLIMIT_NPROC (per user; not enforced for root); 0: unchanged
  bool no_core = false;         // RLIMIT_CORE = 0
};

struct SandboxOptions {
  bool enabled = false;
  std::string scratch;          // the one folder the child may write beneath (required)
  bool isolate_network = true;  // new user + network namespace (only loopback, down)
  bool forbid_exec = false;     // seccomp: no execve / fork / vfork / clone of a process once started
  bool required = false;        // refuse to start when no file-write restriction can be applied
  std::vector<std::string> also_writable;  // more folders writable beneath (e.g. /dev/shm for CUDA's IPC)
};

struct ProcessOptions {
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing) the environment
  bool capture = false;         // stdout + stderr into ProcessResult::output
  size_t max_output = 1 << 20;  // bytes of output kept; the rest is read and discarded
  std::string cwd;              // working directory of the child ("" : this process's)
  ProcessLimits limits;
  SandboxOptions sandbox;
};

// Runs argv[0] (looked up in PATH when it has no '/') with argv, the environment plus `env` (added
// or replaced), stdin closed. capture: stdout and stderr are collected in `output` (at most
// `max_output` bytes kept, the rest discarded); otherwise they go to this process's.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env = {},
                          bool capture = false, size_t max_output = 1 << 20);
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& opts);

// What the sandbox can apply on this kernel, one line ("landlock abi 7, user+net namespaces,
// seccomp"), measured by starting /bin/true in it; for `qattn doctor`-style reports and tests.
std::string sandbox_report();

}  // namespace qattn::support
