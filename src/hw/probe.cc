// Driver probe: finds the local CUDA GPUs through the driver API, loaded at run time with
// dlopen("libcuda.so.1") so qattn builds and runs on machines without CUDA. The few driver entry
// points are declared here as function-pointer types (values from cuda.h). Never throws; when
// there is no usable GPU it returns nothing and says why.
#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "hw/gpu.h"

namespace qattn::hw {

namespace {

using CUresult = int;
using CUdevice = int;
constexpr CUresult CUDA_SUCCESS = 0;
// CUdevice_attribute values from cuda.h.
constexpr int ATTR_MULTIPROCESSOR_COUNT = 16;
constexpr int ATTR_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int ATTR_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81;
constexpr int ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

struct Driver {
  void* handle = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;  // cuDeviceTotalMem_v2
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  std::string error;    // why the driver is unusable; empty when usable
  CUresult init_result = CUDA_SUCCESS;
};

template <typename F>
bool sym(void* h, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(h, name));
  return out != nullptr;
}

std::string error_name(const Driver& d, CUresult r) {
  const char* s = nullptr;
  if (d.cuGetErrorName && d.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUresult " + std::to_string(r);
}

// Loaded once per process and never unloaded (unloading the driver is not safe).
const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d.handle) {
      const char* e = dlerror();
      d.error = std::string("libcuda.so.1 not found (no NVIDIA driver installed)") + (e ? ": " + std::string(e) : "");
      return;
    }
    bool ok = sym(d.handle, "cuInit", d.cuInit) && sym(d.handle, "cuDriverGetVersion", d.cuDriverGetVersion) &&
              sym(d.handle, "cuDeviceGetCount", d.cuDeviceGetCount) && sym(d.handle, "cuDeviceGet", d.cuDeviceGet) &&
              sym(d.handle, "cuDeviceGetName", d.cuDeviceGetName) &&
              sym(d.handle, "cuDeviceGetAttribute", d.cuDeviceGetAttribute) &&
              sym(d.handle, "cuDeviceTotalMem_v2", d.cuDeviceTotalMem);
    sym(d.handle, "cuGetErrorName", d.cuGetErrorName);  // optional
    if (!ok) {
      d.error = "libcuda.so.1 lacks a driver API entry point (driver too old?)";
      return;
    }
    d.init_result = d.cuInit(0);
    if (d.init_result != CUDA_SUCCESS)
      d.error = "cuInit failed: " + error_name(d, d.init_result) +
                (d.init_result == 100 ? " (no CUDA-capable device is visible)" : "");
  });
  return d;
}

}  // namespace

std::vector<DetectedGpu> detect_local_gpus(std::string* why_not) {
  std::vector<DetectedGpu> out;
  auto fail = [&](std::string why) {
    if (why_not) *why_not = std::move(why);
    return std::vector<DetectedGpu>{};
  };
  const Driver& d = driver();
  if (!d.error.empty()) return fail(d.error);
  int version = 0;
  d.cuDriverGetVersion(&version);
  int count = 0;
  CUresult r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) return fail("cuDeviceGetCount failed: " + error_name(d, r));
  if (count <= 0) return fail("the NVIDIA driver reports no devices (check CUDA_VISIBLE_DEVICES)");
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if ((r = d.cuDeviceGet(&dev, i)) != CUDA_SUCCESS)
      return fail("cuDeviceGet(" + std::to_string(i) + ") failed: " + error_name(d, r));
    DetectedGpu g;
    g.ordinal = i;
    g.driver_version = version;
    char name[256] = {0};
    if (d.cuDeviceGetName(name, int(sizeof(name)) - 1, dev) == CUDA_SUCCESS) g.name = name;
    struct {
      int attr;
      int* out;
    } attrs[] = {{ATTR_COMPUTE_CAPABILITY_MAJOR, &g.cc_major},
                 {ATTR_COMPUTE_CAPABILITY_MINOR, &g.cc_minor},
                 {ATTR_MULTIPROCESSOR_COUNT, &g.sm_count},
                 {ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &g.smem_per_sm},
                 {ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &g.smem_per_block_optin}};
    for (auto& a : attrs)
      if ((r = d.cuDeviceGetAttribute(a.out, a.attr, dev)) != CUDA_SUCCESS)
        return fail("cuDeviceGetAttribute(" + std::to_string(a.attr) + ") failed: " + error_name(d, r));
    size_t mem = 0;
    if (d.cuDeviceTotalMem(&mem, dev) == CUDA_SUCCESS) g.total_mem_bytes = int64_t(mem);
    g.facts = match_gpu(g.name, g.cc_major, g.cc_minor, g.sm_count, &g.match);
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<DetectedGpu> detect_local_gpu(std::string* why_not) {
  auto all = detect_local_gpus(why_not);
  if (all.empty()) return std::nullopt;
  return all.front();
}

}  // namespace qattn::hw
