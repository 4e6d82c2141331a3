// The build driver (src/build) and its content-addressed cache; SHA-256 known-answer vectors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "build/nvcc.h"
#include "support/process.h"
#include "support/sha256.h"

namespace qattn::build {
namespace {
namespace fs = std::filesystem;

TEST(sha256, KnownAnswers) {
  EXPECT_EQ(support::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(support::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(support::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(support::sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(build, MissingNvccIsADiagnostic) {
  setenv("QATTN_NVCC", "/nonexistent/nvcc", 1);
  support::DiagSink d;
  EXPECT_FALSE(find_toolchain(d).has_value());
  unsetenv("QATTN_NVCC");
  ASSERT_TRUE(d.has_errors());
  EXPECT_EQ(d.all().front().code, "BUILD0101");
  EXPECT_FALSE(d.all().front().hint.empty());
}

TEST(build, CacheBuildsOnceThenHits) {
  support::DiagSink d;
  auto tc = find_toolchain(d);
  if (!tc) GTEST_SKIP() << "no CUDA toolchain here: " << d.render();
  backend::Translation t;
  t.kernel_name = "cache_probe";
  t.arch = "sm80";
  t.nvcc_flags = {"-gencode=arch=compute_80,code=sm_80", "-std=c++17"};
  t.cuda_source = "extern \"C\" int qattn_cache_probe() { return " + std::to_string(std::rand()) + "; }\n";
  BuildOptions o;
  o.cache_dir = fs::temp_directory_path() / ("qattn-cache-test-" + std::to_string(::getpid()));
  auto first = build_library(t, *tc, d, o);
  ASSERT_TRUE(first.has_value()) << d.render();
  EXPECT_FALSE(first->cache_hit);
  EXPECT_TRUE(fs::exists(first->library));
  auto second = build_library(t, *tc, d, o);
  ASSERT_TRUE(second.has_value()) << d.render();
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(first->key, second->key);
  // Another source is another key; a failing source is a diagnostic and leaves no cache entry.
  t.cuda_source += "this is not C++\n";
  support::DiagSink bad;
  EXPECT_FALSE(build_library(t, *tc, bad, o).has_value());
  ASSERT_TRUE(bad.has_errors());
  EXPECT_EQ(bad.all().back().code, "BUILD0201");
  int entries = 0;
  for (auto& shard : fs::directory_iterator(o.cache_dir))
    for (auto& e : fs::directory_iterator(shard)) entries += e.path().filename().string()[0] != '.';
  EXPECT_EQ(entries, 1);
  fs::remove_all(o.cache_dir);
}

// ---- run_process: limits and the sandbox (support/process.h) ----

struct TempDir {
  fs::path dir;
  explicit TempDir(const std::string& name) : dir(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
};

TEST(RunProcess, TimeoutKillsTheSleepingChildAndItsGroup) {
  support::ProcessOptions o;
  o.capture = true;
  o.limits.timeout_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  // a grandchild in the background holds the output pipe open: the whole group goes
  const auto r = support::run_process({"sh", "-c", "sleep 30 & sleep 30"}, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.started);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.status, 128 + 9) << "SIGKILL";
  EXPECT_LT(s, 10.0);
  EXPECT_NE(r.error.find("time limit"), std::string::npos) << r.error;
}

TEST(RunProcess, AddressSpaceLimitMakesAnAllocationFail) {
  support::ProcessOptions o;
  o.capture = true;
  o.limits.address_space = 256ull << 20;
  // dd allocates its 1 GiB block buffer first
  const auto r = support::run_process({"dd", "if=/dev/zero", "of=/dev/null", "bs=1G", "count=1"}, o);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("memory exhausted"), std::string::npos) << r.output;
  o.limits.address_space = 0;
  o.limits.file_size = 4096;  // RLIMIT_FSIZE: a bigger file fails too
  TempDir t("qattn-fsize");
  const auto f = support::run_process({"dd", "if=/dev/zero", "of=" + (t.dir / "big").string(), "bs=64k", "count=1"}, o);
  EXPECT_NE(f.status, 0) << f.output;
  EXPECT_LE(fs::file_size(t.dir / "big"), 4096u);
}

TEST(RunProcess, WorkingDirectoryAndPlainCallsKeepTheirBehaviour) {
  TempDir t("qattn-cwd");
  support::ProcessOptions o;
  o.capture = true;
  o.cwd = t.dir.string();
  const auto r = support::run_process({"pwd"}, o);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, fs::canonical(t.dir).string() + "\n");
  const auto plain = support::run_process({"sh", "-c", "echo out; echo err >&2; exit 3"}, {}, true);
  EXPECT_EQ(plain.status, 3);
  EXPECT_EQ(plain.output, "out\nerr\n");
  EXPECT_FALSE(support::run_process({"/nonexistent/program"}, o).started);
}

// Options of a sandboxed run whose output is captured, writable beneath `scratch`.
support::ProcessOptions sandboxed(const fs::path& scratch) {
  support::ProcessOptions o;
  o.capture = true;
  o.sandbox.enabled = true;
  o.sandbox.scratch = scratch.string();
  return o;
}
// Whether a protection whose name starts with `prefix` was applied to the run.
bool applied(const support::ProcessResult& r, const std::string& prefix) {
  for (const auto& p : r.protections)
    if (p.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(RunProcess, SandboxedChildWritesOnlyInsideItsScratchFolder) {
  TempDir t("qattn-sandbox");
  fs::create_directories(t.dir / "scratch");
  support::ProcessOptions o = sandboxed(t.dir / "scratch");
  const std::string outside = (t.dir / "outside.txt").string(), inside = (t.dir / "scratch" / "inside.txt").string();
  const auto r = support::run_process(
      {"sh", "-c", "echo a > '" + outside + "'; echo b > '" + inside + "'; mkdir '" + (t.dir / "d").string() + "'; " +
                       "ln -s / '" + (t.dir / "link").string() + "'; echo c > /tmp/qattn-sandbox-probe-" +
                       std::to_string(::getpid()) + "; true"},
      o);
  std::string what;
  for (const auto& p : r.protections) what += p + "; ";
  for (const auto& m : r.missing) what += "[missing] " + m + "; ";
  if (!applied(r, "landlock")) GTEST_SKIP() << "this kernel offers no file-write restriction: " << what;
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(inside)) << "writes inside the scratch folder work: " << r.output;
  EXPECT_FALSE(fs::exists(outside)) << what;
  EXPECT_FALSE(fs::exists(t.dir / "d"));
  EXPECT_FALSE(fs::is_symlink(t.dir / "link"));
  EXPECT_FALSE(fs::exists("/tmp/qattn-sandbox-probe-" + std::to_string(::getpid())));
  EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << r.output;
  // every protection applied is named, and the report says what this kernel offers
  EXPECT_NE(what.find("no_new_privs"), std::string::npos) << what;
  EXPECT_NE(support::sandbox_report().find("landlock"), std::string::npos) << support::sandbox_report();
}

TEST(RunProcess, SandboxCanForbidExecAndForkAfterStart) {
  TempDir t("qattn-noexec");
  support::ProcessOptions o = sandboxed(t.dir);
  o.sandbox.forbid_exec = true;
  const auto r = support::run_process({"sh", "-c", "echo builtin-ok; /bin/echo ran-a-program"}, o);
  bool seccomp = false;
  for (const auto& p : r.protections) seccomp |= p.find("no exec/fork") != std::string::npos;
  if (!seccomp) GTEST_SKIP() << "no seccomp filter here";
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.output.find("ran-a-program"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("builtin-ok"), std::string::npos) << r.output;
  o.sandbox.forbid_exec = false;
  const auto ok = support::run_process({"sh", "-c", "/bin/echo ran-a-program"}, o);
  EXPECT_NE(ok.output.find("ran-a-program"), std::string::npos) << ok.output;
}

// The CUDA driver names the threads it starts (cuInit writes /proc/<pid>/task/<tid>/comm and fails
// with error 304 when it cannot): a sandboxed program may write its own threads' files, started
// before or after the sandbox was applied, and no other process's (here, this test's).
TEST(RunProcess, SandboxedChildNamesItsOwnThreadsOnly) {
  TempDir t("qattn-threads");
  support::ProcessOptions o = sandboxed(t.dir);
  const std::string me = std::to_string(::getpid());
  const std::string script =
      "import threading, os\n"
      "def name(tid, v):\n"
      "    try:\n"
      "        with open(f'/proc/self/task/{tid}/comm', 'w') as f: f.write(v)\n"
      "        return open(f'/proc/self/task/{tid}/comm').read().strip()\n"
      "    except OSError as e: return 'denied ' + str(e.errno)\n"
      "print('main', name(threading.get_native_id(), 'qattn-main'))\n"
      "out = []\n"
      "th = threading.Thread(target=lambda: out.append(name(threading.get_native_id(), 'qattn-worker')))\n"
      "th.start(); th.join()\n"
      "print('worker', out[0])\n"
      "try:\n"
      "    open('/proc/" + me + "/comm', 'w').write('hijacked'); print('other written')\n"
      "except OSError as e: print('other denied', e.errno)\n";
  const auto r = support::run_process({"python3", "-c", script}, o);
  if (!applied(r, "landlock")) GTEST_SKIP() << "this kernel offers no file-write restriction";
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("main qattn-main"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("worker qattn-worker"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("other denied"), std::string::npos) << r.output;
  std::ifstream comm("/proc/self/comm");
  std::string mine;
  std::getline(comm, mine);
  EXPECT_NE(mine, "hijacked");
  std::string what;
  for (const auto& p : r.protections) what += p + "; ";
  EXPECT_NE(what.find("/proc/<pid>/task"), std::string::npos) << what;
}

// ---- the cache: manifest checked before reuse, abandoned build folders removed ----

Toolchain fake_toolchain() {
  Toolchain tc;
  tc.nvcc = (fs::path(QATTN_SOURCE_DIR) / "tests" / "llm" / "fake_nvcc.sh").string();
  tc.nvcc_version = "fake";
  tc.include_dirs = {"/nonexistent-cutlass", (fs::path(QATTN_SOURCE_DIR) / "device").string(),
                     (fs::path(QATTN_SOURCE_DIR) / "include").string()};
  return tc;
}

backend::Translation probe_translation() {
  backend::Translation t;
  t.kernel_name = "cache_probe";
  t.arch = "sm80";
  t.cuda_source = "// probe " + std::to_string(::getpid()) + "\n";
  return t;
}

TEST(build, TruncatedCachedLibraryIsRebuilt) {
  TempDir cache("qattn-cache-truncated");
  BuildOptions o;
  o.cache_dir = cache.dir;
  std::string said;
  o.progress = [&](const std::string& l) { said += l + "\n"; };
  support::DiagSink d;
  const auto tc = fake_toolchain();
  const auto t = probe_translation();
  auto first = build_library(t, tc, d, o);
  ASSERT_TRUE(first) << d.render();
  const auto size = fs::file_size(first->library);
  ASSERT_GT(size, 10u);
  fs::resize_file(first->library, size / 2);  // a crash, a full disk, a careless copy
  auto second = build_library(t, tc, d, o);
  ASSERT_TRUE(second) << d.render();
  EXPECT_FALSE(second->cache_hit) << said;
  EXPECT_EQ(fs::file_size(second->library), size);
  EXPECT_NE(said.find("damaged"), std::string::npos) << said;
  // same size, other bytes: the hash catches it
  {
    std::fstream f(second->library, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');
  }
  said.clear();
  auto third = build_library(t, tc, d, o);
  ASSERT_TRUE(third) << d.render();
  EXPECT_FALSE(third->cache_hit) << said;
  EXPECT_NE(said.find("SHA-256"), std::string::npos) << said;
  auto fourth = build_library(t, tc, d, o);
  ASSERT_TRUE(fourth) << d.render();
  EXPECT_TRUE(fourth->cache_hit) << "an intact entry is reused";
}

TEST(build, AbandonedBuildFoldersAreRemoved) {
  TempDir cache("qattn-cache-abandoned");
  const fs::path old_tmp = cache.dir / "ab" / ".tmp-abandoned-1", new_tmp = cache.dir / "cd" / ".tmp-in-progress-2";
  fs::create_directories(old_tmp);
  fs::create_directories(new_tmp);
  std::ofstream(old_tmp / "kernel.cu") << "// half a build\n";
  fs::last_write_time(old_tmp, fs::file_time_type::clock::now() - std::chrono::hours(3));
  BuildOptions o;
  o.cache_dir = cache.dir;
  support::DiagSink d;
  ASSERT_TRUE(build_library(probe_translation(), fake_toolchain(), d, o)) << d.render();
  EXPECT_FALSE(fs::exists(old_tmp)) << "older than an hour: removed";
  EXPECT_TRUE(fs::exists(new_tmp)) << "a build that may still be running: kept";
}

TEST(build, NvccTimeLimitIsADiagnostic) {
  TempDir cache("qattn-cache-slow");
  const fs::path slow = cache.dir / "slow_nvcc.sh";
  std::ofstream(slow) << "#!/bin/sh\nsleep 30\n";
  fs::permissions(slow, fs::perms::owner_all);
  auto tc = fake_toolchain();
  tc.nvcc = slow.string();
  BuildOptions o;
  o.cache_dir = cache.dir / "c";
  o.timeout_s = 0.5;
  support::DiagSink d;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(build_library(probe_translation(), tc, d, o));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  ASSERT_TRUE(d.has_errors());
  EXPECT_EQ(d.all().back().code, "BUILD0203") << d.render();
}

}  // namespace
}  // namespace qattn::build
