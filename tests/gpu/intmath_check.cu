// The TL integer arithmetic of device/qattn/intmath.cuh (floor `/`, `%`, cdiv, min) evaluated on the
// GPU against an exact host reference (long double floor / ceil), in two forms:
//   1. element-wise over operand arrays (a in [-2100, 2100], b in [-9, 9] and 64 / 128 / 176);
//   2. the key loop bound of a causal kernel that splits its keys, exactly as the sm90 emitter writes
//      it (tl_text.cc: min(min(cdiv(seqlen_k, BN), cdiv(cdiv((m_block + 1) * BM, heads_q / heads_kv)
//      + seqlen_k - seqlen_q, BN)), (split + 1) * tiles_per_split)), from __grid_constant__ launch
//      values over a grid of (m_block, split) — the expression ptxas (CUDA 13.0, sm_90a)
//      miscompiled inside a kernel when cdiv was written -floordiv(-a, b) (j_hi = -17 for 17).
//   nvcc -O3 -arch=sm_90a --use_fast_math -Idevice tests/gpu/intmath_check.cu -o /tmp/intmath_check
//   /tmp/intmath_check        # prints the mismatches; exit status 1 if any
#include <cmath>
#include <cstdio>
#include <vector>

#include "qattn/intmath.cuh"

struct Shape {
  int heads_q, heads_kv, seqlen_q, seqlen_k, splits;
};

__global__ void elementwise(const int* a, const int* b, int n, int* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[3 * i] = qattn::floordiv(a[i], b[i]);
  out[3 * i + 1] = qattn::floormod(a[i], b[i]);
  out[3 * i + 2] = qattn::cdiv(a[i], b[i]);
}

constexpr int BM = 128, BN = 128;

__global__ void loop_bound(const __grid_constant__ Shape p, int* out) {
  const int m_block = blockIdx.x, split = blockIdx.y;
  const int splits = p.splits > 1 ? p.splits : 1;
  const int tiles_per_split = qattn::cdiv(qattn::cdiv(p.seqlen_k, BN), splits);
  const int j_lo = qattn::imax(0, split * tiles_per_split);
  const int j_hi = qattn::imin(qattn::imin(qattn::cdiv(p.seqlen_k, BN),
                                           qattn::cdiv(qattn::cdiv((m_block + 1) * BM, qattn::floordiv(p.heads_q, p.heads_kv)) +
                                                           p.seqlen_k - p.seqlen_q,
                                                       BN)),
                               (split + 1) * tiles_per_split);
  out[2 * (blockIdx.y * gridDim.x + blockIdx.x)] = j_lo;
  out[2 * (blockIdx.y * gridDim.x + blockIdx.x) + 1] = j_hi;
}

static long long floor_ref(long long a, long long b) { return (long long)std::floor((long double)a / (long double)b); }
static long long cdiv_ref(long long a, long long b) { return (long long)std::ceil((long double)a / (long double)b); }

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

int main() {
  int bad = 0;
  // 1. element-wise
  std::vector<int> a, b;
  for (int x = -2100; x <= 2100; ++x)
    for (int y : {-9, -8, -3, -2, -1, 1, 2, 3, 7, 8, 9, 64, 128, 176}) {
      a.push_back(x);
      b.push_back(y);
    }
  const int n = int(a.size());
  int *da, *db, *dout;
  CHECK(cudaMalloc(&da, n * sizeof(int)));
  CHECK(cudaMalloc(&db, n * sizeof(int)));
  CHECK(cudaMalloc(&dout, 3 * n * sizeof(int)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  elementwise<<<(n + 255) / 256, 256>>>(da, db, n, dout);
  CHECK(cudaGetLastError());
  std::vector<int> out(3 * n);
  CHECK(cudaMemcpy(out.data(), dout, 3 * n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const long long f = floor_ref(a[i], b[i]), m = a[i] - f * b[i], c = cdiv_ref(a[i], b[i]);
    if (out[3 * i] != f || out[3 * i + 1] != m || out[3 * i + 2] != c) {
      if (bad++ < 20)
        std::printf("a %d b %d: floordiv %d (want %lld) floormod %d (want %lld) cdiv %d (want %lld)\n", a[i], b[i], out[3 * i], f,
                    out[3 * i + 1], m, out[3 * i + 2], c);
    }
  }
  std::printf("element-wise: %d operand pairs, %d wrong\n", n, bad);
  // 2. the split causal loop bound
  int bad_loop = 0, launches = 0;
  int* dl;
  CHECK(cudaMalloc(&dl, 2 * 64 * 16 * sizeof(int)));
  for (int hkv : {1, 2, 8})
    for (int sq : {1, 5, 64, 300})
      for (int sk : {1, 127, 128, 2048, 3000, 32768})
        for (int splits : {1, 2, 5, 7}) {
          if (sq > sk) continue;
          const Shape s{8, hkv, sq, sk, splits};
          const int g = 8 / hkv, m_blocks = int(cdiv_ref((long long)sq * g, BM));
          if (m_blocks > 64) continue;
          loop_bound<<<dim3(m_blocks, splits), 1>>>(s, dl);
          CHECK(cudaGetLastError());
          std::vector<int> r(2 * m_blocks * splits);
          CHECK(cudaMemcpy(r.data(), dl, r.size() * sizeof(int), cudaMemcpyDeviceToHost));
          ++launches;
          const long long tps = cdiv_ref(cdiv_ref(sk, BN), splits);
          for (int sp = 0; sp < splits; ++sp)
            for (int mb = 0; mb < m_blocks; ++mb) {
              const long long causal_hi = cdiv_ref(cdiv_ref((long long)(mb + 1) * BM, g) + sk - sq, BN);
              const long long hi = std::min(std::min(cdiv_ref(sk, BN), causal_hi), (sp + 1) * tps), lo = sp * tps;
              const int got_lo = r[2 * (sp * m_blocks + mb)], got_hi = r[2 * (sp * m_blocks + mb) + 1];
              if (got_lo != lo || got_hi != hi) {
                if (bad_loop++ < 20)
                  std::printf("loop bound hkv %d sq %d sk %d splits %d m_block %d split %d: [%d, %d) want [%lld, %lld)\n", hkv,
                              sq, sk, splits, mb, sp, got_lo, got_hi, lo, hi);
              }
            }
        }
  std::printf("split causal loop bound: %d launches, %d wrong\n", launches, bad_loop);
  return bad + bad_loop ? 1 : 0;
}
