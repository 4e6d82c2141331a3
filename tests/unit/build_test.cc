// The build driver (src/build) and its content-addressed cache; SHA-256 known-answer vectors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include <chrono>
#include <dlfcn.h>
#include <fstream>

#include "build/nvcc.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "qattn/qattn.h"
#include "spec/spec.h"
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

// The split build of an sm90 forward kernel (nvcc.h): the kernel by `nvcc -fatbin` and the launch
// code by the host compiler at once, one library with the fatbin inside that exports the C ABI and
// nothing else; its launch code runs without a GPU as far as the driver (the argument checks, then
// a launch status, never a crash).
TEST(build, Sm90KernelsBuildSplitIntoOneLibraryThatExportsTheAbiOnly) {
  support::DiagSink d;
  auto tc = find_toolchain(d);
  if (!tc) GTEST_SKIP() << "no CUDA toolchain here: " << d.render();
  if (!tc->split_ok()) GTEST_SKIP() << "no host compiler or static CUDA runtime beside nvcc: split builds fall back to nvcc -shared";
  spec::AttentionSpec s = *spec::find_preset("llama3.2-1b");
  ASSERT_TRUE(spec::apply_flags(s, {{"gpu", "h100"}, {"mask", "none"}}, d)) << d.render();
  auto plan = plan::make_plan(s, *hw::find_gpu("h100"), d);
  ASSERT_TRUE(plan.has_value()) << d.render();
  auto t = backend::translate_text(plan->code, plan::make_target(*hw::find_gpu("h100")), d, "code.tl");
  ASSERT_TRUE(t.has_value()) << d.render();
  EXPECT_TRUE(t->split);
  EXPECT_TRUE(builds_split(*t, *tc));
  ::setenv("QATTN_SPLIT_BUILD", "0", 1);  // the way back to nvcc -shared
  EXPECT_FALSE(builds_split(*t, *tc));
  ::unsetenv("QATTN_SPLIT_BUILD");
  backend::Translation other = *t;
  other.split = false;  // every other family (sm80, the backward, the combine, LLM-written CUDA)
  EXPECT_FALSE(builds_split(other, *tc));

  const SplitCommands c = split_commands(*t, *tc);
  auto has = [](const std::vector<std::string>& v, const std::string& a) { return std::find(v.begin(), v.end(), a) != v.end(); };
  EXPECT_TRUE(has(c.device, "-fatbin") && has(c.device, "-gencode=arch=compute_90a,code=sm_90a"));
  EXPECT_TRUE(has(c.host, "-DQATTN_HOST_ONLY") && has(c.host, "-I" + tc->cuda_include));
  EXPECT_TRUE(has(c.link, "-Wl,kernel.fatbin") && has(c.link, tc->cudart_static) && has(c.link, "-Wl,--version-script=exports.map"));

  BuildOptions o;
  o.cache_dir = fs::temp_directory_path() / ("qattn-split-test-" + std::to_string(::getpid()));
  auto built = build_library(*t, *tc, d, o);
  ASSERT_TRUE(built.has_value()) << d.render();
  for (const char* step : {"-fatbin", "-DQATTN_HOST_ONLY", "-Wl,--format=binary"}) EXPECT_NE(built->log.find(step), std::string::npos) << step;
  EXPECT_EQ(built->log.find("nvcc -shared"), std::string::npos);
  EXPECT_NE(built->log.find("Used "), std::string::npos) << "ptxas's register report stays in the log";

  // the launch code's (weak) reference to the fatbin is the symbol the link's binary input defines:
  // a misnamed one links, loads and only fails at the first launch on a GPU
  const auto nm_launch = support::run_process({"nm", (built->entry / "launch.o").string()}, {}, true);
  const auto nm_lib = support::run_process({"nm", built->library.string()}, {}, true);
  if (nm_launch.started && nm_launch.status == 0) {
    for (const char* sym : {"_binary_kernel_fatbin_start", "_binary_kernel_fatbin_end"}) {
      EXPECT_NE(nm_launch.output.find(std::string("w ") + sym), std::string::npos) << nm_launch.output;
      EXPECT_TRUE(nm_lib.output.find(std::string("d ") + sym) != std::string::npos ||
                  nm_lib.output.find(std::string("D ") + sym) != std::string::npos) << sym << " not defined in the library";
    }
  }
  void* so = ::dlopen(built->library.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(so, nullptr) << ::dlerror();
  for (const char* sym : {"qattn_fwd", "qattn_kernel_info", "qattn_last_error"}) EXPECT_NE(::dlsym(so, sym), nullptr) << sym;
  for (const char* sym : {"_binary_kernel_fatbin_start", "_binary_kernel_fatbin_end", "cudaLaunchKernel"})
    EXPECT_EQ(::dlsym(so, sym), nullptr) << sym << " is exported";
  auto info = reinterpret_cast<const char* (*)()>(::dlsym(so, "qattn_kernel_info"));
  auto fwd = reinterpret_cast<int (*)(const qattn_fwd_params*, void*)>(::dlsym(so, "qattn_fwd"));
  auto last = reinterpret_cast<const char* (*)()>(::dlsym(so, "qattn_last_error"));
  ASSERT_TRUE(info && fwd && last);
  EXPECT_NE(std::string(info()).find("\"kernel\":\"" + t->kernel_name + "\""), std::string::npos) << info();
  EXPECT_EQ(fwd(nullptr, nullptr), QATTN_ERR_SHAPE);
  EXPECT_STREQ(last(), "params is NULL");
  // a well-formed call (fake, aligned device addresses): the checks pass and the launch code reaches
  // the CUDA runtime, which answers with a status here (no driver) and a GPU on a GPU machine
  alignas(16) static char fake[256];
  qattn_fwd_params p{};
  p.abi_version = QATTN_ABI_VERSION;
  p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.seqlen_q = 100, p.seqlen_k = 100, p.d_qk = 64, p.d_v = 64;
  p.q = p.k = p.v = p.o = fake;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = 64 * 2;
  p.q_head_stride = p.o_head_stride = 64;
  p.k_head_stride = p.v_head_stride = 64;
  p.q_batch_stride = p.o_batch_stride = 100 * 2 * 64;
  p.k_batch_stride = p.v_batch_stride = 100 * 64;
  p.softmax_scale = 0.125f;
  p.window_left = p.window_right = -1;
  p.sm_margin = -1;  // ABI 7: the SMs to leave free cannot be negative
  EXPECT_EQ(fwd(&p, nullptr), QATTN_ERR_ARG) << last();
  p.sm_margin = 8;
  const int st = fwd(&p, nullptr);
  if (!hw::detect_local_gpu(nullptr)) {
    EXPECT_TRUE(st == QATTN_ERR_LAUNCH || st == QATTN_ERR_ARCH) << st << ": " << last();
    EXPECT_STRNE(last(), "no error");
  }
  ::dlclose(so);
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
