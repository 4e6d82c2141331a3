// The build driver: a Translation (the generated .cu) -> a shared library exporting the C ABI of
// include/qattn/qattn.h, built by nvcc, with a content-addressed cache on by default.
//
// Cache: <cache>/<key[0:2]>/<key>/{kernel.cu, libqattn_kernel.so, build.log}, key = SHA-256 of the
// source, the flags, the nvcc version and the headers it includes (device/ and include/). <cache> is $QATTN_CACHE_DIR,
// else $XDG_CACHE_HOME/qattn, else ~/.cache/qattn. An entry appears atomically (built in a
// temporary folder and renamed), so an interrupted build never leaves a half-written entry.
// Diagnostics: BUILD0101 nvcc missing, BUILD0102 CUTLASS headers missing, BUILD0103 device
// runtime headers missing, BUILD0201 nvcc failed (first error lines; the log is kept), BUILD0202
// cache folder not writable.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/translate.h"
#include "support/diag.h"

namespace qattn::build {

struct Toolchain {
  std::string nvcc;                       // path of nvcc
  std::string nvcc_version;               // "Cuda compilation tools, release 13.0, V13.0.48"
  std::vector<std::string> include_dirs;  // CUTLASS/CuTe, device runtime, include/ (qattn.h)
};

// Finds nvcc ($QATTN_NVCC, PATH, /usr/local/cuda/bin), the CUTLASS headers ($QATTN_CUTLASS_INCLUDE,
// the nvidia-cutlass Python package, .cutlass/include in the source tree) and the device runtime.
std::optional<Toolchain> find_toolchain(support::DiagSink& diags);

struct BuildOptions {
  bool use_cache = true;
  std::filesystem::path cache_dir;                  // empty: the default above
  std::function<void(const std::string&)> progress;  // one line per step; may be empty
  // Also build machine code for this newer GPU (e.g. 90 to run an sm80 kernel natively on an
  // H100: -gencode=arch=compute_80,code=sm_90). 0: only the target's own code.
  int also_sm = 0;
};

struct BuildResult {
  std::filesystem::path library;  // the .so inside the cache entry
  std::filesystem::path entry;    // the cache entry folder
  std::string key;
  bool cache_hit = false;
  double seconds = 0;
  std::string log;                // nvcc's output (ptxas register/spill report included)
};

std::optional<BuildResult> build_library(const backend::Translation& t, const Toolchain& tc, support::DiagSink& diags,
                                          const BuildOptions& opts = {});

std::filesystem::path default_cache_dir();

// The full nvcc command line for `source` -> `output` (exposed for tests and for --dry-run).
std::vector<std::string> nvcc_command(const backend::Translation& t, const Toolchain& tc,
                                      const std::filesystem::path& source, const std::filesystem::path& output,
                                      int also_sm = 0);

}  // namespace qattn::build
