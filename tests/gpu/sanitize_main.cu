// A minimal host driver for compute-sanitizer: loads one generated kernel library (dlopen), runs it
// once on a small ragged GQA problem with random inputs, and checks the status and every output
// element for NaN (outputs are poisoned first). Usage: sanitize_main LIB.so
// Build: nvcc -std=c++17 -I include tests/gpu/sanitize_main.cu -o sanitize_main -ldl
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qattn/qattn.h"

static int json_int(const std::string& j, const char* key) {
  auto p = j.find(std::string("\"") + key + "\":");
  return p == std::string::npos ? -1 : std::atoi(j.c_str() + p + std::strlen(key) + 3);
}

static uint16_t to_half_bits(float f, bool bf16) {
  if (bf16) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  __half h = __float2half(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));             \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main(int argc, char** argv) {
  int B = 2, Hq = 4, Hkv = 2, Sq = 77, Sk = 130, repeats = 0;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shape") && i + 1 < argc &&
        std::sscanf(argv[i + 1], "%d,%d,%d,%d,%d", &B, &Hq, &Hkv, &Sq, &Sk) == 5 && B > 0 && Hq > 0 && Hkv > 0 &&
        Hq % Hkv == 0 && Sq > 0 && Sk > 0) {
      ++i;
    } else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc && (repeats = std::atoi(argv[i + 1])) > 0) {
      ++i;
    } else {
      argc = 0;
      break;
    }
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIB.so [--shape B,Hq,Hkv,Sq,Sk] [--repeat N]\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto fwd = reinterpret_cast<int (*)(const qattn_fwd_params*, void*)>(dlsym(h, "qattn_fwd"));
  auto info = reinterpret_cast<const char* (*)()>(dlsym(h, "qattn_kernel_info"));
  auto err = reinterpret_cast<const char* (*)()>(dlsym(h, "qattn_last_error"));
  if (!fwd || !info || !err) return 1;
  std::string j = info();
  const bool bf16 = j.find("\"dtype\": \"bf16\"") != std::string::npos;
  if (j.find("fp8") != std::string::npos) {
    std::printf("skip: fp8 kernel (this driver fills 16-bit inputs)\n");
    return 0;
  }
  const int dqk = json_int(j, "d_qk"), dv = json_int(j, "d_v");
  std::mt19937 rng(7);
  std::normal_distribution<float> n01;
  auto fill = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = to_half_bits(n01(rng), bf16);
    return v;
  };
  auto hq = fill(size_t(B) * Sq * Hq * dqk), hk = fill(size_t(B) * Sk * Hkv * dqk), hv = fill(size_t(B) * Sk * Hkv * dv);
  void *dq, *dk, *dvp, *dout;
  float* dlse;
  CHECK(cudaMalloc(&dq, hq.size() * 2));
  CHECK(cudaMalloc(&dk, hk.size() * 2));
  CHECK(cudaMalloc(&dvp, hv.size() * 2));
  CHECK(cudaMalloc(&dout, size_t(B) * Sq * Hq * dv * 2));
  CHECK(cudaMalloc(&dlse, size_t(B) * Hq * Sq * 4));
  CHECK(cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dvp, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0xff, size_t(B) * Sq * Hq * dv * 2));  // NaN poison
  qattn_fwd_params p{};
  p.abi_version = QATTN_ABI_VERSION;
  p.q = dq, p.k = dk, p.v = dvp, p.o = dout;
  p.lse = j.find("\"lse\": true") != std::string::npos ? dlse : nullptr;
  p.q_batch_stride = int64_t(Sq) * Hq * dqk, p.q_row_stride = int64_t(Hq) * dqk, p.q_head_stride = dqk;
  p.k_batch_stride = int64_t(Sk) * Hkv * dqk, p.k_row_stride = int64_t(Hkv) * dqk, p.k_head_stride = dqk;
  p.v_batch_stride = int64_t(Sk) * Hkv * dv, p.v_row_stride = int64_t(Hkv) * dv, p.v_head_stride = dv;
  p.o_batch_stride = int64_t(Sq) * Hq * dv, p.o_row_stride = int64_t(Hq) * dv, p.o_head_stride = dv;
  p.batch = B, p.heads_q = Hq, p.heads_kv = Hkv, p.seqlen_q = Sq, p.seqlen_k = Sk, p.d_qk = dqk, p.d_v = dv;
  p.softmax_scale = 1.0f / std::sqrt(float(dqk));
  int st = fwd(&p, nullptr);
  if (st != QATTN_OK) {
    std::fprintf(stderr, "qattn_fwd: %d %s\n", st, err());
    return 1;
  }
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(size_t(B) * Sq * Hq * dv);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
  size_t nan = 0;
  for (auto x : out) nan += bf16 ? ((x & 0x7f80) == 0x7f80 && (x & 0x7f)) : ((x & 0x7c00) == 0x7c00 && (x & 0x3ff));
  std::printf("%s: ran %dx%dx%d/%d %d/%d, %zu NaN outputs\n", argv[1], B, Hq, Hkv, Sq, Sk, dqk, nan);
  // --repeat N: N more runs on the same inputs (outputs poisoned before each) must be bit-identical.
  size_t differing_runs = 0;
  for (int r = 0; r < repeats; ++r) {
    CHECK(cudaMemset(dout, 0xff, out.size() * 2));
    if (fwd(&p, nullptr) != QATTN_OK) {
      std::fprintf(stderr, "qattn_fwd (repeat %d): %s\n", r, err());
      return 1;
    }
    CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> again(out.size());
    CHECK(cudaMemcpy(again.data(), dout, again.size() * 2, cudaMemcpyDeviceToHost));
    differing_runs += std::memcmp(again.data(), out.data(), out.size() * 2) != 0;
  }
  if (repeats) std::printf("%s: %d repeats, %zu not bit-identical to the first run\n", argv[1], repeats, differing_runs);
  return nan || differing_runs ? 1 : 0;
}
