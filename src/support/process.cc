#include "support/process.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>

extern char** environ;

namespace qattn::support {

namespace {

std::vector<std::string> environment(const std::vector<std::pair<std::string, std::string>>& env) {
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
  return env_strings;
}

// argv and the environment as the NULL-terminated char* arrays of posix_spawn / execve; the
// pointers point into the strings held here (moving the struct moves the vectors, not the strings).
struct ExecArrays {
  std::vector<std::string> env_strings, argv_strings;
  std::vector<char*> envp, args;
};
ExecArrays exec_arrays(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env) {
  ExecArrays x;
  x.env_strings = environment(env);
  x.argv_strings = argv;
  for (auto& s : x.env_strings) x.envp.push_back(s.data());
  x.envp.push_back(nullptr);
  for (auto& s : x.argv_strings) x.args.push_back(s.data());
  x.args.push_back(nullptr);
  return x;
}

void read_into(int fd, std::string& out, size_t max_output) {
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0 && out.size() < max_output) out.append(buf, std::min(size_t(n), max_output - out.size()));
}

int decode(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1; }

// ---- Landlock (raw syscalls: no library; the numbers are the same on every architecture) ----
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
constexpr uint64_t kLlExecute = 1ull << 0, kLlWriteFile = 1ull << 1, kLlReadFile = 1ull << 2, kLlReadDir = 1ull << 3,
                   kLlRemoveDir = 1ull << 4, kLlRemoveFile = 1ull << 5, kLlMakeChar = 1ull << 6, kLlMakeDir = 1ull << 7,
                   kLlMakeReg = 1ull << 8, kLlMakeSock = 1ull << 9, kLlMakeFifo = 1ull << 10, kLlMakeBlock = 1ull << 11,
                   kLlMakeSym = 1ull << 12, kLlRefer = 1ull << 13, kLlTruncate = 1ull << 14;
constexpr uint64_t kLlNetBindTcp = 1ull << 0, kLlNetConnectTcp = 1ull << 1;
constexpr uint64_t kLlScopeAbstractUnix = 1ull << 0, kLlScopeSignal = 1ull << 1;
struct LlRulesetAttr {
  uint64_t handled_access_fs = 0;
  uint64_t handled_access_net = 0;
  uint64_t scoped = 0;
};
struct __attribute__((packed)) LlPathBeneath {
  uint64_t allowed_access;
  int32_t parent_fd;
};

int landlock_abi() {
  const long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, 1u /* LANDLOCK_CREATE_RULESET_VERSION */);
  return v < 0 ? -errno : static_cast<int>(v);
}

// The ruleset of the sandbox: writes (and every kind of file creation, removal, rename, truncation)
// only beneath `scratch`; writing to existing device files (/dev/null, the GPU's /dev/nvidia*)
// stays allowed; reading and executing anywhere. Returns the ruleset fd, or -1 with `why`.
int landlock_ruleset(const std::string& scratch, const std::vector<std::string>& also, int abi, bool no_tcp, std::string& what,
                     std::string& why) {
  const uint64_t make = kLlMakeChar | kLlMakeDir | kLlMakeReg | kLlMakeSock | kLlMakeFifo | kLlMakeBlock | kLlMakeSym;
  uint64_t handled = kLlWriteFile | kLlRemoveDir | kLlRemoveFile | make;
  if (abi >= 2) handled |= kLlRefer;
  if (abi >= 3) handled |= kLlTruncate;
  LlRulesetAttr attr;
  attr.handled_access_fs = handled;
  size_t size = sizeof(uint64_t);
  if (abi >= 4 && no_tcp) {
    attr.handled_access_net = kLlNetBindTcp | kLlNetConnectTcp;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = kLlScopeAbstractUnix | kLlScopeSignal;
    size = sizeof attr;
  }
  const int fd = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, size, 0));
  if (fd < 0) {
    why = std::string("landlock_create_ruleset: ") + std::strerror(errno);
    return -1;
  }
  auto allow = [&](const std::string& path, uint64_t access) -> bool {
    const int pfd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (pfd < 0) {
      why = "landlock: cannot open " + path + ": " + std::strerror(errno);
      return false;
    }
    LlPathBeneath pb{access & handled, pfd};
    const long rc = syscall(SYS_landlock_add_rule, fd, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &pb, 0);
    const int e = errno;
    close(pfd);
    if (rc != 0) why = "landlock_add_rule " + path + ": " + std::strerror(e);
    return rc == 0;
  };
  if (!allow(scratch, handled) || !allow("/dev", kLlWriteFile | kLlTruncate)) {
    close(fd);
    return -1;
  }
  for (const auto& a : also)
    if (!allow(a, handled)) {
      close(fd);
      return -1;
    }
  (void)kLlExecute, (void)kLlReadFile, (void)kLlReadDir;
  std::string where = scratch;
  for (const auto& a : also) where += ", " + a;
  what = "landlock-abi" + std::to_string(abi) + " (writes only beneath " + where + ")";
  if (attr.handled_access_net) what += ", landlock-no-tcp";
  if (attr.scoped) what += ", landlock-scoped (no signals / abstract sockets outside)";
  return fd;
}

// ---- seccomp ----
#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kAuditArch = 0;
#endif

// The filter: the wrong architecture (and x32 numbers) and a list of calls a kernel test never
// needs fail with EPERM; with forbid_exec, execve is allowed only for the one call that starts the
// program (its path pointer, `exec_path`, in this child's memory), fork / vfork / clone of a process
// fail (threads stay allowed: clone with CLONE_THREAD; clone3 answers ENOSYS so glibc falls back to
// clone).
std::vector<sock_filter> seccomp_program(bool forbid_exec, const void* exec_path) {
  std::vector<sock_filter> p;
  auto stmt = [&](uint16_t code, uint32_t k) { p.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { p.push_back(BPF_JUMP(code, k, jt, jf)); };
  const uint32_t eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  const uint32_t enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0);
  stmt(BPF_RET | BPF_K, eperm);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);  // x32 ABI
  stmt(BPF_RET | BPF_K, eperm);
#endif
  const long denied[] = {
      SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot,
      SYS_unshare, SYS_setns, SYS_keyctl, SYS_add_key, SYS_request_key, SYS_bpf, SYS_perf_event_open, SYS_kexec_load,
      SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_userfaultfd, SYS_swapon, SYS_swapoff, SYS_reboot,
#ifdef SYS_open_tree
      SYS_open_tree, SYS_move_mount, SYS_fsopen, SYS_fsmount,
#endif
  };
  for (long nr : denied) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
    stmt(BPF_RET | BPF_K, eperm);
  }
  if (forbid_exec) {
    const uint64_t ptr = reinterpret_cast<uintptr_t>(exec_path);
    const uint32_t lo = static_cast<uint32_t>(ptr), hi = static_cast<uint32_t>(ptr >> 32);
    // execve: only with the path pointer of our own exec
    jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_execve, 0, 6);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));  // low half (little endian)
    jump(BPF_JMP | BPF_JEQ | BPF_K, lo, 0, 3);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]) + 4);
    jump(BPF_JMP | BPF_JEQ | BPF_K, hi, 0, 1);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    stmt(BPF_RET | BPF_K, eperm);
    std::vector<long> no = {SYS_execveat};
#ifdef SYS_fork
    no.push_back(SYS_fork);
#endif
#ifdef SYS_vfork
    no.push_back(SYS_vfork);
#endif
    for (long nr : no) {
      jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
      stmt(BPF_RET | BPF_K, eperm);
    }
#ifdef SYS_clone3
    jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
    stmt(BPF_RET | BPF_K, enosys);
#endif
    // clone: flags are the first argument on x86_64 and aarch64
    jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));
    jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    stmt(BPF_RET | BPF_K, eperm);
  }
  (void)enosys;
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return p;
}

// What the child reports on the status pipe before exec (one byte per step, then the errno of a
// failed step or of execve).
enum Step : char { kStepNetns = 'n', kStepNoNetns = 'N', kStepSeccomp = 's', kStepNoSeccomp = 'S', kStepFail = 'F',
                   kStepOwnTasks = 't' };

void child_write(int fd, const void* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p = static_cast<const char*>(p) + w;
    n -= size_t(w);
  }
}

bool write_proc(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

std::string find_program(const std::string& name, const std::vector<std::string>& envs) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& kv : envs)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t c = path.find(':', pos);
    std::string dir = path.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (dir.empty()) dir = ".";
    const std::string full = dir + "/" + name;
    if (access(full.c_str(), X_OK) == 0) return full;
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return {};
}

ProcessResult run_plain(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                        bool capture, size_t max_output) {
  ProcessResult r;
  ExecArrays x = exec_arrays(argv, env);
  std::vector<char*>&envp = x.envp, &args = x.args;

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  int pipefd[2] = {-1, -1};
  if (capture) {
    if (pipe2(pipefd, O_CLOEXEC) != 0) {  // not inherited by a program another thread starts meanwhile
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
    read_into(pipefd[0], r.output, max_output);
    close(pipefd[0]);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = decode(st);
  return r;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                          bool capture, size_t max_output) {
  if (argv.empty() || argv[0].empty()) {
    ProcessResult r;
    r.error = "no program to run";
    return r;
  }
  return run_plain(argv, env, capture, max_output);
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& o) {
  ProcessResult r;
  if (argv.empty() || argv[0].empty()) {
    r.error = "no program to run";
    return r;
  }
  const auto& L = o.limits;
  const bool plain = o.cwd.empty() && !o.sandbox.enabled && L.timeout_s <= 0 && !L.address_space && !L.data && !L.cpu_s &&
                     !L.file_size && !L.processes && !L.no_core;
  if (plain) return run_plain(argv, o.env, o.capture, o.max_output);

  // Everything the child needs is prepared here: after fork() it makes only system calls.
  ExecArrays x = exec_arrays(argv, o.env);
  std::vector<char*>&envp = x.envp, &args = x.args;
  const std::string program = find_program(argv[0], x.env_strings);
  if (program.empty()) {
    r.error = "cannot start " + argv[0] + ": " + std::strerror(ENOENT);
    return r;
  }

  int landlock_fd = -1;
  uint64_t own_tasks_access = 0;
  bool want_netns = false, want_seccomp = false;
  std::string uid_map, gid_map;
  std::vector<sock_filter> filter;
  if (o.sandbox.enabled) {
    if (o.sandbox.scratch.empty()) {
      r.error = "sandbox: no scratch folder";
      return r;
    }
    const int abi = landlock_abi();
    own_tasks_access = kLlWriteFile | (abi >= 3 ? kLlTruncate : 0);
    if (abi > 0) {
      std::string what, why;
      landlock_fd = landlock_ruleset(o.sandbox.scratch, o.sandbox.also_writable, abi, o.sandbox.isolate_network, what, why);
      if (landlock_fd >= 0)
        r.protections.push_back(what);
      else
        r.missing.push_back(why);
    } else {
      r.missing.push_back(std::string("landlock: not offered by this kernel (") + std::strerror(-abi) + ")");
    }
    if (landlock_fd < 0 && o.sandbox.required) {
      r.error = "sandbox: cannot restrict file writes to " + o.sandbox.scratch + " here: " + r.missing.back();
      return r;
    }
    r.protections.push_back("no_new_privs");
    want_netns = o.sandbox.isolate_network;
    uid_map = std::to_string(getuid()) + " " + std::to_string(getuid()) + " 1\n";
    gid_map = std::to_string(getgid()) + " " + std::to_string(getgid()) + " 1\n";
    want_seccomp = kAuditArch != 0;
    if (want_seccomp) filter = seccomp_program(o.sandbox.forbid_exec, program.c_str());
    else r.missing.push_back("seccomp: no filter for this architecture");
  }
  sock_fprog fprog{static_cast<unsigned short>(filter.size()), filter.data()};

  int outp[2] = {-1, -1}, statusp[2] = {-1, -1};
  if (pipe2(statusp, O_CLOEXEC) != 0 || (o.capture && pipe2(outp, O_CLOEXEC) != 0)) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {statusp[0], statusp[1], landlock_fd})
      if (fd >= 0) close(fd);
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    // the child: system calls only
    const int sfd = statusp[1];
    auto fail = [&](int err) {
      const char f = kStepFail;
      child_write(sfd, &f, 1);
      child_write(sfd, &err, sizeof err);
      _exit(127);
    };
    setpgid(0, 0);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0) fail(errno);
    if (o.capture && (dup2(outp[1], 1) < 0 || dup2(outp[1], 2) < 0)) fail(errno);
    if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0) fail(errno);
    auto lim = [&](int res, uint64_t v) {
      if (!v) return;
      rlimit rl{static_cast<rlim_t>(v), static_cast<rlim_t>(v)};
      if (setrlimit(res, &rl) != 0) fail(errno);
    };
    lim(RLIMIT_AS, L.address_space);
    lim(RLIMIT_DATA, L.data);
    lim(RLIMIT_CPU, L.cpu_s);
    lim(RLIMIT_FSIZE, L.file_size);
    lim(RLIMIT_NPROC, L.processes);
    if (L.no_core) {
      rlimit rl{0, 0};
      if (setrlimit(RLIMIT_CORE, &rl) != 0) fail(errno);
    }
    if (o.sandbox.enabled) {
      if (want_netns) {
        char step = kStepNoNetns;
        if (unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
          // map our own uid / gid so files in scratch keep their owner
          if (write_proc("/proc/self/setgroups", "deny") && write_proc("/proc/self/uid_map", uid_map) &&
              write_proc("/proc/self/gid_map", gid_map))
            step = kStepNetns;
          else
            fail(errno);
        }
        child_write(sfd, &step, 1);
        if (step == kStepNoNetns) {
          const int e = errno;
          child_write(sfd, &e, sizeof e);
        }
      }
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(errno);
      if (landlock_fd >= 0) {
        // This process's own threads' files (/proc/<pid>/task/<tid>/comm: the CUDA driver names
        // the threads it starts in cuInit and fails with error 304 when it cannot). The rule is
        // added here, after fork, so that /proc/self is the pid the program will run as; it
        // covers no other process.
        const int tfd = open("/proc/self/task", O_PATH | O_CLOEXEC);
        if (tfd >= 0) {
          LlPathBeneath pb{own_tasks_access, tfd};
          const long rc = syscall(SYS_landlock_add_rule, landlock_fd, 1, &pb, 0);
          close(tfd);
          if (rc == 0) {
            const char step = kStepOwnTasks;
            child_write(sfd, &step, 1);
          }
        }
        if (syscall(SYS_landlock_restrict_self, landlock_fd, 0) != 0) fail(errno);
      }
      if (want_seccomp) {
        char step = kStepSeccomp;
        int e = 0;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) != 0) step = kStepNoSeccomp, e = errno;
        child_write(sfd, &step, 1);
        if (step == kStepNoSeccomp) child_write(sfd, &e, sizeof e);
      }
    }
    execve(program.c_str(), args.data(), envp.data());
    fail(errno);
  }
  close(statusp[1]);
  if (o.capture) close(outp[1]);
  if (landlock_fd >= 0) close(landlock_fd);
  if (pid < 0) {
    r.error = std::string("fork: ") + std::strerror(errno);
    close(statusp[0]);
    if (o.capture) close(outp[0]);
    return r;
  }
  // what the child reported before exec (the pipe closes on a successful exec)
  std::string status_bytes;
  read_into(statusp[0], status_bytes, 4096);
  close(statusp[0]);
  bool exec_failed = false;
  for (size_t i = 0; i < status_bytes.size(); ++i) {
    const char step = status_bytes[i];
    int e = 0;
    auto take_errno = [&] {
      if (i + 1 + sizeof e <= status_bytes.size()) std::memcpy(&e, status_bytes.data() + i + 1, sizeof e), i += sizeof e;
    };
    if (step == kStepOwnTasks) r.protections.push_back("writable: its own /proc/<pid>/task (thread names)");
    if (step == kStepNetns) r.protections.push_back("user+network namespace (no network)");
    if (step == kStepNoNetns) take_errno(), r.missing.push_back(std::string("network namespace: unshare: ") + std::strerror(e));
    if (step == kStepSeccomp)
      r.protections.push_back(o.sandbox.forbid_exec ? "seccomp (no ptrace/mount/namespaces/bpf; no exec/fork after start)"
                                                    : "seccomp (no ptrace/mount/namespaces/bpf)");
    if (step == kStepNoSeccomp) take_errno(), r.missing.push_back(std::string("seccomp: ") + std::strerror(e));
    if (step == kStepFail) {
      take_errno();
      exec_failed = true;
      r.error = "cannot start " + argv[0] + ": " + std::strerror(e);
    }
  }
  if (!exec_failed) r.started = true;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(L.timeout_s > 0 ? L.timeout_s : 1e9);
  auto left_ms = [&] {
    const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    return d < 0 ? 0 : d > 100 ? 100 : static_cast<int>(d);
  };
  auto kill_group = [&] {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  };
  int st = 0;
  bool reaped = false;
  bool out_open = o.capture;
  while (true) {
    if (out_open) {
      pollfd pf{outp[0], POLLIN, 0};
      const int n = poll(&pf, 1, left_ms());
      if (n > 0) {
        char buf[4096];
        const ssize_t got = read(outp[0], buf, sizeof buf);
        if (got > 0 && r.output.size() < o.max_output)
          r.output.append(buf, std::min(size_t(got), o.max_output - r.output.size()));
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) out_open = false;
      }
    } else if (!reaped) {
      const pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) reaped = true;
      else if (w < 0 && errno != EINTR) reaped = true;
      else poll(nullptr, 0, std::min(left_ms(), 20));
    }
    if (!out_open && reaped) break;
    if (!out_open && !reaped) {
      const pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        reaped = true;
        break;
      }
    }
    if (!r.timed_out && std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = true;
      kill_group();
      // the output pipe may be held open by a process that left the group: stop reading it
      if (out_open) {
        close(outp[0]);
        out_open = false;
        outp[0] = -1;
      }
    }
  }
  if (o.capture && outp[0] >= 0) close(outp[0]);
  if (!reaped) waitpid(pid, &st, 0);
  kill(-pid, SIGKILL);  // nothing of its group outlives it
  r.status = decode(st);
  if (r.timed_out) r.error = "killed after " + std::to_string(L.timeout_s).substr(0, std::to_string(L.timeout_s).find('.') + 2) + " s (time limit)";
  return r;
}

std::string sandbox_report() {
  char tmpl[] = "/tmp/qattn-sandbox-probe-XXXXXX";
  if (!mkdtemp(tmpl)) return "cannot create a scratch folder";
  ProcessOptions o;
  o.sandbox.enabled = true;
  o.sandbox.scratch = tmpl;
  o.sandbox.forbid_exec = true;
  o.capture = true;
  const auto r = run_process({"/bin/true"}, o);
  rmdir(tmpl);
  std::string s = "applied: ";
  for (size_t i = 0; i < r.protections.size(); ++i) s += (i ? "; " : "") + r.protections[i];
  if (!r.missing.empty()) {
    s += " | not available: ";
    for (size_t i = 0; i < r.missing.size(); ++i) s += (i ? "; " : "") + r.missing[i];
  }
  if (!r.started) s += " | " + r.error;
  return s;
}

}  // namespace qattn::support
