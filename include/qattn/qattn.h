/* qattn C API: launch a generated attention kernel on device pointers.
 *
 * A kernel built by `qattn generate` is a shared library exporting the functions below. All
 * structs are plain C (no STL across the boundary); strides are in elements, not bytes, so both
 * BSHD and BHSD layouts (and any other strided view) are described by the same struct.
 *
 *   O[b, h, i, :] = softmax(mask(softmax_scale * Q[b, h, i, :] K[b, h / (heads_q / heads_kv), :, :]^T))
 *                   V[b, h / (heads_q / heads_kv), :, :]
 *   LSE[b, h, i]  = log sum_j exp(softmax_scale * Q K^T)[i, j]   (when lse != NULL and the kernel
 *                                                                  was generated with return_lse)
 */
#ifndef QATTN_QATTN_H_
#define QATTN_QATTN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QATTN_ABI_VERSION 10

typedef struct qattn_fwd_params {
  int32_t abi_version;   /* must be QATTN_ABI_VERSION */
  const void* q;         /* (batch, seqlen_q, heads_q, d_qk) elements of the kernel's dtype, any strides */
  const void* k;         /* (batch, seqlen_k, heads_kv, d_qk) */
  const void* v;         /* (batch, seqlen_k, heads_kv, d_v) */
  void* o;               /* (batch, seqlen_q, heads_q, d_v): fp16/bf16 (bf16 for fp8 kernels) */
  float* lse;            /* (batch, heads_q, seqlen_q) contiguous, or NULL */
  int64_t q_batch_stride, q_row_stride, q_head_stride;  /* the last dim is contiguous */
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int32_t batch, heads_q, heads_kv;
  int32_t seqlen_q, seqlen_k;
  int32_t d_qk, d_v;     /* must equal the kernel's compiled head dims */
  float softmax_scale;
  const float* descale_q; /* fp8 kernels: per-tensor descale factors on the device, or NULL (1.0) */
  const float* descale_k;
  const float* descale_v;
  /* ABI 2: the auxiliary inputs of the kernel's Score/Mask declarations (ALiBi slopes, segment
   * ids, a bias table, ...), contiguous row-major device arrays in the order qattn_kernel_info()'s
   * "aux" list gives (name, dtype fp32 or int32, shape); NULL for kernels without any. */
  const void* aux[4];
  /* ABI 3: the run-time arguments of kernels whose TL reads the builtins window_left / window_right
   * (a sliding window: keys q + off - window_left .. q + off + window_right; -1 on a side means
   * unbounded) or softcap (scores become softcap * tanh(s / softcap); > 0). qattn_kernel_info()'s
   * "args" lists the ones the kernel reads; the others are ignored. One kernel serves every value. */
  int32_t window_left, window_right;
  float softcap;
  /* ABI 4: a paged KV cache, for kernels whose TL pages K and V (docs/tl.md, "KV caches";
   * qattn_kernel_info()'s "kv_cache" names the block table and the key counts among "aux"). k and v
   * are then page pools (num_pages, page_size, heads_kv, d): k_batch_stride / v_batch_stride step
   * from page to page, k_row_stride / v_row_stride from row to row within one. The block table is
   * (batch, pages) int32 (page numbers below num_pages), seqlen_k <= pages * page_size. Ignored by
   * other kernels. */
  int32_t page_size, pages, num_pages;
  /* ABI 5: packed ragged batches, for kernels whose TL reads cumulative counts (`{ragged: T}`,
   * docs/tl.md "Ragged batches"; qattn_kernel_info()'s "varlen" names them among "aux"): q and o are
   * then (total_q, heads_q, d) and k, v (total_k, heads_kv, d) (row and head strides; the batch
   * strides are ignored), sequence b's rows start at cu_seqlens[b]; batch counts the sequences and
   * seqlen_q / seqlen_k are the longest ones (max_seqlen_q / max_seqlen_k); lse is (heads_q, total_q).
   * Ignored by other kernels. */
  int32_t total_q, total_k;
  /* ABI 7: SMs a persistent kernel (TL `Grid ... {persistent}`) leaves free, so that a kernel on
   * another stream runs beside it (ring attention's transfers: their NCCL kernels find no free SM
   * under a persistent grid that holds all of them); 0: every SM. Ignored by other kernels. */
  int32_t sm_margin;
  /* ABI 8: split keys (FlashDecoding's first kernel), for kernels whose TL writes O and LSE per part of
   * the keys (a Grid axis `s = 0: splits`, O and LSE at [b, s, head]; docs/tl.md "Splitting the keys";
   * qattn_kernel_info()'s "splits" is true): each sequence's keys are cut into `splits` parts and o /
   * lse receive the parts' results, o (batch * splits, seqlen_q, heads_q, d_v) with o_batch_stride
   * from one part to the next (part s of sequence b at b * splits + s) and lse (batch * splits,
   * heads_q, seqlen_q); a combine kernel (qattn_combine) merges them. 0 or 1: one part. Must be 0 or
   * 1 for other kernels. */
  int32_t splits;
  /* ABI 10: the merged result of split keys, for kernels whose TL merges the parts itself (`Merge s
   * ... end`; docs/tl.md "Merging the parts in the kernel"; qattn_kernel_info()'s "merge" is true):
   * o_merged (batch, seqlen_q, heads_q, d_v) of o's dtype, any strides, and lse_merged (batch,
   * heads_q, seqlen_q) contiguous or NULL receive the attention over all the keys; o and lse stay the
   * parts' scratch (as in ABI 8). NULL / ignored for other kernels. */
  void* o_merged;
  float* lse_merged;
  int64_t om_batch_stride, om_row_stride, om_head_stride;
} qattn_fwd_params;

typedef enum qattn_status {
  QATTN_OK = 0,
  QATTN_ERR_ABI = 1,          /* abi_version mismatch */
  QATTN_ERR_SHAPE = 2,        /* head dims differ from the compiled kernel, non-positive sizes,
                                 heads_q not a multiple of heads_kv */
  QATTN_ERR_ALIGNMENT = 3,    /* pointers or strides not aligned to 16 bytes */
  QATTN_ERR_LAUNCH = 4,       /* the CUDA launch failed (see qattn_last_error) */
  QATTN_ERR_ARCH = 5,         /* the device is not the architecture the kernel was built for */
  QATTN_ERR_AUX = 6,          /* an auxiliary input the kernel reads is NULL */
  QATTN_ERR_ARG = 7           /* a run-time argument out of range (window side < -1, softcap <= 0) */
} qattn_status;

/* Launches the forward kernel on `stream` (a cudaStream_t; NULL for the default stream). */
int qattn_fwd(const qattn_fwd_params* params, void* stream);

/* The backward pass (a library generated from a `Kernel NAME backward` TL program exports
 * qattn_bwd instead of qattn_fwd; its qattn_kernel_info says "pass": "backward"). The gradients of
 * O = attention(Q, K, V) for an upstream gradient dO, given the forward's O and LSE:
 * dQ, dK, dV. dQ is accumulated: fp32, zero at launch. dK and dV have the dtype the info's
 * "dk_dtype" names; "fp32" ones are accumulated too (GQA: the query heads of a kv head add their
 * shares) and must be zero at launch. Same layouts as qattn_fwd_params (last dim contiguous). A
 * Hopper library that adds dQ or stores dK, dV by TMA (kernel.kir: "add dQ ... by TMA reductions",
 * "store dK ... by TMA stores") needs those pointers and their strides to be multiples of 16 bytes:
 * QATTN_ERR_ALIGNMENT otherwise, nothing launched. */
typedef struct qattn_bwd_params {
  int32_t abi_version;   /* must be QATTN_ABI_VERSION */
  const void* q;         /* (batch, seqlen_q, heads_q, d_qk) */
  const void* k;         /* (batch, seqlen_k, heads_kv, d_qk) */
  const void* v;         /* (batch, seqlen_k, heads_kv, d_v) */
  const void* o;         /* (batch, seqlen_q, heads_q, d_v): the forward's output */
  const void* dout;      /* (batch, seqlen_q, heads_q, d_v): the gradient of O */
  const float* lse;      /* (batch, heads_q, seqlen_q) contiguous: the forward's LSE */
  float* dq;             /* (batch, seqlen_q, heads_q, d_qk) fp32, zero at launch */
  void* dk;              /* (batch, seqlen_k, heads_kv, d_qk) */
  void* dv;              /* (batch, seqlen_k, heads_kv, d_v) */
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t do_batch_stride, do_row_stride, do_head_stride;
  int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_row_stride, dv_head_stride;
  int32_t batch, heads_q, heads_kv;
  int32_t seqlen_q, seqlen_k;
  int32_t d_qk, d_v;
  float softmax_scale;
  const void* aux[4];    /* the auxiliary inputs of Score / Mask declarations (kernel info "aux" order) */
  int32_t window_left, window_right;  /* as in qattn_fwd_params */
  float softcap;
  /* ABI 6: scratch of the kernel: the fp32 workspaces of its TL's Phases (e.g. D = rowsum(dO * O),
   * one value per query row), then the turn counters of a deterministic kernel (its TL adds into dQ,
   * dK or dV `{ordered}`; qattn_kernel_info()'s "deterministic": true): at least
   * qattn_bwd_workspace_bytes(params) bytes, 4-byte aligned; the launch zeroes the counters on
   * `stream` and writes the workspaces before reading them. NULL / 0 when that function returns 0. */
  int32_t* workspace;
  int64_t workspace_bytes;
  /* ABI 9: the gradients of auxiliary inputs (learnable ALiBi slopes, bias tables), for kernels whose
   * TL accumulates them (`Compute Gradient`; qattn_kernel_info()'s "aux_grad" names the inputs, in
   * this order): fp32, the input's shape, zero at launch; the kernel adds to them. NULL otherwise. */
  float* daux[4];
} qattn_bwd_params;

/* Launches the backward kernel on `stream`. */
int qattn_bwd(const qattn_bwd_params* params, void* stream);

/* ABI 6: the workspace bytes qattn_bwd needs for these sizes (0 for a kernel without Phases and
 * `{ordered}` additions; -1 when params is NULL). Exported by every backward library. */
int64_t qattn_bwd_workspace_bytes(const qattn_bwd_params* params);

/* The combine step of split-key attention (a library generated from a `Kernel NAME combine` TL
 * program exports qattn_combine; its qattn_kernel_info says "pass": "combine" and names "dtype" (of
 * O), "part_dtype" (of O_part) and "d_v"). The keys of one attention problem were cut into `splits`
 * disjoint parts and each part's attention computed with its LSE; this merges them:
 *   LSE[b, h, i]    = log sum_s exp(LSE_part[b, s, h, i])
 *   O[b, i, h, :]   = sum_s exp(LSE_part[b, s, h, i] - LSE[b, h, i]) O_part[b, s, i, h, :]
 * A row whose parts are all empty (LSE_part = -inf) gets O = 0 and LSE = -inf. */
typedef struct qattn_combine_params {
  int32_t abi_version;   /* must be QATTN_ABI_VERSION */
  const void* o_part;    /* (batch, splits, seqlen_q, heads_q, d_v) elements of part_dtype, last dim contiguous */
  const float* lse_part; /* (batch, splits, heads_q, seqlen_q) fp32, last dim contiguous */
  void* o;               /* (batch, seqlen_q, heads_q, d_v) elements of dtype, last dim contiguous */
  float* lse;            /* (batch, heads_q, seqlen_q) contiguous, or NULL (not stored) */
  int64_t op_batch_stride, op_split_stride, op_row_stride, op_head_stride;
  int64_t lp_batch_stride, lp_split_stride, lp_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int32_t batch, splits, heads_q, seqlen_q;
  int32_t d_v;           /* must equal the kernel's compiled d_v */
} qattn_combine_params;

/* Launches the combine kernel on `stream`. */
int qattn_combine(const qattn_combine_params* params, void* stream);

/* A human-readable description of the last error of this thread (never NULL). */
const char* qattn_last_error(void);

/* What the library was generated for: a JSON object with spec, arch, tiles and TL source hash. */
const char* qattn_kernel_info(void);

#ifdef __cplusplus
}
#endif

#endif /* QATTN_QATTN_H_ */
