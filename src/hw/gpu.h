// GPU facts as data: one GpuFacts per supported GPU, read from data/gpus.json (embedded into the
// library at build time by cmake/embed.cmake), plus a driver probe that finds the local GPU via
// dlopen("libcuda.so.1") with no link-time CUDA dependency. docs/gpus.md describes every field.
// Diagnostics: HW01xx for a bad facts table, HW02xx for lookups and the probe.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/spec.h"
#include "support/diag.h"

namespace qattn::hw {

using support::DiagSink;

// One tensor-core instruction shape, e.g. "mma.sync.m16n8k16" or "wgmma.m64nNk16".
struct MmaInstr {
  std::string text;  // as written in gpus.json
  std::string kind;  // "mma.sync" (warp-level) or "wgmma" (warpgroup-level, sm90)
  int m = 0, n = 0, k = 0;  // n == 0: N is chosen per instruction (wgmma: multiple of 8, 8..256)
  bool n_variable() const { return n == 0; }
};

struct GpuFeatures {
  bool cp_async = false;    // sm80+: asynchronous global->shared copies
  bool ldmatrix = false;    // sm75+: ldmatrix shared->register fragments
  bool stmatrix = false;    // sm90: stmatrix register->shared
  bool tma = false;         // sm90: Tensor Memory Accelerator bulk copies
  bool wgmma = false;       // sm90a: warpgroup MMA from shared memory
  bool setmaxnreg = false;  // sm90a: per-warpgroup register reallocation
  bool clusters = false;    // sm90: thread block clusters / distributed shared memory
  bool fp8 = false;         // fp8 e4m3 tensor-core path (sm89, sm90)
  bool bf16 = false;        // bf16 tensor-core path (sm80+)
};

struct GpuFacts {
  std::string name;                  // "H100 SXM"
  std::vector<std::string> aliases;  // "h100", "sm90", driver names ("H100 80GB HBM3")
  std::string arch;                  // "sm90"
  int cc_major = 0, cc_minor = 0;    // compute capability 9.0
  int sm = 0;                        // 10 * cc_major + cc_minor: 75, 80, 86, 89, 90
  int sm_count = 0;
  int smem_per_sm = 0;               // bytes of shared memory per SM
  int smem_per_block_optin = 0;      // bytes a block may use after opting in (cudaFuncSetAttribute)
  int smem_per_block_default = 0;    // bytes without opting in (48 KB)
  int regs_per_sm = 0;               // 32-bit registers
  int regs_per_thread_max = 0;
  int max_threads_per_sm = 0;
  int max_threads_per_block = 0;
  int max_blocks_per_sm = 0;
  int warp_size = 32;
  int64_t l2_bytes = 0;
  double memory_gb = 0;
  double memory_bandwidth_gbps = 0;  // GB/s, datasheet peak
  int boost_clock_mhz = 0;
  double fp32_tflops = 0;            // CUDA cores, non-tensor
  std::map<spec::DType, double> tensor_tflops;             // dense, fp32 accumulate; absent = no path
  std::map<spec::DType, std::vector<MmaInstr>> mma;        // preferred first; absent = no path
  GpuFeatures features;
  std::string nvcc_gencode;          // "-gencode=arch=compute_90a,code=sm_90a"
  std::string notes;

  bool supports(spec::DType t) const { return mma.count(t) > 0; }
  double peak_tflops(spec::DType t) const;        // 0 when unsupported
  const MmaInstr* preferred_mma(spec::DType t) const;  // nullptr when unsupported
  std::string dtypes_supported() const;           // "fp16, bf16"
};

// The embedded table (data/gpus.json), parsed once. Never empty in a correctly built binary: a unit
// test checks the file; if it still fails to parse, gpus() is empty and find_gpu(.., diags) says so.
const std::vector<GpuFacts>& gpus();
std::string_view gpus_json();  // the embedded JSON text

// Parse and check a facts table (strict: unknown or missing keys, wrong types, inconsistent facts
// are HW01xx errors). Used for the embedded table and by tests; `out` gets the entries.
bool parse_gpus(std::string_view text, std::vector<GpuFacts>& out, DiagSink& diags);

// Lookup by name or alias, case-insensitive, ignoring '-', '_', ' ' and a leading "NVIDIA",
// "GeForce", "Tesla" or "Quadro": "h100", "H100-SXM", "sm90", "NVIDIA H100 80GB HBM3".
const GpuFacts* find_gpu(std::string_view name_or_alias);
// Same, and reports HW0201 listing the known GPUs (with a did-you-mean) when unknown.
const GpuFacts* find_gpu(std::string_view name_or_alias, DiagSink& diags);
std::vector<std::string> gpu_names();

// ---- driver probe -------------------------------------------------------------------------
struct DetectedGpu {
  int ordinal = 0;
  std::string name;             // driver name, e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int smem_per_sm = 0;          // bytes, from the driver
  int smem_per_block_optin = 0; // bytes, from the driver
  int64_t total_mem_bytes = 0;
  int driver_version = 0;       // e.g. 12080 for 12.8
  const GpuFacts* facts = nullptr;  // matching table entry (nullptr if none fits)
  std::string match;            // how facts was chosen: "name", or "compute capability 9.0 (...)"
};

// Map a device to a table entry: by driver name first, else by compute capability (same CC, SM
// count closest). `how` receives the explanation. nullptr when no entry has that CC.
const GpuFacts* match_gpu(std::string_view driver_name, int cc_major, int cc_minor, int sm_count,
                          std::string* how = nullptr);

// All visible CUDA devices. Empty with *why_not set when there is no driver, no device, or the
// driver fails ("libcuda.so.1 not found (no NVIDIA driver)", "cuInit failed: CUDA_ERROR_NO_DEVICE").
std::vector<DetectedGpu> detect_local_gpus(std::string* why_not = nullptr);
// Device 0 of the above.
std::optional<DetectedGpu> detect_local_gpu(std::string* why_not = nullptr);

}  // namespace qattn::hw
