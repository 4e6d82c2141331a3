// qattn device runtime, host side: the pieces of the C ABI (include/qattn/qattn.h) that every
// generated library shares: the per-thread last error, argument checks, launch error mapping.
// Everything here has internal linkage (`static`): several generated libraries live in one process,
// and an inline function's static locals would be one object shared by all of them
// (STB_GNU_UNIQUE), e.g. the "shared-memory limit already raised" flag of another kernel.
#pragma once
#include <cmath>
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

// A persistent kernel's next-tile counter: a pair of zeroed ints of the current device out of 512, a
// different pair per launch (launches that run at the same time do not share one; the kernel sets
// them back to 0): [0] the next tile, [1] (ragged launches, which number their live tiles only) the blocks done.
// Allocated on the first persistent launch on a device (not during stream capture); nullptr when
// that fails.
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
  return base[dev] + 2 * (next[dev]++ % (kSlots / 2));
}

// The counters of an in-kernel merge of split keys (TL `Merge`, qattn/sm90/merge.cuh): `n` zeroed
// ints of the current device, which the kernel leaves zeroed. Launches take turns over 8 such
// ranges (launches that run at the same time on different streams do not share one). Allocated,
// or grown to a larger n (after the device's work is done: a kernel may still use the old ranges),
// on a launch outside stream capture (`stream`: the launch's); nullptr when that fails or n exceeds 2^24.
static inline int* merge_counters(int64_t n, void* stream) {
  constexpr int kRanges = 8;
  int dev = 0;
  if (n < 1 || n > (int64_t(1) << 24) || cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  static std::mutex mu;
  static int* base[64] = {};
  static int64_t cap[64] = {};
  static unsigned next[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (n > cap[dev]) {
    int64_t c = 4096;
    while (c < n) c *= 2;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capturing) != cudaSuccess ||
        capturing != cudaStreamCaptureStatusNone)
      return nullptr;  // (a synchronisation would end the caller's capture)
    if (base[dev] && (cudaDeviceSynchronize() != cudaSuccess || cudaFree(base[dev]) != cudaSuccess)) return nullptr;
    base[dev] = nullptr, cap[dev] = 0;
    int* b = nullptr;
    if (cudaMalloc(&b, size_t(kRanges * c) * sizeof(int)) != cudaSuccess) return nullptr;
    if (cudaMemset(b, 0, size_t(kRanges * c) * sizeof(int)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      cudaFree(b);
      return nullptr;
    }
    base[dev] = b, cap[dev] = c;
  }
  return base[dev] + (next[dev]++ % kRanges) * cap[dev];
}

// The argument checks of every generated qattn_fwd (include/qattn/qattn.h), before anything is
// launched: ABI version, the compiled head dims, positive sizes, heads_q a multiple of heads_kv, a
// positive finite softmax_scale, non-NULL and 16-byte aligned tensors and strides, one (batch,
// head) matrix below 2^31 elements, a 4-byte aligned LSE, the auxiliary inputs the kernel reads
// (bit i of aux_needed: aux[i]). QATTN_OK, or a status with the message in qattn_last_error().
static inline int check_fwd_params(const qattn_fwd_params* params, int d_qk, int d_v, int elem_bytes, int out_bytes,
                                   bool lse, unsigned aux_needed, bool split = false) {
  if (params == nullptr) return fail(QATTN_ERR_SHAPE, "params is NULL");
  const qattn_fwd_params& p = *params;
  if (p.abi_version != QATTN_ABI_VERSION)
    return fail(QATTN_ERR_ABI, "abi_version %d; this library was built for %d", p.abi_version, QATTN_ABI_VERSION);
  if (p.sm_margin < 0) return fail(QATTN_ERR_ARG, "sm_margin %d: the SMs to leave free cannot be negative", p.sm_margin);
  if (p.splits < 0 || p.splits > 65535 || (!split && p.splits > 1))
    return fail(QATTN_ERR_ARG, "splits %d: %s", p.splits,
                split ? "the parts of split keys are 0 or 1 (one part) to 65535"
                      : "this kernel does not split the keys (its TL has no `s = 0: splits` axis); pass 0 or 1");
  if (split && lse && p.lse == nullptr) return fail(QATTN_ERR_SHAPE, "a kernel that splits the keys writes each part's LSE: lse must not be NULL");
  if (p.d_qk != d_qk || p.d_v != d_v)
    return fail(QATTN_ERR_SHAPE, "head dims (%d, %d); this kernel was generated for (%d, %d)", p.d_qk, p.d_v, d_qk, d_v);
  if (p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.seqlen_q < 0 || p.seqlen_k < 0)
    return fail(QATTN_ERR_SHAPE, "sizes must be positive (batch %d, heads %d/%d, seqlens %d/%d)", p.batch, p.heads_q,
                p.heads_kv, p.seqlen_q, p.seqlen_k);
  if (p.heads_q % p.heads_kv != 0)
    return fail(QATTN_ERR_SHAPE, "heads_q %d is not a multiple of heads_kv %d", p.heads_q, p.heads_kv);
  if (!(p.softmax_scale > 0.f) || p.softmax_scale == INFINITY)
    return fail(QATTN_ERR_SHAPE, "softmax_scale %g must be positive and finite", double(p.softmax_scale));
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.o == nullptr)
    return fail(QATTN_ERR_SHAPE, "q, k, v and o must not be NULL");
  for (int i = 0; i < 4; ++i)
    if (((aux_needed >> i) & 1u) && p.aux[i] == nullptr) return fail(QATTN_ERR_AUX, "aux[%d] must not be NULL", i);
  const int eb = elem_bytes, ob = out_bytes;
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.o) ||
      !stride_aligned(p.q_batch_stride, eb) || !stride_aligned(p.q_row_stride, eb) || !stride_aligned(p.q_head_stride, eb) ||
      !stride_aligned(p.k_batch_stride, eb) || !stride_aligned(p.k_row_stride, eb) || !stride_aligned(p.k_head_stride, eb) ||
      !stride_aligned(p.v_batch_stride, eb) || !stride_aligned(p.v_row_stride, eb) || !stride_aligned(p.v_head_stride, eb) ||
      !stride_aligned(p.o_batch_stride, ob) || !stride_aligned(p.o_row_stride, ob) || !stride_aligned(p.o_head_stride, ob))
    return fail(QATTN_ERR_ALIGNMENT, "q, k, v, o and their strides must be 16-byte aligned (rows of whole 16-byte chunks)");
  if (int64_t(p.seqlen_q + 1) * (p.q_row_stride > p.o_row_stride ? p.q_row_stride : p.o_row_stride) > 2147483647LL ||
      int64_t(p.seqlen_k + 1) * (p.k_row_stride > p.v_row_stride ? p.k_row_stride : p.v_row_stride) > 2147483647LL)
    return fail(QATTN_ERR_SHAPE, "one (batch, head) matrix spans more than 2^31 elements (rows * row_stride)");
  if (lse && p.lse != nullptr && (reinterpret_cast<uintptr_t>(p.lse) & 3u))
    return fail(QATTN_ERR_ALIGNMENT, "lse must be 4-byte aligned");
  return ok();
}

// The page fields of a kernel that reads a paged KV cache (TL `{paged: T}`; ABI 4): positive page_size,
// pages and num_pages, seqlen_k within the block table (pages * page_size); page_size a multiple of
// `page_multiple`, and, when tile_rows > 0, dividing or a multiple of the key tile (whole pages per
// TMA box). The block table's entries are the caller's to keep below num_pages (device memory).
static inline int check_paged(const qattn_fwd_params& p, int page_multiple, int tile_rows) {
  if (p.page_size <= 0 || p.pages <= 0 || p.num_pages <= 0)
    return fail(QATTN_ERR_SHAPE, "a paged KV cache needs positive page_size, pages and num_pages (got %d, %d, %d)", p.page_size,
                p.pages, p.num_pages);
  if (int64_t(p.seqlen_k) > int64_t(p.pages) * p.page_size)
    return fail(QATTN_ERR_SHAPE, "seqlen_k %d exceeds the block table's %d pages of %d rows", p.seqlen_k, p.pages, p.page_size);
  if (p.page_size % page_multiple != 0 || (tile_rows > 0 && tile_rows % p.page_size != 0 && p.page_size % tile_rows != 0))
    return fail(QATTN_ERR_SHAPE, "page_size %d: this kernel reads pages of a multiple of %d rows that divide or are a multiple of %d",
                p.page_size, page_multiple, tile_rows);
  return ok();
}

// ABI 5, a kernel whose TL reads packed ragged batches ({ragged}): the packed tensors' row counts.
static inline int check_ragged(const qattn_fwd_params& p, bool q, bool k) {
  if ((q && p.total_q < 0) || (k && p.total_k < 0))
    return fail(QATTN_ERR_SHAPE, "packed ragged batches need total_q, total_k >= 0 (the packed tensors' rows; got %d, %d)", p.total_q,
                p.total_k);
  return ok();
}

// The argument checks of a generated qattn_bwd: as check_fwd_params, for the backward's tensors
// (dq fp32; dk / dv of dk_bytes per element, fp32 when accumulated).
static inline int check_bwd_params(const qattn_bwd_params* params, int d_qk, int d_v, int elem_bytes, int dk_bytes,
                                   unsigned aux_needed = 0u) {
  if (params == nullptr) return fail(QATTN_ERR_SHAPE, "params is NULL");
  const qattn_bwd_params& p = *params;
  if (p.abi_version != QATTN_ABI_VERSION)
    return fail(QATTN_ERR_ABI, "abi_version %d; this library was built for %d", p.abi_version, QATTN_ABI_VERSION);
  if (p.d_qk != d_qk || p.d_v != d_v)
    return fail(QATTN_ERR_SHAPE, "head dims (%d, %d); this kernel was generated for (%d, %d)", p.d_qk, p.d_v, d_qk, d_v);
  if (p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.seqlen_q < 0 || p.seqlen_k < 0)
    return fail(QATTN_ERR_SHAPE, "sizes must be positive (batch %d, heads %d/%d, seqlens %d/%d)", p.batch, p.heads_q,
                p.heads_kv, p.seqlen_q, p.seqlen_k);
  if (p.heads_q % p.heads_kv != 0)
    return fail(QATTN_ERR_SHAPE, "heads_q %d is not a multiple of heads_kv %d", p.heads_q, p.heads_kv);
  if (!(p.softmax_scale > 0.f) || p.softmax_scale == INFINITY)
    return fail(QATTN_ERR_SHAPE, "softmax_scale %g must be positive and finite", double(p.softmax_scale));
  if (!p.q || !p.k || !p.v || !p.o || !p.dout || !p.lse || !p.dq || !p.dk || !p.dv)
    return fail(QATTN_ERR_SHAPE, "q, k, v, o, dout, lse, dq, dk and dv must not be NULL");
  for (int i = 0; i < 4; ++i)
    if (((aux_needed >> i) & 1u) && p.aux[i] == nullptr) return fail(QATTN_ERR_AUX, "aux[%d] must not be NULL", i);
  const int eb = elem_bytes;
  const bool in_ok = aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.o) && aligned16(p.dout) &&
                     stride_aligned(p.q_batch_stride, eb) && stride_aligned(p.q_row_stride, eb) && stride_aligned(p.q_head_stride, eb) &&
                     stride_aligned(p.k_batch_stride, eb) && stride_aligned(p.k_row_stride, eb) && stride_aligned(p.k_head_stride, eb) &&
                     stride_aligned(p.v_batch_stride, eb) && stride_aligned(p.v_row_stride, eb) && stride_aligned(p.v_head_stride, eb) &&
                     stride_aligned(p.o_batch_stride, eb) && stride_aligned(p.o_row_stride, eb) && stride_aligned(p.o_head_stride, eb) &&
                     stride_aligned(p.do_batch_stride, eb) && stride_aligned(p.do_row_stride, eb) && stride_aligned(p.do_head_stride, eb);
  if (!in_ok) return fail(QATTN_ERR_ALIGNMENT, "q, k, v, o, dout and their strides must be 16-byte aligned");
  const auto al = [](const void* ptr, int bytes) { return (reinterpret_cast<uintptr_t>(ptr) % uintptr_t(bytes)) == 0; };
  if (!al(p.dq, 4) || !al(p.lse, 4) || !al(p.dk, dk_bytes) || !al(p.dv, dk_bytes))
    return fail(QATTN_ERR_ALIGNMENT, "lse, dq, dk and dv must be aligned to their element size");
  int64_t widest = 0;
  for (int64_t s : {p.q_row_stride, p.o_row_stride, p.do_row_stride, p.dq_row_stride, p.k_row_stride, p.v_row_stride,
                    p.dk_row_stride, p.dv_row_stride})
    widest = s > widest ? s : widest;
  const int64_t rows = p.seqlen_q > p.seqlen_k ? p.seqlen_q : p.seqlen_k;
  if (int64_t(rows + 1) * widest > 2147483647LL)
    return fail(QATTN_ERR_SHAPE, "one (batch, head) matrix spans more than 2^31 elements (rows * row_stride)");
  return ok();
}

// The argument checks of a generated qattn_combine: ABI version, the compiled d_v, positive sizes,
// non-NULL inputs and O, O_part / O and their strides aligned to the kernel's vector accesses (vec
// elements of part_bytes / out_bytes), 4-byte aligned LSEs. Offsets are 64-bit in the kernel.
static inline int check_combine_params(const qattn_combine_params* params, int d_v, int vec, int part_bytes, int out_bytes) {
  if (params == nullptr) return fail(QATTN_ERR_SHAPE, "params is NULL");
  const qattn_combine_params& p = *params;
  if (p.abi_version != QATTN_ABI_VERSION)
    return fail(QATTN_ERR_ABI, "abi_version %d; this library was built for %d", p.abi_version, QATTN_ABI_VERSION);
  if (p.d_v != d_v) return fail(QATTN_ERR_SHAPE, "d_v %d; this kernel was generated for %d", p.d_v, d_v);
  if (p.batch <= 0 || p.splits <= 0 || p.heads_q <= 0 || p.seqlen_q < 0)
    return fail(QATTN_ERR_SHAPE, "sizes must be positive (batch %d, splits %d, heads_q %d, seqlen_q %d)", p.batch, p.splits,
                p.heads_q, p.seqlen_q);
  if (!p.o_part || !p.lse_part || !p.o) return fail(QATTN_ERR_SHAPE, "o_part, lse_part and o must not be NULL");
  const auto al = [](const void* ptr, int bytes) { return (reinterpret_cast<uintptr_t>(ptr) % uintptr_t(bytes)) == 0; };
  const int pv = vec * part_bytes, ov = vec * out_bytes;
  const auto st = [](int64_t stride, int elem, int bytes) { return (stride * elem) % bytes == 0; };
  if (!al(p.o_part, pv) || !al(p.o, ov) || !st(p.op_batch_stride, part_bytes, pv) || !st(p.op_split_stride, part_bytes, pv) ||
      !st(p.op_row_stride, part_bytes, pv) || !st(p.op_head_stride, part_bytes, pv) || !st(p.o_batch_stride, out_bytes, ov) ||
      !st(p.o_row_stride, out_bytes, ov) || !st(p.o_head_stride, out_bytes, ov))
    return fail(QATTN_ERR_ALIGNMENT, "o_part, o and their strides must be aligned to %d and %d bytes (the kernel's vector accesses)",
                pv, ov);
  if (!al(p.lse_part, 4) || (p.lse && !al(p.lse, 4))) return fail(QATTN_ERR_ALIGNMENT, "lse_part and lse must be 4-byte aligned");
  return ok();
}

// The launch-time builtins a kernel's TL reads (docs/tl.md): window sides >= -1 (-1: unbounded)
// and below 2^30, a positive finite softcap. QATTN_OK or QATTN_ERR_ARG.
template <class Params>
static inline int check_launch_args(const Params& p, bool window, bool softcap) {
  if (window && (p.window_left < -1 || p.window_right < -1 || p.window_left >= (1 << 30) || p.window_right >= (1 << 30)))
    return fail(QATTN_ERR_ARG, "window (%d, %d): each side must be >= 0, or -1 for unbounded", p.window_left, p.window_right);
  if (window && int64_t(p.seqlen_q) + p.seqlen_k >= (int64_t(1) << 30))
    return fail(QATTN_ERR_SHAPE, "seqlen_q + seqlen_k = %lld: a window kernel takes sequences below 2^30 together",
                (long long)p.seqlen_q + p.seqlen_k);
  if (softcap && !(p.softcap > 0.f && p.softcap < INFINITY))
    return fail(QATTN_ERR_ARG, "softcap %g must be positive and finite", double(p.softcap));
  return ok();
}

// The TL Grid's extents, checked against what a launch can express; QATTN_OK with *empty set when
// a Grid axis is empty (nothing to launch).
static inline int check_grid(long long gx, long long gy, long long gz, bool* empty) {
  *empty = gx <= 0 || gy <= 0 || gz <= 0;
  if (*empty) return ok();
  if (gx > 2147483647LL || gy > 65535 || gz > 65535)
    return fail(QATTN_ERR_SHAPE, "grid (%lld, %lld, %lld) exceeds CUDA's limits", gx, gy, gz);
  return ok();
}

// The TL Grid of a kernel launched 1-D over its work tiles (sm90: the tile scheduler maps tile t to
// its Grid point): no per-axis limit (batch x splits may pass 65535), the count checked by
// make_params (<= 2^31).
static inline int check_tiles(long long gx, long long gy, long long gz, bool* empty) {
  *empty = gx <= 0 || gy <= 0 || gz <= 0;
  return ok();
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
