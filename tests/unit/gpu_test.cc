// GPU facts: the embedded data/gpus.json loads with no diagnostic and every entry is sane and
// matches its datasheet; lookups by alias; target-aware spec checks; the driver probe never crashes.
#include <gtest/gtest.h>

#include "diag_test_util.h"

#include <nlohmann/json.hpp>

#include "hw/gpu.h"
#include "hw/target.h"

using namespace qattn::hw;
using qattn::spec::AttentionSpec;
using qattn::spec::DType;
using qattn::support::Diagnostic;

namespace {

using qattn::test::contains;
using qattn::test::find;

const GpuFacts& gpu(const char* name) {
  const GpuFacts* g = find_gpu(name);
  EXPECT_NE(g, nullptr) << name;
  static GpuFacts none;
  return g ? *g : none;
}

}  // namespace

// ---- the table ----------------------------------------------------------------------------
TEST(gpuTable, EmbeddedJsonLoadsCleanly) {
  std::vector<GpuFacts> out;
  DiagSink d;
  EXPECT_TRUE(parse_gpus(gpus_json(), out, d)) << d.render();
  EXPECT_EQ(d.all().size(), 0u) << d.render();
  EXPECT_EQ(out.size(), gpus().size());
  ASSERT_GE(gpus().size(), 10u);
  for (const char* n : {"T4", "RTX 8000", "A100 80GB", "A100 40GB", "A10", "RTX 3090", "L40S", "RTX 4090",
                        "H100 SXM", "H200"})
    EXPECT_NE(find_gpu(n), nullptr) << n;
}

TEST(gpuTable, EveryEntryIsSane) {
  for (const auto& g : gpus()) {
    SCOPED_TRACE(g.name);
    EXPECT_FALSE(g.name.empty());
    EXPECT_EQ(g.arch, "sm" + std::to_string(g.sm));
    EXPECT_GT(g.sm_count, 0);
    EXPECT_LE(g.smem_per_block_optin, g.smem_per_sm);
    EXPECT_LE(g.smem_per_block_default, g.smem_per_block_optin);
    EXPECT_EQ(g.smem_per_block_default, 48 * 1024);
    EXPECT_EQ(g.regs_per_sm, 65536);
    EXPECT_EQ(g.regs_per_thread_max, 255);
    EXPECT_LE(g.max_threads_per_block, g.max_threads_per_sm);
    EXPECT_GT(g.l2_bytes, 0);
    EXPECT_GT(g.memory_bandwidth_gbps, 0);
    EXPECT_GT(g.memory_gb, 0);
    EXPECT_GT(g.boost_clock_mhz, 0);
    EXPECT_GT(g.fp32_tflops, 0);
    EXPECT_TRUE(g.supports(DType::F16));
    EXPECT_GT(g.peak_tflops(DType::F16), g.fp32_tflops);  // tensor cores beat CUDA cores
    EXPECT_EQ(g.features.bf16, g.sm >= 80);
    EXPECT_EQ(g.features.fp8, g.sm >= 89);
    EXPECT_EQ(g.features.cp_async, g.sm >= 80);
    EXPECT_TRUE(g.features.ldmatrix);
    EXPECT_EQ(g.features.tma, g.sm >= 90);
    EXPECT_EQ(g.features.wgmma, g.sm >= 90);
    EXPECT_EQ(g.features.setmaxnreg, g.sm >= 90);
    if (g.features.fp8) {
      EXPECT_NEAR(g.peak_tflops(DType::F8E4M3), 2 * g.peak_tflops(DType::BF16), 10.0);
    }
    if (g.features.bf16) {
      EXPECT_EQ(g.peak_tflops(DType::BF16), g.peak_tflops(DType::F16));
    }
    // Tensor-core instruction shapes per architecture.
    const MmaInstr* f16 = g.preferred_mma(DType::F16);
    ASSERT_NE(f16, nullptr);
    if (g.sm == 75) {
      EXPECT_EQ(f16->text, "mma.sync.m16n8k8");
      EXPECT_FALSE(g.supports(DType::BF16));
    } else if (g.sm < 90) {
      EXPECT_EQ(f16->text, "mma.sync.m16n8k16");
      EXPECT_EQ(g.preferred_mma(DType::BF16)->text, "mma.sync.m16n8k16");
    } else {
      EXPECT_EQ(f16->kind, "wgmma");
      EXPECT_EQ(f16->m, 64);
      EXPECT_TRUE(f16->n_variable());
      EXPECT_EQ(f16->k, 16);
      EXPECT_EQ(g.preferred_mma(DType::F8E4M3)->text, "wgmma.m64nNk32");
      EXPECT_TRUE(contains(g.nvcc_gencode, "compute_90a,code=sm_90a"));
    }
    if (g.sm == 89) {
      EXPECT_EQ(g.preferred_mma(DType::F8E4M3)->text, "mma.sync.m16n8k32");
    }
    if (g.sm < 89) {
      EXPECT_EQ(g.preferred_mma(DType::F8E4M3), nullptr);
    }
    EXPECT_TRUE(contains(g.nvcc_gencode, "code=sm_" + std::to_string(g.sm)));
  }
}

TEST(gpuTable, DatasheetNumbers) {
  const GpuFacts& h100 = gpu("h100");
  EXPECT_EQ(h100.sm_count, 132);
  EXPECT_EQ(h100.smem_per_sm, 228 * 1024);
  EXPECT_EQ(h100.smem_per_block_optin, 227 * 1024);
  EXPECT_DOUBLE_EQ(h100.peak_tflops(DType::BF16), 989.4);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth_gbps, 3350);
  const GpuFacts& h200 = gpu("h200");
  EXPECT_DOUBLE_EQ(h200.memory_bandwidth_gbps, 4800);
  EXPECT_DOUBLE_EQ(h200.memory_gb, 141);
  EXPECT_EQ(h200.sm_count, 132);
  const GpuFacts& a100 = gpu("a100");
  EXPECT_EQ(a100.sm_count, 108);
  EXPECT_EQ(a100.smem_per_sm, 164 * 1024);
  EXPECT_EQ(a100.smem_per_block_optin, 163 * 1024);
  EXPECT_DOUBLE_EQ(a100.peak_tflops(DType::F16), 312);
  EXPECT_DOUBLE_EQ(a100.memory_bandwidth_gbps, 2039);
  EXPECT_DOUBLE_EQ(gpu("A100-SXM4-40GB").memory_bandwidth_gbps, 1555);
  const GpuFacts& t4 = gpu("t4");
  EXPECT_EQ(t4.sm_count, 40);
  EXPECT_EQ(t4.smem_per_sm, 64 * 1024);
  EXPECT_DOUBLE_EQ(t4.peak_tflops(DType::F16), 65);
  const GpuFacts& l40s = gpu("l40s");
  EXPECT_EQ(l40s.sm_count, 142);
  EXPECT_EQ(l40s.smem_per_sm, 100 * 1024);
  EXPECT_EQ(l40s.smem_per_block_optin, 99 * 1024);
  EXPECT_NEAR(l40s.peak_tflops(DType::F16), 362, 1);
  EXPECT_DOUBLE_EQ(l40s.peak_tflops(DType::F8E4M3), 733);
  EXPECT_EQ(gpu("rtx 4090").sm_count, 128);
  EXPECT_EQ(gpu("rtx 4090").smem_per_sm, 100 * 1024);
  EXPECT_EQ(gpu("a10").sm_count, 72);
  EXPECT_EQ(gpu("rtx 3090").sm_count, 82);
  EXPECT_EQ(gpu("rtx 8000").sm_count, 72);
}

TEST(gpuTable, BrokenTablesAreDiagnosed) {
  auto doc = nlohmann::json::parse(gpus_json());
  auto check = [](const nlohmann::json& j, const char* code) {
    std::vector<GpuFacts> out;
    DiagSink d;
    EXPECT_FALSE(parse_gpus(j.dump(), out, d));
    EXPECT_NE(find(d, code), nullptr) << code << "\n" << d.render();
  };
  {
    std::vector<GpuFacts> out;
    DiagSink d;
    EXPECT_FALSE(parse_gpus("{\"gpus\": [", out, d));
    EXPECT_NE(find(d, "HW0101"), nullptr);
  }
  auto j = doc;
  j["gpus"][0]["smem_per_sm_kb"] = 64;
  check(j, "HW0102");
  j = doc;
  j["gpus"][0].erase("sm_count");
  check(j, "HW0103");
  j = doc;
  j["gpus"][0]["sm_count"] = "forty";
  check(j, "HW0104");
  j = doc;
  j["gpus"][0]["smem_per_block_optin_bytes"] = 1 << 20;
  check(j, "HW0106");
  j = doc;
  j["gpus"][0]["features"]["bf16"] = true;  // T4 has no bf16 mma
  check(j, "HW0106");
  j = doc;
  j["gpus"][1]["aliases"].push_back("h100");  // alias used twice
  check(j, "HW0106");
  j = doc;
  j["gpus"][0]["mma"]["fp16"] = {"mma.sync.m16n8"};
  check(j, "HW0104");
}

// ---- lookups ------------------------------------------------------------------------------
TEST(gpuLookup, Aliases) {
  const GpuFacts* h100 = find_gpu("H100 SXM");
  ASSERT_NE(h100, nullptr);
  for (const char* a : {"h100", "H100-SXM", "h100_sxm", "sm90", "sm_90a", "NVIDIA H100 80GB HBM3", "H100-SXM5"})
    EXPECT_EQ(find_gpu(a), h100) << a;
  EXPECT_EQ(find_gpu("NVIDIA A100-SXM4-40GB")->name, "A100 40GB");
  EXPECT_EQ(find_gpu("A100")->name, "A100 80GB");
  EXPECT_EQ(find_gpu("sm80")->name, "A100 80GB");
  EXPECT_EQ(find_gpu("Tesla T4")->name, "T4");
  EXPECT_EQ(find_gpu("sm75")->name, "T4");
  EXPECT_EQ(find_gpu("NVIDIA GeForce RTX 4090")->name, "RTX 4090");
  EXPECT_EQ(find_gpu("Quadro RTX 8000")->name, "RTX 8000");
  EXPECT_EQ(find_gpu("NVIDIA A10")->name, "A10");
  EXPECT_EQ(find_gpu("NVIDIA H200")->name, "H200");
  EXPECT_EQ(find_gpu("NVIDIA L40S")->name, "L40S");
  EXPECT_EQ(find_gpu(""), nullptr);
  EXPECT_EQ(find_gpu("h300"), nullptr);
}

TEST(gpuLookup, UnknownListsKnownGpus) {
  DiagSink d;
  EXPECT_EQ(find_gpu("H10O", d), nullptr);
  const Diagnostic* x = find(d, "HW0201");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(contains(x->message, "H10O"));
  EXPECT_TRUE(contains(x->hint, "did you mean \"H100 SXM\"")) << x->hint;
  EXPECT_TRUE(contains(x->hint, "T4")) << x->hint;
  EXPECT_TRUE(contains(x->hint, "H200")) << x->hint;
}

TEST(gpuLookup, MatchDetectedDevice) {
  std::string how;
  EXPECT_EQ(match_gpu("NVIDIA H100 80GB HBM3", 9, 0, 132, &how)->name, "H100 SXM");
  EXPECT_EQ(how, "name");
  // Unknown Hopper board: matched by compute capability, nearest SM count.
  EXPECT_EQ(match_gpu("NVIDIA H100 NVL", 9, 0, 132, &how)->name, "H100 SXM");
  EXPECT_TRUE(contains(how, "compute capability 9.0")) << how;
  EXPECT_EQ(match_gpu("NVIDIA H800 PCIe", 9, 0, 114, &how)->name, "H100 PCIe");
  // A name that disagrees with the compute capability is not trusted.
  EXPECT_EQ(match_gpu("A100", 8, 6, 84, &how)->name, "RTX 3090");
  EXPECT_EQ(match_gpu("NVIDIA B200", 10, 0, 148, &how), nullptr);
}

// ---- target-aware checks ------------------------------------------------------------------
TEST(gpuTarget, PresetsValidOnHopperAndAmpere) {
  for (const auto& p : qattn::spec::presets())
    for (const char* g : {"h100", "h200", "a100", "l40s", "rtx 4090", "a10"}) {
      DiagSink d;
      EXPECT_TRUE(validate_for_gpu(p.spec, gpu(g), d)) << p.spec.name << " on " << g << "\n" << d.render();
    }
}

TEST(gpuTarget, Fp8OnA100Rejected) {
  AttentionSpec s = *qattn::spec::find_preset("llama3-8b");
  s.dtype = DType::F8E4M3;
  DiagSink d;
  EXPECT_FALSE(validate_for_gpu(s, gpu("a100"), d));
  const Diagnostic* x = find(d, "SPEC0231");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_TRUE(contains(x->message, "A100")) << x->message;
  EXPECT_TRUE(contains(x->message, "sm80")) << x->message;
  EXPECT_TRUE(contains(x->message, "no fp8_e4m3 path")) << x->message;
  EXPECT_TRUE(contains(x->message, "fp16, bf16")) << x->message;
  EXPECT_TRUE(contains(x->message, "L40S")) << x->message;
  EXPECT_TRUE(contains(x->message, "H200")) << x->message;
  for (const char* ok : {"l40s", "rtx 4090", "h100", "h200"}) {
    DiagSink d2;
    EXPECT_TRUE(validate_for_gpu(s, gpu(ok), d2)) << ok;
  }
  DiagSink d3;
  EXPECT_FALSE(validate_for_gpu(s, gpu("t4"), d3));
  EXPECT_NE(find(d3, "SPEC0231"), nullptr);
}

TEST(gpuTarget, Bf16OnTuringRejectedWithAlternative) {
  AttentionSpec s = *qattn::spec::find_preset("llama2-7b");  // bf16
  for (const char* g : {"t4", "rtx 8000"}) {
    DiagSink d;
    EXPECT_FALSE(validate_for_gpu(s, gpu(g), d));
    const Diagnostic* x = find(d, "SPEC0230");
    ASSERT_NE(x, nullptr) << d.render();
    EXPECT_TRUE(contains(x->message, "sm75")) << x->message;
    EXPECT_TRUE(contains(x->message, "Turing")) << x->message;
    EXPECT_TRUE(contains(x->message, "available on")) << x->message;
    EXPECT_TRUE(contains(x->message, "fp16")) << x->message;
    EXPECT_TRUE(contains(x->hint, "\"dtype\": \"fp16\"")) << x->hint;
    EXPECT_TRUE(contains(x->hint, "A100")) << x->hint;
  }
  s.dtype = DType::F16;
  DiagSink d;
  EXPECT_TRUE(validate_for_gpu(s, gpu("t4"), d)) << d.render();
}

TEST(gpuTarget, Resolve) {
  AttentionSpec s = *qattn::spec::find_preset("llama3-8b");
  s.gpu = "H100";
  DiagSink d;
  std::string note;
  EXPECT_EQ(resolve_target(s, d, &note), find_gpu("h100"));
  EXPECT_TRUE(contains(note, "from the spec"));
  s.gpu = "h300";
  DiagSink d2;
  EXPECT_EQ(resolve_target(s, d2), nullptr);
  EXPECT_NE(find(d2, "HW0201"), nullptr);
  s.gpu.clear();
  DiagSink d3;
  const GpuFacts* local = resolve_target(s, d3, &note);
  if (!local) {
    EXPECT_TRUE(find(d3, "HW0202") || find(d3, "HW0203")) << d3.render();
  } else {
    EXPECT_TRUE(contains(note, "detected")) << note;
  }
}

// ---- driver probe -------------------------------------------------------------------------
TEST(gpuProbe, NeverCrashesAndExplains) {
  std::string why;
  auto g = detect_local_gpu(&why);
  if (!g) {
    EXPECT_FALSE(why.empty());
    std::cout << "[probe] no GPU: " << why << "\n";
    EXPECT_TRUE(detect_local_gpus().empty());
    return;
  }
  std::cout << "[probe] " << g->name << " cc " << g->cc_major << "." << g->cc_minor << ", " << g->sm_count
            << " SMs, smem/SM " << g->smem_per_sm << ", smem/block " << g->smem_per_block_optin << ", driver "
            << g->driver_version << " -> " << (g->facts ? g->facts->name : "?") << " (" << g->match << ")\n";
  EXPECT_GE(g->cc_major, 7);
  EXPECT_GT(g->sm_count, 0);
  EXPECT_GT(g->smem_per_block_optin, 0);
  EXPECT_GT(g->total_mem_bytes, 0);
  if (g->facts && g->match == "name") {  // a known board: the driver must agree with the table
    EXPECT_EQ(g->sm_count, g->facts->sm_count);
    EXPECT_EQ(g->smem_per_sm, g->facts->smem_per_sm);
    EXPECT_EQ(g->smem_per_block_optin, g->facts->smem_per_block_optin);
  }
}
