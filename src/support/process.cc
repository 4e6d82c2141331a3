#include "support/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace qattn::support {

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                          bool capture, size_t max_output) {
  ProcessResult r;
  if (argv.empty() || argv[0].empty()) {
    r.error = "no program to run";
    return r;
  }
  // the environment: this process's, with `env` added or replaced
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) vars[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  int pipefd[2] = {-1, -1};
  if (capture) {
    if (pipe(pipefd) != 0) {
      r.error = std::string("pipe: ") + std::strerror(errno);
      posix_spawn_file_actions_destroy(&fa);
      return r;
    }
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    posix_spawn_file_actions_addclose(&fa, pipefd[1]);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (capture) close(pipefd[1]);
  if (rc != 0) {
    if (capture) close(pipefd[0]);
    r.error = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return r;
  }
  r.started = true;
  if (capture) {
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0 && r.output.size() < max_output) r.output.append(buf, std::min(size_t(n), max_output - r.output.size()));
    close(pipefd[0]);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}

}  // namespace qattn::support
