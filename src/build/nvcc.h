// The build driver: a Translation (the generated .cu) -> a shared library exporting the C ABI of
// include/qattn/qattn.h, built by nvcc, with a content-addressed cache on by default.
//
// Cache: <cache>/<key[0:2]>/<key>/{kernel.cu, libqattn_kernel.so, build.log, manifest.txt}, key = SHA-256 of the
// source, the flags, the nvcc version and the headers it includes (device/ and include/). <cache> is $QATTN_CACHE_DIR,
// else $XDG_CACHE_HOME/qattn, else ~/.cache/qattn. An entry appears atomically (built in a
// temporary folder and renamed), so an interrupted build never leaves a half-written entry;
// manifest.txt (written last) holds the library's size and SHA-256, checked before every reuse: a
// damaged entry is removed and rebuilt. Build folders of interrupted builds (.tmp-*) older than an
// hour are removed whenever the cache is used. nvcc runs without a shell, in the build folder,
// with a time limit and a memory (address space) limit (BuildOptions).
//
// Split build (Translation::split: the sm90 forward kernels): two compilers at the same time, the
// kernel alone (`nvcc -fatbin`, device code only: no host pass over the device headers) and the
// launch code alone (the host C++ compiler with -DQATTN_HOST_ONLY: qattn.h, the host checks and
// the tensor maps over the CUDA runtime's headers), then one link of the launch code, the fatbin
// as binary data (`--format=binary`, read back by launch.cuh's cubin_kernel) and the static CUDA
// runtime. About three times less compiler time than `nvcc -shared` over the same file, and half
// of it overlapped. Without a host compiler or the static runtime, or with QATTN_SPLIT_BUILD=0,
// the same file builds with `nvcc -shared` as every other kernel.
// Diagnostics: BUILD0101 nvcc missing, BUILD0102 CUTLASS headers missing, BUILD0103 device
// runtime headers missing, BUILD0201 nvcc failed (first error lines; the log is kept), BUILD0202
// cache folder not writable, BUILD0203 nvcc stopped at its time limit, BUILD0301 an #include (or
// .incbin) of LLM-written CUDA that is not allowed (check_includes).
#pragma once
#include <cstdint>
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
  // the split build's (empty: split builds fall back to nvcc -shared)
  std::string host_cxx;                   // the host C++ compiler ($QATTN_HOST_CXX, else g++ / c++ on PATH)
  std::string cuda_include;               // the CUDA toolkit's include folder (cuda_runtime.h)
  std::string cudart_static;              // the toolkit's libcudart_static.a
  bool split_ok() const { return !host_cxx.empty() && !cuda_include.empty() && !cudart_static.empty(); }
};

// Finds nvcc ($QATTN_NVCC, PATH, /usr/local/cuda/bin), the CUTLASS headers ($QATTN_CUTLASS_INCLUDE,
// the nvidia-cutlass Python package, .cutlass/include in the source tree), the device runtime, and
// what the split build needs beside nvcc (the host compiler, the toolkit's include folder and its
// static runtime, found next to nvcc; $QATTN_SPLIT_BUILD=0 leaves them empty).
std::optional<Toolchain> find_toolchain(support::DiagSink& diags);

struct BuildOptions {
  bool use_cache = true;
  std::filesystem::path cache_dir;                  // empty: the default above
  std::function<void(const std::string&)> progress;  // one line per step; may be empty
  // Also build machine code for this newer GPU (e.g. 90 to run an sm80 kernel natively on an
  // H100: -gencode=arch=compute_80,code=sm_90). 0: only the target's own code.
  int also_sm = 0;
  double timeout_s = 1800;                    // nvcc's wall-clock limit (BUILD0203)
  uint64_t memory_bytes = 32ull << 30;        // RLIMIT_AS of nvcc and its children
  uint64_t file_size_bytes = 4ull << 30;      // RLIMIT_FSIZE: largest file nvcc may write
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

// For CUDA written by an LLM, before nvcc sees it: every #include names "qattn/...", <cute/...>,
// <cutlass/...>, <cub/...>, <cuda...>, <cooperative_groups...> or a standard C/C++ header; no
// absolute path, no '..', no macro; no #include_next / #import / #embed, no .incbin. Each offence
// is a BUILD0301 error at its line of kernel.cu. Returns whether the source passed.
bool check_includes(const std::string& source, support::DiagSink& diags);

// The full nvcc command line for `source` -> `output` (exposed for tests and for --dry-run).
std::vector<std::string> nvcc_command(const backend::Translation& t, const Toolchain& tc,
                                      const std::filesystem::path& source, const std::filesystem::path& output,
                                      int also_sm = 0);

// The split build's three commands, run in the build folder (relative file names: the link's
// binary input names its symbols after the file, _binary_kernel_fatbin_start / _end).
struct SplitCommands {
  std::vector<std::string> device;  // nvcc -fatbin kernel.cu -> kernel.fatbin
  std::vector<std::string> host;    // host compiler -DQATTN_HOST_ONLY -c kernel.cu -> launch.o
  std::vector<std::string> link;    // launch.o + kernel.fatbin + libcudart_static.a -> libqattn_kernel.so
};
SplitCommands split_commands(const backend::Translation& t, const Toolchain& tc, int also_sm = 0);
// Whether build_library builds `t` in the split form with `tc` (and $QATTN_SPLIT_BUILD is not 0).
bool builds_split(const backend::Translation& t, const Toolchain& tc);

}  // namespace qattn::build
