// Stage 2 output compiles: a small representative set of generated kernels is built with nvcc
// (-cubin, no GPU needed) and the PTX is checked for the instructions the architecture lowering
// promises: mma.sync m16n8k16 + cp.async (sm80), m16n8k8 without cp.async (sm75), m16n8k32 e4m3
// (sm89), wgmma + TMA + setmaxnreg with no serialised wgmma (sm90a). ptxas's register and spill counts are printed. Skipped (GTEST_SKIP, with the reason) when
// nvcc or the CUTLASS/CuTe headers are missing. About a minute per kernel on two cores; the three
// compile in parallel.
#include <gtest/gtest.h>
#include <vector>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>

#include "backend/translate.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "support/process.h"

namespace qattn::backend {
namespace {

namespace fs = std::filesystem;

// Runs argv (no shell) and returns its stdout + stderr; *rc its exit status.
std::string run(const std::vector<std::string>& argv, int* rc) {
  const auto r = support::run_process(argv, {}, true);
  *rc = r.started ? r.status : -1;
  return r.started ? r.output : r.error;
}

std::string find_nvcc() {
  if (const char* e = std::getenv("NVCC"); e && fs::exists(e)) return e;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');)
      if (!d.empty() && ::access((fs::path(d) / "nvcc").c_str(), X_OK) == 0) return (fs::path(d) / "nvcc").string();
  }
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return "";
}

std::string find_cutlass() {
  if (const char* e = std::getenv("CUTLASS_INCLUDE"); e && fs::exists(fs::path(e) / "cute" / "tensor.hpp")) return e;
  fs::path local = fs::path(QATTN_SOURCE_DIR) / ".cutlass" / "include";
  if (fs::exists(local / "cute" / "tensor.hpp")) return local.string();
  int rc = 0;
  std::string p = run({"python3", "-c", "import cutlass_library;print(cutlass_library.source_path+'/include')"}, &rc);
  while (!p.empty() && (p.back() == '\n' || p.back() == '\r')) p.pop_back();
  if (rc == 0 && fs::exists(fs::path(p) / "cute" / "tensor.hpp")) return p;
  return "";
}

struct Kernel {
  std::string name, preset, gpu;
  std::map<std::string, std::string> flags;
  std::vector<std::string> ptx_has, ptx_lacks;
  bool backward = false;  // plan the backward pass (qattn plan --backward)
  bool combine = false;   // plan the combine step (qattn plan --combine)
  std::vector<std::string> extra_flags = {};  // more nvcc flags (e.g. -DQATTN_WATCHDOG_CYCLES=...)
};

struct Built {
  int rc = 0;
  std::string log, ptx;
};

Built build(const Kernel& k, const std::string& nvcc, const std::string& cutlass, const fs::path& dir) {
  Built b;
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset(k.preset);
  auto flags = k.flags;
  flags["gpu"] = k.gpu;
  if (!spec::apply_flags(s, flags, d)) return {1, d.render(), ""};
  const hw::GpuFacts* g = hw::find_gpu(k.gpu);
  plan::PlanOptions opts;
  opts.backward = k.backward;
  opts.combine = k.combine;
  auto p = plan::make_plan(s, *g, d, opts);
  if (!p) return {1, d.render(), ""};
  auto t = translate_text(p->code, plan::make_target(*g), d);
  if (!t) return {1, d.render(), ""};
  const fs::path cu = dir / (k.name + ".cu");
  std::ofstream(cu) << t->cuda_source;
  std::vector<std::string> argv = {nvcc};
  argv.insert(argv.end(), t->nvcc_flags.begin(), t->nvcc_flags.end());
  argv.insert(argv.end(), k.extra_flags.begin(), k.extra_flags.end());
  for (const std::string& a : {std::string("-Xptxas"), std::string("-v"), std::string("-cubin"), std::string("--keep"),
                               std::string("--keep-dir"), dir.string(), "-I" + (fs::path(QATTN_SOURCE_DIR) / "device").string(),
                               "-I" + (fs::path(QATTN_SOURCE_DIR) / "include").string(), "-I" + cutlass, std::string("-o"),
                               (dir / (k.name + ".cubin")).string(), cu.string()})
    argv.push_back(a);
  b.log = run(argv, &b.rc);
  std::ifstream f(dir / (k.name + ".ptx"));
  std::stringstream ss;
  ss << f.rdbuf();
  b.ptx = ss.str();
  return b;
}

TEST(EmitCompile, RepresentativeKernelsBuildWithTheirInstructions) {
  const std::string nvcc = find_nvcc();
  if (nvcc.empty()) GTEST_SKIP() << "nvcc not found (set NVCC or install the CUDA toolkit): generated kernels not compiled";
  const std::string cutlass = find_cutlass();
  if (cutlass.empty())
    GTEST_SKIP() << "CUTLASS/CuTe headers not found (set CUTLASS_INCLUDE, or pip install nvidia-cutlass==4.2.0.0): "
                    "generated kernels not compiled";
  const std::vector<Kernel> kernels = {
      {"sm80_bf16_d128_causal_gqa", "llama3-8b", "a100", {}, {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "cp.async.cg.shared.global", "ldmatrix.sync.aligned.x4.trans.m8n8.shared.b16"}, {}},
      {"sm75_fp16_d64", "bert-large", "t4", {{"dtype", "fp16"}}, {"mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", "ldmatrix.sync.aligned.x4.m8n8.shared.b16"}, {"cp.async"}},
      {"sm89_fp8_d128_causal", "llama2-7b", "l40s", {{"dtype", "fp8_e4m3"}}, {"mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "cp.async.cg.shared.global", "cvt.rn.satfinite.e4m3x2.f32"}, {}},
      {"sm90_bf16_d128_causal_gqa", "llama3-8b", "h100", {}, {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.4d.shared::cluster.global", "setmaxnreg.inc.sync.aligned.u32 232", "setmaxnreg.dec.sync.aligned.u32 40", "mbarrier.try_wait.parity", "atom.global.add"}, {"mma.sync"}},
      {"sm90_bf16_d64_none", "llama3.2-1b", "h100", {{"mask", "none"}}, {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "setmaxnreg.inc.sync.aligned.u32 160", "setmaxnreg.dec.sync.aligned.u32 32"}, {"mma.sync", "atom.global.add", "trap;", "vprintf"}},
      // ... built with the mbarrier watchdog (a debugging build: tests/gpu/nvcc_watchdog.sh): the waits read the clock, report and trap
      {"sm90_bf16_d64_none_watchdog", "llama3.2-1b", "h100", {{"mask", "none"}}, {"mbarrier.try_wait.parity", "%clock64", "vprintf", "trap;"}, {"mma.sync"}, false, false, {"-DQATTN_WATCHDOG_CYCLES=1000000"}},
      // split keys written in TL (the part a Grid axis folded into the batch; ABI 8) over a paged cache: 5-D packed Q / O maps
      // absorbed MLA (v_from_k): split-columns consumers, V a view of K's paged slots, 128 heads packed into 64-row tiles
      {"sm90_bf16_mla_decode_paged", "deepseek-v3-mla-prefill", "h100", {{"mask", "none"}, {"heads", "128/1"}, {"head-dim", "576/512"}, {"seqlen", "1/4096"}, {"kv-cache", "paged"}, {"v-from-k", "true"}}, {"wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16", "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "fence.proxy.async.shared::cta", "bar.sync", "cp.async.bulk.tensor.5d.shared::cluster.global"}, {"mma.sync"}},
      {"sm90_bf16_d128_split_paged", "llama3-8b", "h100", {{"mask", "none"}, {"seqlen", "1/8192"}, {"kv-cache", "paged"}, {"split-keys", "true"}}, {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.5d.shared::cluster.global", "cp.async.bulk.tensor.4d.shared::cluster.global", "createpolicy.fractional.L2::evict_first.b64", "complete_tx::bytes.L2::cache_hint"}, {"mma.sync"}},
      // ragged queries over a paged cache with GQA packing and split keys (a serving step): 5-D packed Q box at each
      // sequence's first packed row, the parts' rows one after another
      {"sm90_bf16_d128_varlen_paged_packed_split", "llama3-8b", "h100", {{"varlen", "true"}, {"kv-cache", "paged"}, {"split-keys", "true"}}, {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.5d.shared::cluster.global", "st.global.v4"}, {"mma.sync"}},
      // the backward pass (src/backend/bwd): mma.sync, ldmatrix.trans for P^T / dS^T, fp32 atomics for dQ, dK, dV
      // ... on Hopper: wgmma, the query ring by TMA on mbarriers (its fp32 rows by cp.async arriving on them), dS^T handed between
      // the warpgroups on named barriers, dQ added by TMA bulk reductions, GQA's dK / dV by float4 reductions
      {"bwd_sm90_bf16_d128_causal_gqa", "llama3-8b", "h100", {}, {"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "cp.async.bulk.tensor.4d.shared::cluster.global", "cp.async.mbarrier.arrive.noinc.shared::cta.b64", "mbarrier.try_wait.parity", "bar.arrive", "red.global.add.v4.f32", "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group", "cp.async.bulk.wait_group.read"}, {"mma.sync"}, true},
      // ... MHA: the 16-bit dK, dV stored by TMA from stages in the loop's dead buffers
      {"bwd_sm90_bf16_d128_causal_mha", "llama2-7b", "h100", {}, {"cp.async.bulk.tensor.4d.global.shared::cta.bulk_group", "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"}, {"mma.sync", "red.global.add"}, true},
      {"bwd_sm80_bf16_d64_causal_gqa", "llama3.2-1b", "a100", {}, {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.x4.trans.m8n8.shared.b16", "cp.async.cg.shared.global", "atom.global.add.f32"}, {"wgmma"}, true},
      // the combine (src/backend/combine): no MMA, fast exp2 / log2, fp32 math on row-distributed tiles
      {"combine_sm80_bf16_d128", "llama3-8b", "a100", {}, {"ex2.approx", "lg2.approx"}, {"mma.sync", "wgmma", "atom.global"}, false, true},
  };
  const fs::path dir = fs::temp_directory_path() / ("qattn_emit_compile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::future<Built>> jobs;
  for (const auto& k : kernels) jobs.push_back(std::async(std::launch::async, build, k, nvcc, cutlass, dir));
  for (size_t i = 0; i < kernels.size(); ++i) {
    Built b = jobs[i].get();
    const Kernel& k = kernels[i];
    ASSERT_EQ(b.rc, 0) << k.name << ":\n" << b.log;
    for (const auto& s : k.ptx_has) EXPECT_NE(b.ptx.find(s), std::string::npos) << k.name << ": PTX lacks " << s;
    for (const auto& s : k.ptx_lacks) EXPECT_EQ(b.ptx.find(s), std::string::npos) << k.name << ": PTX has " << s;
    std::smatch m;
    std::string regs = std::regex_search(b.log, m, std::regex(R"(Used (\d+) registers)")) ? m[1].str() : "?";
    std::string spill = std::regex_search(b.log, m, std::regex(R"((\d+) bytes spill stores)")) ? m[1].str() : "?";
    std::printf("[ ptxas    ] %s: %s registers, %s bytes spill stores\n", k.name.c_str(), regs.c_str(), spill.c_str());
    EXPECT_NE(regs, "?") << b.log;
    // ptxas serialising the wgmmas (a register touched while one is in flight) costs the overlap
    EXPECT_EQ(b.log.find("C7520"), std::string::npos) << k.name << ": wgmma serialised\n" << b.log;
    EXPECT_EQ(b.log.find("C7519"), std::string::npos) << k.name << ": warpgroup.arrive injected\n" << b.log;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The Hopper launch code's L2 promotion rule (tests/emit/launch_rule_check.cc), on the host with the
// CUDA headers: 128 bytes for K and V exactly in one-query-tile launches (decoding); and check_fwd_params
// on the C ABI's splits (ABI 8); the TL integer arithmetic of device/qattn/intmath.cuh.
TEST(EmitCompile, LaunchL2PromotionRuleOnTheHost) {
  const std::string nvcc = find_nvcc();
  if (nvcc.empty()) GTEST_SKIP() << "nvcc (the CUDA headers) not found: launch rule check skipped";
  const fs::path cuda_include = fs::path(nvcc).parent_path().parent_path() / "include";
  const fs::path dir = fs::temp_directory_path() / ("qattn_launch_rule_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string exe = (dir / "launch_rule_check").string();
  int rc = 0;
  std::string log = run({"c++", "-std=c++17", "-O1", "-I" + cuda_include.string(),
                         "-I" + (fs::path(QATTN_SOURCE_DIR) / "device").string(), "-I" + (fs::path(QATTN_SOURCE_DIR) / "include").string(),
                         (fs::path(QATTN_SOURCE_DIR) / "tests" / "emit" / "launch_rule_check.cc").string(), "-o", exe},
                        &rc);
  ASSERT_EQ(rc, 0) << log;
  log = run({exe}, &rc);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("launch rule: 12 of 12 cases as expected"), std::string::npos) << log;
  EXPECT_NE(log.find("ABI 8 splits: 9 of 9 cases as expected"), std::string::npos) << log;
  EXPECT_NE(log.find("dense tiles: 7 of 7 cases as expected"), std::string::npos) << log;
  EXPECT_NE(log.find("intmath: 12609 of 12609 cases as expected"), std::string::npos) << log;
  EXPECT_NE(log.find("grid: 4 of 4 cases as expected"), std::string::npos) << log;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The layout algebra of the device runtime (tests/emit/host_layout_check.cc), on the host.
TEST(EmitCompile, DeviceRuntimeLayoutsOnTheHost) {
  const std::string nvcc = find_nvcc();
  const std::string cutlass = find_cutlass();
  if (nvcc.empty() || cutlass.empty()) GTEST_SKIP() << "nvcc or the CUTLASS/CuTe headers not found: layout check skipped";
  const fs::path cuda_include = fs::path(nvcc).parent_path().parent_path() / "include";
  const fs::path dir = fs::temp_directory_path() / ("qattn_layout_check_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string exe = (dir / "host_layout_check").string();
  int rc = 0;
  std::string log = run({"c++", "-std=c++17", "-O1", "-w", "-I" + cutlass, "-I" + (cuda_include / "cccl").string(),
                         "-I" + cuda_include.string(), "-I" + (fs::path(QATTN_SOURCE_DIR) / "device").string(),
                         (fs::path(QATTN_SOURCE_DIR) / "tests" / "emit" / "host_layout_check.cc").string(), "-o", exe},
                        &rc);
  ASSERT_EQ(rc, 0) << log;
  log = run({exe}, &rc);
  EXPECT_EQ(rc, 0) << log;
  std::printf("%s", log.c_str());
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace qattn::backend
