// Stage 2 by the LLM and the vanilla baseline: the LLM's CUDA is compiled by nvcc through the build
// driver. There is no GPU here or in CI, so the numerics step is a FAKE verifier injected by the
// test: it fails the first kernel it sees and passes the next, which exercises the repair path
// (the LLM0304 diagnostic goes back to the model). On a GPU, `qattn generate` uses the real one
// (llm::gpu_numerics, tests/gpu/verify.py). The kernels are tiny (a few seconds of nvcc each);
// like emit_compile_test this program is left out of the sanitizer run (scripts/test.sh).
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "../llm/replay_server.h"
#include "hw/gpu.h"
#include "llm/pipeline.h"
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

}  // namespace
}  // namespace qattn::llm
