// micro-benchmark: fp32 reduction throughput into L2 in the backward's dQ pattern
// grid (32 key blocks, 16 heads, 4 batch), 256 threads; each block adds a (64, 128) fp32 tile to
// rows i*64.. of its head's dQ for i = 0..63 (every key block of a head walks the same tiles)
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
constexpr int S = 4096, H = 16, B = 4, D = 128, BM = 64;
__device__ __forceinline__ void red2(float* p, float a, float b) { asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory"); }
__device__ __forceinline__ void red4(float* p, float4 v) { asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory"); }
template <int MODE>
__global__ void __launch_bounds__(256, 1) k(float* dq, int iters) {
  extern __shared__ __align__(128) float st[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, head = blockIdx.y, b = blockIdx.z;
  float* base = dq + (int64_t(b) * S * H + head) * D;  // (S, D) with row stride H*D
  const int64_t ld = H * D;
  float v = 1.0f + tid * 1e-3f;
  for (int i = 0; i < iters; ++i) {
    float* g = base + int64_t(i % (S / BM)) * BM * ld;
    if (MODE == 0) {  // wgmma accumulator pattern (MmaCols<64,128,2>): warp rows 16*(w%4), cols 64*(w/4); lane quad rows
      const int r = 16 * (warp % 4) + lane / 4, c = 64 * (warp / 4) + 2 * (lane % 4);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        red2(g + r * ld + c + 8 * n, v, v);
        red2(g + (r + 8) * ld + c + 8 * n, v, v);
      }
    } else if (MODE == 1) {  // row-contiguous v4: warp's 16 rows x 64 cols, 2 rows an instruction
      const int r0 = 16 * (warp % 4), c0 = 64 * (warp / 4);
#pragma unroll
      for (int it = 0; it < 8; ++it) red4(g + (r0 + 2 * it + lane / 16) * ld + c0 + 4 * (lane % 16), make_float4(v, v, v, v));
    } else if (MODE == 2) {  // bulk 1D reduce: 64 rows of 512 B from shared, 8 per warp, lane 0..7 issue
      float* box = st + (i % 2) * BM * D;
      if (lane < 8) {
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      }
      __syncwarp();
      for (int e = tid; e < BM * D; e += 256) box[e] = v;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (lane < 8) {
        const int r = warp * 8 + lane;
        uint32_t s = uint32_t(__cvta_generic_to_shared(box + r * D));
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], 512;" ::"l"(g + r * ld), "r"(s) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    } else if (MODE == 3) {  // plain stores (no reduction), row-contiguous
      const int r0 = 16 * (warp % 4), c0 = 64 * (warp / 4);
#pragma unroll
      for (int it = 0; it < 8; ++it) *reinterpret_cast<float4*>(g + (r0 + 2 * it + lane / 16) * ld + c0 + 4 * (lane % 16)) = make_float4(v, v, v, v);
    } else if (MODE == 4) {  // bulk 1D reduce, one thread issues all 64 rows
      float* box = st + (i % 2) * BM * D;
      if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      __syncthreads();
      for (int e = tid; e < BM * D; e += 256) box[e] = v;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      if (tid == 0) {
        for (int r = 0; r < BM; ++r) {
          uint32_t s = uint32_t(__cvta_generic_to_shared(box + r * D));
          asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], 512;" ::"l"(g + r * ld), "r"(s) : "memory");
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
  }
  if (MODE == 2 || MODE == 4) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
template <int MODE>
void run(const char* name, float* dq) {
  const int smem = (MODE == 2 || MODE == 4) ? 2 * BM * D * 4 : 0;
  cudaFuncSetAttribute(k<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  dim3 grid(32, H, B);
  const int iters = 64;
  k<MODE><<<grid, 256, smem>>>(dq, iters);
  cudaEvent_t a, e; cudaEventCreate(&a); cudaEventCreate(&e);
  cudaEventRecord(a);
  for (int r = 0; r < 10; ++r) k<MODE><<<grid, 256, smem>>>(dq, iters);
  cudaEventRecord(e); cudaEventSynchronize(e);
  float ms; cudaEventElapsedTime(&ms, a, e); ms /= 10;
  const double bytes = double(32) * H * B * iters * BM * D * 4;
  printf("%-28s %.3f ms  %.2f TB/s of fp32 added  (%s)\n", name, ms, bytes / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
}
int main() {
  float* dq; cudaMalloc(&dq, size_t(B) * S * H * D * 4); cudaMemset(dq, 0, size_t(B) * S * H * D * 4);
  run<0>("red.v2 accumulator layout", dq);
  run<1>("red.v4 row-contiguous", dq);
  run<2>("bulk reduce 512B, 8 warps", dq);
  run<4>("bulk reduce 512B, 1 thread", dq);
  run<3>("st.v4 (no reduction)", dq);
  run<0>("red.v2 accumulator layout", dq);
}
