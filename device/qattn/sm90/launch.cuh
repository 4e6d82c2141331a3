// qattn device runtime, Hopper (sm90a), host side: the Params of one launch of a generated kernel
// (tensor maps over the C ABI's strided tensors, sizes, the TL Grid's tile count, the persistent
// grid's counter) and the launch itself. Internal linkage, like qattn/host.cuh. Plain C++ over the
// CUDA runtime: the split build (docs/translation.md, "Building") compiles a kernel's launch code
// with the host compiler alone, and the kernel comes from the fatbin embedded in its library.
#pragma once
#include <climits>
#include <cstring>
#include <mutex>

#include <cuda_runtime.h>

#include "qattn/host.cuh"
#include "qattn/intmath.cuh"
#include "qattn/qattn.h"
#include "qattn/sm90/params.h"
#include "qattn/sm90/tensor_map.h"

namespace qattn::sm90 {

// The kernel's shape as the translator built it.
struct KernelShape {
  int bm, bn, d_qk, d_v;
  bool bf16, lse, pack, persistent;
  bool paged = false;  // TL {paged}: K and V are page pools (ABI 4)
  bool ragged_q = false, ragged_k = false;  // TL {ragged}: Q, O (K, V) are packed sequences (ABI 5)
  bool split = false;  // TL `s = 0: splits`: O and LSE receive batch * splits parts (ABI 8)
};

// Fills kp for a call of `p` on `tiles` work tiles (the TL Grid's points); *blocks: how many blocks
// to launch (one per tile, or one per SM at most with a persistent grid). QATTN_OK or a status.
static inline int make_params(Params* kp, const qattn_fwd_params& p, const KernelShape& k, long long tiles, int window_left,
                              int window_right, int* blocks) {
  using qattn::host::fail;
  kp->pack = k.pack ? p.heads_q / p.heads_kv : 1;
  kp->splits = k.split && p.splits > 1 ? p.splits : 1;
  if (k.pack && 64 % kp->pack != 0 && kp->pack % k.bm != 0)
    return fail(QATTN_ERR_SHAPE,
                "this kernel packs the heads_q / heads_kv = %d query heads of a kv head into its 64-row tiles: the group must "
                "divide 64 or be a multiple of the %d-row tile (heads_q %d, heads_kv %d)",
                kp->pack, k.bm, p.heads_q, p.heads_kv);
  const int pk = k.pack ? kp->pack : 0;  // packed kernels use the 5-D maps, also for a group of 1
  struct Map {
    CUtensorMap* map;
    const char* name;
    const void* base;
    int cols, rows, heads, box, pack, batch;
    long long rs, hs, bs;
    CUtensorMapL2promotion l2;
  };
  // a paged cache: K and V are (num_pages, page_size, heads_kv, d), one box per page (or per tile)
  // packed ragged batches: one "batch" of total rows (a sequence's tiles start at its first row)
  const int kv_rows = k.paged ? p.page_size : k.ragged_k ? (p.total_k > 0 ? p.total_k : 1) : p.seqlen_k;
  const int kv_batch = k.paged ? p.num_pages : k.ragged_k ? 1 : p.batch;
  const int q_rows = k.ragged_q ? (p.total_q > 0 ? p.total_q : 1) : p.seqlen_q, q_batch = k.ragged_q ? 1 : p.batch;
  const long long qbs = k.ragged_q ? q_rows * p.q_row_stride : p.q_batch_stride, obs = k.ragged_q ? q_rows * p.o_row_stride : p.o_batch_stride;
  const long long kbs = k.ragged_k ? kv_rows * p.k_row_stride : p.k_batch_stride, vbs = k.ragged_k ? kv_rows * p.v_row_stride : p.v_batch_stride;
  const int kv_box = k.paged && p.page_size < k.bn ? p.page_size : k.bn;
  // One query tile per (batch, head): one block streams each head's keys alone (tensor_map.h)
  const CUtensorMapL2promotion kv_l2 = kv_l2_promotion(p.seqlen_q, k.pack ? kp->pack : 1, k.bm);
  kp->kv_stream = kv_streamed(p.seqlen_q, k.pack ? kp->pack : 1, k.bm) ? 1 : 0;
  const CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const Map maps[4] = {
      {&kp->tma_q, "q", p.q, k.d_qk, q_rows, p.heads_q, k.bm, pk, q_batch, p.q_row_stride, p.q_head_stride, qbs, l2},
      {&kp->tma_k, "k", p.k, k.d_qk, kv_rows, p.heads_kv, kv_box, 0, kv_batch, p.k_row_stride, p.k_head_stride, kbs, kv_l2},
      {&kp->tma_v, "v", p.v, k.d_v, kv_rows, p.heads_kv, kv_box, 0, kv_batch, p.v_row_stride, p.v_head_stride, vbs, kv_l2},
      {&kp->tma_o, "o", p.o, k.d_v, q_rows, p.heads_q, 64, pk, q_batch * kp->splits, p.o_row_stride, p.o_head_stride, obs, l2}};
  for (const Map& m : maps) {
    const int r = make_tile_map(m.map, m.base, k.bf16, m.cols, m.rows, m.heads, m.batch, m.rs, m.hs, m.bs, m.box, m.pack, m.l2);
    if (r != 0)
      return fail(QATTN_ERR_LAUNCH,
                  "cuTensorMapEncodeTiled refused %s (%s %d): base %p, (batch %d, rows %d, heads %d, cols %d), strides "
                  "(batch %lld, row %lld, head %lld) elements, box rows %d, pack %d (strides must be multiples of 16 bytes "
                  "below 2^40; the driver must support TMA)",
                  m.name, r == -1 ? "no cuTensorMapEncodeTiled in the driver" : r == -2 ? "pack" : "CUresult", r, m.base,
                  m.batch, m.rows, m.heads, m.cols, m.bs, m.rs, m.hs, m.box, m.pack);
  }
  if (tiles > INT_MAX) return fail(QATTN_ERR_SHAPE, "%lld work tiles exceed 2^31", tiles);
  kp->lse = k.lse ? p.lse : nullptr;
  kp->seqlen_q = p.seqlen_q;
  kp->seqlen_k = p.seqlen_k;
  kp->heads_q = p.heads_q;
  kp->heads_kv = p.heads_kv;
  kp->batch = p.batch;
  kp->softmax_scale = p.softmax_scale;
  kp->window_left = window_left;
  kp->window_right = window_right;
  kp->arg_window_left = qattn::window_side(p.window_left, p.seqlen_q, p.seqlen_k);
  kp->arg_window_right = qattn::window_side(p.window_right, p.seqlen_q, p.seqlen_k);
  kp->softcap = p.softcap;
  for (int i = 0; i < 4; ++i) kp->aux[i] = p.aux[i];
  kp->page_size = k.paged ? p.page_size : 0;
  kp->pages = k.paged ? p.pages : 0;
  kp->num_pages = k.paged ? p.num_pages : 0;
  kp->total_q = k.ragged_q ? p.total_q : 0;
  kp->total_k = k.ragged_k ? p.total_k : 0;
  kp->o = p.o;
  kp->o_row_stride = p.o_row_stride;
  kp->o_head_stride = p.o_head_stride;
  kp->o_batch_stride = obs;
  kp->num_tiles = int(tiles);
  *blocks = kp->num_tiles;
  kp->tile_counter = nullptr;
  if (k.persistent) {
    // one block per SM, but the sm_margin SMs the caller leaves free for another stream's kernels
    const int all = qattn::host::sm_count();
    const int sms = all > 0 ? (p.sm_margin < all ? all - p.sm_margin : 1) : 0;
    if (sms > 0 && sms < kp->num_tiles) *blocks = sms;
    kp->tile_counter = qattn::host::tile_counter();
    if (!kp->tile_counter)
      return fail(QATTN_ERR_LAUNCH,
                  "could not allocate the persistent grid's tile counter (first launch on this device inside a stream capture?)");
  }
  return qattn::host::ok();
}

// TL `Merge split ... end` (ABI 10): the merged O (16-byte aligned, strides multiples of 8 elements,
// like o) and LSE (4-byte aligned or NULL), and the counters of the launch's gx x gy x batch tiles
// per consumer warpgroup (qattn/sm90/merge.cuh). QATTN_OK or a status.
static inline int merge_params(Params* kp, const qattn_fwd_params& p, long long gx, long long gy, int consumers, void* stream) {
  using qattn::host::fail;
  if (p.o_merged == nullptr)
    return fail(QATTN_ERR_SHAPE, "this kernel merges the parts of its split keys itself (TL Merge): o_merged must not be NULL");
  const auto misaligned = [](long long s) { return s % 8 != 0; };
  if (reinterpret_cast<uintptr_t>(p.o_merged) % 16 != 0 || misaligned(p.om_batch_stride) || misaligned(p.om_row_stride) ||
      misaligned(p.om_head_stride))
    return fail(QATTN_ERR_ALIGNMENT, "o_merged %p with strides (%lld, %lld, %lld): 16-byte aligned, strides multiples of 8 elements",
                p.o_merged, (long long)p.om_batch_stride, (long long)p.om_row_stride, (long long)p.om_head_stride);
  if (reinterpret_cast<uintptr_t>(p.lse_merged) % 4 != 0) return fail(QATTN_ERR_ALIGNMENT, "lse_merged %p: 4-byte aligned", p.lse_merged);
  kp->o_merged = p.o_merged;
  kp->lse_merged = p.lse_merged;
  kp->om_batch_stride = p.om_batch_stride;
  kp->om_row_stride = p.om_row_stride;
  kp->om_head_stride = p.om_head_stride;
  kp->merge_m_blocks = int(gx);
  kp->merge_heads = int(gy);
  kp->merge_counters = qattn::host::merge_counters(gx * gy * p.batch * consumers, stream);
  if (kp->merge_counters == nullptr)
    return fail(QATTN_ERR_LAUNCH,
                "could not allocate the merge's %lld counters (the first launch of this size on the device inside a stream "
                "capture? launch once before capturing)",
                gx * gy * p.batch * consumers);
  return qattn::host::ok();
}

#if defined(__CUDACC__)
// Launches `kernel` on `blocks` blocks with its dynamic shared memory (raising the 48 KB limit once).
template <class Kernel>
static inline int launch(Kernel kernel, const Params& kp, int blocks, int threads, int smem_bytes, void* stream,
                         const char* name) {
  cudaError_t e = qattn::host::allow_smem(kernel, smem_bytes);
  if (e != cudaSuccess) return qattn::host::launch_status(e, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  kernel<<<dim3(unsigned(blocks)), threads, smem_bytes, static_cast<cudaStream_t>(stream)>>>(kp);
  return qattn::host::launch_status(cudaGetLastError(), name);
}
#endif

// The split build: the kernel's fatbin is linked into the library as binary data (`ld --format=binary
// kernel.fatbin`, which names these symbols) and loaded on the first launch as a context-independent
// CUDA library (every device, every context); the kernel handle then launches like a __global__
// function (cudaFuncSetAttribute / cudaLaunchKernel take a cudaKernel_t cast to a pointer).
extern "C" {
extern const unsigned char _binary_kernel_fatbin_start[] __attribute__((weak, visibility("hidden")));
extern const unsigned char _binary_kernel_fatbin_end[] __attribute__((weak, visibility("hidden")));
}

// The kernel `name` of the embedded fatbin, or nullptr with the reason in *why and the runtime's
// error in *err (cudaSuccess when no fatbin is linked in); the runtime refuses it with a driver too
// old for its code or without an sm90 device.
static inline const void* fatbin_kernel(const char* name, const char** why, cudaError_t* err) {
  static std::once_flag once;
  static cudaKernel_t kernel = nullptr;
  static cudaError_t error = cudaSuccess;
  static char reason[256] = "";
  std::call_once(once, [&] {
    if (!_binary_kernel_fatbin_start || !_binary_kernel_fatbin_end || _binary_kernel_fatbin_end <= _binary_kernel_fatbin_start) {
      std::snprintf(reason, sizeof reason, "the library holds no kernel image (kernel.fatbin was not linked in)");
      return;
    }
    // the image as the loader reads it: 8-byte aligned (the linked data is byte-aligned), kept for the process
    const size_t n = size_t(_binary_kernel_fatbin_end - _binary_kernel_fatbin_start);
    uint64_t* image = new uint64_t[(n + 7) / 8]();
    std::memcpy(image, _binary_kernel_fatbin_start, n);
    cudaLibrary_t lib = nullptr;
    cudaError_t e = cudaLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e == cudaSuccess) e = cudaLibraryGetKernel(&kernel, lib, name);
    if (e != cudaSuccess) {
      kernel = nullptr;
      error = e;
      std::snprintf(reason, sizeof reason, "loading the kernel %s from the library's fatbin", name);
    }
  });
  *why = reason;
  *err = error;
  return reinterpret_cast<const void*>(kernel);
}

// Launches the embedded fatbin's kernel `name` (the split build's form of `launch`).
static inline int launch_fatbin(const char* name, const Params& kp, int blocks, int threads, int smem_bytes, void* stream,
                               const char* what) {
  const char* why = "";
  cudaError_t err = cudaSuccess;
  const void* kernel = fatbin_kernel(name, &why, &err);
  if (!kernel) return err == cudaSuccess ? qattn::host::fail(QATTN_ERR_LAUNCH, "%s", why) : qattn::host::launch_status(err, why);
  cudaError_t e = qattn::host::allow_smem(kernel, smem_bytes);
  if (e != cudaSuccess) return qattn::host::launch_status(e, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  void* args[] = {const_cast<Params*>(&kp)};
  e = cudaLaunchKernel(kernel, dim3(unsigned(blocks)), dim3(unsigned(threads)), args, size_t(smem_bytes),
                       static_cast<cudaStream_t>(stream));
  return qattn::host::launch_status(e, what);
}

}  // namespace qattn::sm90
