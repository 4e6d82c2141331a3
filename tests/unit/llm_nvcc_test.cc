// Stage 2 by the LLM and the vanilla baseline: the LLM's CUDA is compiled by nvcc through the build
// driver. There is no GPU here or in CI, so the numerics step is a FAKE verifier injected by the
// test: it fails the first kernel it sees and passes the next, which exercises the repair path
// (the LLM0304 diagnostic goes back to the model). On a GPU, `qattn generate` uses the real one
// (llm::gpu_numerics, tests/gpu/verify.py). The kernels are tiny (a few seconds of nvcc each);
// like emit_compile_test this program is left out of the sanitizer run (scripts/test.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "../llm/replay_server.h"
#include "hw/gpu.h"
#include "llm/pipeline.h"
#include "llm/repair.h"
#include "llm/verify.h"
#include "support/process.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace qattn::llm {
namespace {

namespace fs = std::filesystem;
using qattn::testing::ReplayServer;

struct Setup {
  spec::AttentionSpec s;
  const hw::GpuFacts* g = nullptr;
  plan::Plan rules;
  std::optional<build::Toolchain> tc;
};

Setup setup() {
  Setup f;
  support::DiagSink d;
  f.s = *spec::spec_from_cli("llama3-8b", "", {{"gpu", "a100"}}, d);
  f.g = hw::find_gpu("a100");
  f.rules = *plan::make_plan(f.s, *f.g, d);
  f.tc = build::find_toolchain(d);
  return f;
}

// A fresh kernel cache per test process (removed at exit), so nvcc really runs every time.
struct Cache {
  fs::path dir = fs::temp_directory_path() / ("qattn-llm-nvcc-" + std::to_string(::getpid()));
  ~Cache() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
fs::path cache() {
  static Cache c;
  return c.dir;
}

Result go(const std::string& scenario, const std::string& mode, int* numerics_calls, support::DiagSink& d) {
  auto f = setup();
  if (!f.tc) return Result{};
  ReplayServer srv(scenario);
  Endpoint ep;
  ep.url = srv.url();
  ep.model = "replay-model";
  ep.retries = 0;
  Client c(ep);
  Options o;
  o.cuda.toolchain = &*f.tc;
  o.cuda.build.cache_dir = cache();
  o.cuda.numerics = [numerics_calls](const build::BuildResult& built, support::DiagSink& diags) {
    EXPECT_TRUE(fs::exists(built.library));
    if ((*numerics_calls)++ > 0) return true;
    diags.error("LLM0304", {}, "FAKE numerics verifier (no GPU in CI): b2 h32/8 s128/128 bshd FAIL max_abs_err 0.41",
                "this test fails the first kernel on purpose");
    return false;
  };
  auto r = run(f.s, *f.g, f.rules, *parse_modes(mode, d), c, o, d);
  for (const auto& x : srv.failures()) ADD_FAILURE() << "replay: " << x;
  EXPECT_EQ(srv.served(), srv.total());
  return r;
}

TEST(LlmNvcc, CudaThatCompilesButFailsNumericsIsRepaired) {
  if (!setup().tc) GTEST_SKIP() << "no nvcc / CUTLASS headers";
  support::DiagSink d;
  int calls = 0;
  auto r = go("stage2_numerics.json", "2=llm", &calls, d);
  ASSERT_TRUE(r.ok) << d.render() << r.summary_md;
  EXPECT_EQ(calls, 2);
  ASSERT_TRUE(r.translation);
  EXPECT_NE(r.translation->cuda_source.find("s *= p.softmax_scale;"), std::string::npos) << "the repaired kernel";
  EXPECT_NE(r.summary_md.find("| 2 | llm | llm | yes | 2 | 1 |"), std::string::npos) << r.summary_md;
  EXPECT_NE(r.files[0].second.find("FAKE numerics verifier"), std::string::npos) << "the transcript has the diagnostic";
}

TEST(LlmNvcc, VanillaBaseline) {
  if (!setup().tc) GTEST_SKIP() << "no nvcc / CUTLASS headers";
  support::DiagSink d;
  int calls = 1;  // the fake numerics check passes it
  auto r = go("vanilla.json", "vanilla", &calls, d);
  ASSERT_TRUE(r.ok) << d.render() << r.summary_md;
  EXPECT_TRUE(r.vanilla);
  ASSERT_TRUE(r.translation);
  EXPECT_NE(r.translation->cuda_source.find("qattn_fwd"), std::string::npos);
  EXPECT_NE(r.summary_md.find("| vanilla | llm | llm | yes | 1 | 0 |"), std::string::npos) << r.summary_md;
}

TEST(LlmNvcc, CudaWithoutTheCAbiIsRejectedBeforeNvcc) {
  build::Toolchain fake;  // never used: the ABI check comes first
  CudaCheck check;
  check.toolchain = &fake;
  support::DiagSink d;
  EXPECT_FALSE(verify_cuda("__global__ void k() {}\n", backend::Translation{}, check, d));
  EXPECT_NE(d.render().find("LLM0305"), std::string::npos) << d.render();
}

// ---- hostile replies (tests/hostile/llm) ----

fs::path hostile_dir() { return qattn::testing::llm_test_dir() / ".." / "hostile" / "llm"; }

std::string cuda_block(const fs::path& reply) {
  const std::string t = qattn::testing::slurp(reply);
  const size_t a = t.find("```cuda\n") + 8;
  return t.substr(a, t.find("```", a) - a);
}

// A stand-in nvcc that leaves a mark when it runs: an #include check must come first.
struct MarkingNvcc {
  fs::path dir = fs::temp_directory_path() / ("qattn-marking-nvcc-" + std::to_string(::getpid()));
  build::Toolchain tc;
  MarkingNvcc() {
    fs::create_directories(dir);
    std::ofstream(dir / "nvcc") << "#!/bin/sh\necho ran > '" << (dir / "ran").string() << "'\nexit 1\n";
    fs::permissions(dir / "nvcc", fs::perms::owner_all);
    tc.nvcc = (dir / "nvcc").string();
    tc.include_dirs = {"/nonexistent", (fs::path(QATTN_SOURCE_DIR) / "device").string(),
                       (fs::path(QATTN_SOURCE_DIR) / "include").string()};
  }
  ~MarkingNvcc() { fs::remove_all(dir); }
  bool ran() const { return fs::exists(dir / "ran"); }
};

TEST(LlmNvcc, HostileIncludesAreRejectedBeforeNvccRuns) {
  for (const char* f : {"include_dev_zero.md", "include_parent_passwd.md", "include_etc_passwd.md",
                        "include_hidden_after_comment.md", "include_macro.md", "incbin.md"}) {
    SCOPED_TRACE(f);
    MarkingNvcc nvcc;
    CudaCheck check;
    check.toolchain = &nvcc.tc;
    check.build.cache_dir = nvcc.dir / "cache";
    support::DiagSink d;
    EXPECT_FALSE(verify_cuda(cuda_block(hostile_dir() / f), backend::Translation{}, check, d));
    EXPECT_NE(d.render().find("BUILD0301"), std::string::npos) << d.render();
    EXPECT_FALSE(nvcc.ran()) << "nvcc must not see the source";
  }
}

TEST(LlmNvcc, AllowedIncludesPass) {
  support::DiagSink d;
  EXPECT_TRUE(build::check_includes(cuda_block(qattn::testing::llm_test_dir() / "replies" / "vanilla_naive.md"), d))
      << d.render();
  EXPECT_TRUE(build::check_includes("#include <cute/tensor.hpp>\n#include \"qattn/runtime.cuh\"\n# include <cstdint>\n"
                                    "#include <cutlass/numeric_types.h>\n#include <cuda/std/cstdint>\n"
                                    "#include <mma.h>\n// #include </etc/passwd> in a comment\n",
                                    d))
      << d.render();
  for (const char* bad : {"#include \"qattn/../../etc/passwd\"\n", "#include <fstream>\n", "#include_next <stdio.h>\n",
                          "#\\\ninclude \"/etc/passwd\"\n", "%:include \"/etc/passwd\"\n", "#embed \"/etc/passwd\"\n"}) {
    support::DiagSink b;
    EXPECT_FALSE(build::check_includes(bad, b)) << bad;
    EXPECT_NE(b.render().find("BUILD0301"), std::string::npos) << bad;
  }
}

TEST(LlmNvcc, DiagnosticsSentBackCarryNoContentOfFilesOutsideTheBuild) {
  // nvcc's log as BUILD0201 quotes it when a header of the system reached the compiler
  support::DiagSink d("kernel.cu");
  d.error("BUILD0201", {},
          "nvcc failed for k (exit 1)\n    /etc/passwd(1): error: expected a declaration\n"
          "    root:x:0:0:root:/root:/bin/bash error\n    ^\n"
          "    In file included from /usr/include/secret.h:3: error\n        secret-token error\n"
          "    /tmp/qattn-cache/ab/.tmp-ab12/kernel.cu(14): error: identifier \"softmax\" is undefined",
          "the full log is in /tmp/qattn-cache/ab/.tmp-ab12/build.log");
  const std::string sent = diagnostics_for_llm(d);
  EXPECT_EQ(sent.find("root:x"), std::string::npos) << sent;
  EXPECT_EQ(sent.find("/etc/passwd"), std::string::npos) << sent;
  EXPECT_EQ(sent.find("secret"), std::string::npos) << sent;
  EXPECT_NE(sent.find("kernel.cu(14): error: identifier \"softmax\" is undefined"), std::string::npos) << sent;
  EXPECT_NE(sent.find("left out"), std::string::npos) << sent;
  EXPECT_NE(sent.find("build.log"), std::string::npos) << "the hint stays";
}

// The reply's constructor runs whenever its library is loaded. Loaded in the sandbox (as
// gpu_numerics and the GPU step of `qattn generate` do), it writes in its scratch folder only.
TEST(LlmNvcc, HostileHostCodeRunsInTheSandboxAndWritesNothingOutside) {
  auto f = setup();
  if (!f.tc) GTEST_SKIP() << "no nvcc / CUTLASS headers";
  const char* py = std::getenv("PYTHON");
  const std::string python = py && *py ? py : "python3";
  for (const char* m : {"/tmp/qattn-hostile-outside.txt", "/tmp/qattn-hostile-system.txt"}) fs::remove(m);
  CudaCheck check;
  check.toolchain = &*f.tc;
  check.build.cache_dir = cache();
  support::DiagSink d;
  backend::Translation meta;
  meta.kernel_name = "hostile_on_load";
  meta.arch = "sm80";
  meta.nvcc_flags = {"-gencode=arch=compute_80,code=sm_80", "-std=c++17"};
  auto t = verify_cuda(cuda_block(hostile_dir() / "writes_on_load.md"), meta, check, d);
  ASSERT_TRUE(t) << d.render();
  support::DiagSink bd;
  auto built = build::build_library(*t, *f.tc, bd, check.build);
  ASSERT_TRUE(built) << bd.render();
  const fs::path scratch = cache() / "scratch";
  fs::create_directories(scratch);
  const auto r = support::run_process({python, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('loaded')",
                                       built->library.string()},
                                      untrusted_process(scratch, 120, false));
  if (!r.started && r.error.find("sandbox") != std::string::npos) GTEST_SKIP() << r.error;
  ASSERT_TRUE(r.started) << r.error;
  ASSERT_NE(r.output.find("loaded"), std::string::npos) << r.output;
  const std::string note = qattn::testing::slurp(scratch / "hostile-inside.txt");
  EXPECT_NE(note.find("constructor ran; outside file: refused"), std::string::npos) << note;
  EXPECT_FALSE(fs::exists("/tmp/qattn-hostile-outside.txt"));
  EXPECT_FALSE(fs::exists("/tmp/qattn-hostile-system.txt"));
}

// On a GPU machine: CUDA initialises inside the sandbox the numerics check runs in, and which
// protection (if any) stops it is named (the driver needs its IPC files under /dev/shm).
TEST(LlmNvcc, CudaInitialisesInTheSandbox) {
  std::string why;
  if (!hw::detect_local_gpu(&why)) GTEST_SKIP() << "no GPU here: " << why;
  const char* py = std::getenv("PYTHON");
  const std::string python = py && *py ? py : "python3";
  const fs::path scratch = cache() / "cuda-probe";
  fs::create_directories(scratch);
  const std::vector<std::string> argv = {python, "-c", "import torch; x = torch.ones(4, device='cuda'); print('cuda ok', float(x.sum()))"};
  struct Variant { const char* name; bool userns; bool shm; };
  bool full_ok = false;
  for (const Variant v : {Variant{"as verify_cuda.cc runs it", true, true}, Variant{"no /dev/shm", true, false},
                          Variant{"no user namespace, no /dev/shm", false, false}}) {
    auto po = untrusted_process(scratch, 120, false);
    po.sandbox.isolate_network = v.userns;
    if (!v.shm) po.sandbox.also_writable.clear();
    const auto r = support::run_process(argv, po);
    const bool ok = r.started && r.status == 0 && r.output.find("cuda ok") != std::string::npos;
    std::string tail = r.output.size() > 300 ? r.output.substr(r.output.size() - 300) : r.output;
    std::fprintf(stderr, "      sandbox variant '%s': %s\n%s\n", v.name, ok ? "CUDA ok" : "CUDA FAILED", ok ? "" : (r.error + tail).c_str());
    if (v.shm && v.userns) full_ok = ok;
  }
  EXPECT_TRUE(full_ok) << "CUDA does not start in the numerics check's sandbox";
}

// On a GPU machine: the hostile reply through the whole vanilla stage with the real numerics check
// (python -m qattn.verify in the sandbox). Its kernel is correct, so it passes; its constructor ran
// in the sandbox and wrote nothing outside.
TEST(LlmNvcc, HostileReplyOnTheGpuIsVerifiedInTheSandbox) {
  auto f = setup();
  if (!f.tc) GTEST_SKIP() << "no nvcc / CUTLASS headers";
  std::string why;
  const auto gpu = hw::detect_local_gpu(&why);
  if (!gpu) GTEST_SKIP() << "no GPU here: " << why;
  for (const char* m : {"/tmp/qattn-hostile-outside.txt", "/tmp/qattn-hostile-system.txt"}) fs::remove(m);
  const char* py = std::getenv("PYTHON");
  ReplayServer srv("../hostile/llm/writes_on_load.json");
  Endpoint ep;
  ep.url = srv.url();
  ep.model = "replay-model";
  ep.retries = 0;
  Client c(ep);
  Options o;
  o.cuda.toolchain = &*f.tc;
  o.cuda.build.cache_dir = cache();
  o.cuda.build.also_sm = gpu->cc_major * 10 + gpu->cc_minor;
  // the numerics check's own diagnostics are shown when it fails (the repair turn consumes them)
  const NumericsCheck check = gpu_numerics(py && *py ? py : "python3");
  o.cuda.numerics = [&check](const build::BuildResult& b, support::DiagSink& dd) {
    const bool ok = check(b, dd);
    if (!ok) std::fprintf(stderr, "numerics check failed:\n%s\n", dd.render().c_str());
    return ok;
  };
  support::DiagSink d;
  auto r = run(f.s, *f.g, f.rules, *parse_modes("vanilla", d), c, o, d);
  EXPECT_TRUE(r.ok) << d.render() << r.summary_md;
  EXPECT_FALSE(r.unverified);
  EXPECT_NE(r.summary_md.find("# LLM run: succeeded"), std::string::npos) << r.summary_md;
  EXPECT_FALSE(fs::exists("/tmp/qattn-hostile-outside.txt")) << "written outside the sandbox";
  EXPECT_FALSE(fs::exists("/tmp/qattn-hostile-system.txt")) << "system() ran outside the sandbox";
}

}  // namespace
}  // namespace qattn::llm
