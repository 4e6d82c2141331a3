// qattn device runtime, host side: the pieces of the C ABI (include/qattn/qattn.h) that every
// generated library shares: the per-thread last error, argument checks, launch error mapping.
// Everything here has internal linkage (`static`): several generated libraries live in one process,
// and an inline function's static locals would be one object shared by all of them
// (STB_GNU_UNIQUE), e.g. the "shared-memory limit already raised" flag of another kernel.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include <cuda_runtime.h>

#include "qattn/qattn.h"

namespace qattn::host {

static inline char* error_buffer() {
  static thread_local char buf[512] = "no error";
  return buf;
}

static inline int fail(int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(error_buffer(), 512, fmt, ap);
  va_end(ap);
  return status;
}

static inline int ok() {
  std::snprintf(error_buffer(), 512, "no error");
  return QATTN_OK;
}

static inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
static inline bool stride_aligned(int64_t stride_elems, int elem_bytes) { return (stride_elems * elem_bytes) % 16 == 0; }

// Raises the dynamic shared-memory limit of `kernel` on the current device (needed above 48 KB).
template <class Kernel>
static inline cudaError_t allow_smem(Kernel kernel, int bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  static bool done[64] = {};
  if (dev >= 0 && dev < 64 && done[dev]) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && dev >= 0 && dev < 64) done[dev] = true;
  return e;
}

// The number of SMs of the current device (a persistent grid launches one block per SM), cached
// per device; 0 when the runtime cannot tell.
static inline int sm_count() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  static int count[64] = {};
  if (count[dev] == 0 && cudaDeviceGetAttribute(&count[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) count[dev] = 0;
  return count[dev];
}

// A persistent kernel's next-tile counter: one of 1024 zeroed ints of the current device, a
// different one per launch (launches that run at the same time do not share one; the kernel's
// last fetch sets it back to 0). Allocated on the first persistent launch on a device (not
// during stream capture); nullptr when that fails.
static inline int* tile_counter() {
  constexpr int kSlots = 1024;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  static std::mutex mu;
  static int* base[64] = {};
  static unsigned next[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (!base[dev]) {
    int* b = nullptr;
    if (cudaMalloc(&b, kSlots * sizeof(int)) != cudaSuccess) return nullptr;
    if (cudaMemset(b, 0, kSlots * sizeof(int)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      cudaFree(b);
      return nullptr;
    }
    base[dev] = b;
  }
  return base[dev] + (next[dev]++ % kSlots);
}

static inline int launch_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok();
  const int status = (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
                      e == cudaErrorUnsupportedPtxVersion)
                         ? QATTN_ERR_ARCH
                         : QATTN_ERR_LAUNCH;
  return fail(status, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace qattn::host
