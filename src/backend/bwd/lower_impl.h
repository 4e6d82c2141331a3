// Internals of the backward lowering (lower.h), shared by lower.cc (the header facts, tensors, copies
// and mma.sync GEMMs), compute.cc (element-wise, row and conversion Computes, Reshape), wgmma.cc (the
// GEMMs on Hopper's warpgroup MMA and their waits), schedule.cc (barriers and the loop's copy/compute
// overlap), ordered.cc (`{ordered}` additions) and abi.cc (the preamble, the declarations of
// variants, the C ABI and the kernel info). Not part of the public API.
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/arch.h"
#include "backend/bwd/lower.h"
#include "backend/cpp_expr.h"
#include "backend/cuda_out.h"
#include "backend/stmt_header.h"
#include "tl/eval.h"

namespace qattn::backend::bwd::detail {

using tl::Stmt;

using Out = backend::CudaOut;  // indented C++ text

// A kernel argument of the backward ABI (qattn_bwd_params).
struct GlobalArg {
  const char* tl;
  const char* field;   // pointer field
  const char* stride;  // stride prefix ("" for lse)
  bool out;
};
inline const GlobalArg kArgs[] = {{"Q", "q", "q", false},   {"K", "k", "k", false},     {"V", "v", "v", false},
                           {"O", "o", "o", false},   {"dO", "dout", "do", false}, {"LSE", "lse", "", false},
                           {"dQ", "dq", "dq", true}, {"dK", "dk", "dk", true},    {"dV", "dv", "dv", true}};

inline const GlobalArg* find_arg(const std::string& n) {
  for (const auto& a : kArgs)
    if (n == a.tl) return &a;
  return nullptr;
}

struct SharedBuf {
  std::string var, layout;  // C++ tensor (or float*) and layout type
  int rows = 0, cols = 0;   // cols 0: a 1-D fp32 row vector
  tl::DType dtype = tl::DType::F16;
  int64_t offset = 0, bytes = 0;  // bytes of one slot
  int stages = 1;                  // `{stages: 2}`: a ring of two slots, the loop fills the next one
  int atom = 0;                    // wgmma mode: the swizzle atom's columns when not smem_layout's default (32: 64-byte swizzle)
};

struct RegBuf {
  std::string var;
  int rows = 0, cols = 0;   // cols 0: a row vector
  tl::DType dtype = tl::DType::F32;
  bool computed = false;    // written by a Compute (else filled by a Copy from shared only)
  bool elementwise = false; // read by a Compute other than GEMM
  std::string a_view;       // after `Reshape`: the A-operand fragment view
  bool from_shared = false; // after `Copy X from shared to register` of a GEMM-only tile: the GEMM reads shared
  bool at_use = false;      // `{at_use}` vector: not held in registers, read from its shared ring slot where a Compute reads it by column
  std::string at_use_scale; // ... times this (a `Compute Multiply X, c` folded into those reads); empty: 1
  bool at_use_loaded = false; // ... its Copy from shared came earlier in this iteration of the loop (else a read is XL0301)
  int wm = 0;               // `{warps_m: N}` (or inherited from the operand): warps along the rows; 0: the default
  std::string layout;       // wgmma mode: the layout type of an N-split tile (`MmaCols<R, C, WGN>{}`); empty: Mma<R, WM>
  int col_rows = 0, col_cols = 0;  // a vector read as `X^T` of an (col_rows, col_cols) tile, held by column (wgmma mode)
};

// The gradient dT of an auxiliary input T (TL `Compute Gradient dS, S0 and accumulate dT at [..]
// with NAME`): each thread sums its elements' dS * d NAME / d T over the loop and the block adds the
// sums once at its end. `table`: the index's last component depends on the element (a relative
// bias's bucket), so the sums go to a table of E floats in shared memory first.
struct AuxGrad {
  std::string name, input, score;  // dT, T, the Score NAME
  int slot = 0;                     // qattn_bwd_params::daux[slot] (ABI 9)
  bool table = false;
  int64_t extent = 1, offset = 0;   // the table's E entries and its byte offset in shared memory
  std::vector<tl::Expr> index;      // where NAME reads T (tl::derive_aux)
  tl::Expr derivative;              // d NAME / d T
};

class Lower {
 public:
  Lower(const tl::Program& p, const tl::CheckInfo& info, const plan::Target& t, support::DiagSink& d)
      : prog_(p), info_(info), target_(t), diags_(d) {}

  std::optional<Translation> run();

 private:
  bool fail(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint);
  std::optional<int64_t> eval(const tl::Expr& e, support::SrcLoc at, const std::string& what);
  // A buffer the lowering expects: XL0301 naming the statement when it is not there (never throws).
  SharedBuf* sh(const std::string& n, const Stmt& s);
  RegBuf* rg(const std::string& n, const Stmt& s);
  std::string cint(const tl::Expr& e) const { return names_.int_expr(e); }
  std::string cfloat(const tl::Expr& e) const { return names_.float_expr(e); }
  std::string id(const std::string& n) const { return names_.ident(n); }
  static std::string ref(const Stmt& s);

  // ---- header ------------------------------------------------------------------------------------
  bool header();

  // ---- tensors: shared plan, register facts ------------------------------------------------------
  void walk(const std::vector<Stmt>& body, const std::function<void(const Stmt&)>& fn) const;

  bool tensors();

  // ---- the preamble --------------------------------------------------------------------------------
  void preamble(Out& w);

  // ---- barriers ------------------------------------------------------------------------------------
  // Shared buffers written since the last barrier: by cp.async (in flight until waited for) or by
  // the threads' own stores; and whether shared memory was read since the last barrier.
  void barrier(Out& w, const std::string& why);
  void before_read(Out& w, const std::string& name);
  // Before `name` is written: a barrier when some warp may still be reading it.
  void before_write(Out& w, const std::string& name, bool async);
  void flush(Out& w);

  // ---- the kernel ---------------------------------------------------------------------------------
  void kernel(Out& w);

  void body(Out& w, const std::vector<Stmt>& stmts, bool in_loop);

  void one(Out& w, const Stmt& s);

  // The statements of `body` that read the shared buffer of `name` (GEMM operands, Copies from shared).
  static bool reads(const Stmt& st, const std::string& name);
  static bool writes_shared(const Stmt& st, const std::string& name);
  // A global -> shared Copy at `k` of a loop body that the loop issues ahead (for the next iteration):
  // its buffer has no other writer in the body and the Copy comes before its first read. `last`: that
  // buffer's last read in the body (-1: none).
  static bool prefetchable(const std::vector<Stmt>& body, size_t k, long* last = nullptr);

  // The loop's copy/compute overlap (chosen here; the TL states what is copied, not when): a global ->
  // shared Copy of the loop body, whose buffer no other statement of the body writes, is issued for
  // iteration i + 1 right after the last statement of iteration i that reads the buffer (one
  // __syncthreads first), and for the first iteration before the loop; its own place in the body then
  // only marks the buffer as in flight, waited for at its first read.
  void loop(Out& w, const Stmt& s);

  // The copy call of a global -> shared Copy (tile at the statement's coordinate; into the slot of
  // iteration `loop_var_` for a ring).
  void emit_g2s(Out& w, const Stmt& st);
  // The view of a ring buffer's slot for iteration `iter` (a C++ int expression).
  std::string slot_decl(const SharedBuf& b, const std::string& iter) const;
  // Ring copies of the next iteration, issued right after the current one's tiles are waited for.
  void issue_ring(Out& w);
  // The loop's `{skip: NAME}`: `visible_i`, `next_i` and `first_i` over the tile pair the body's
  // `Compute Mask S at [r, c] with NAME` masks. False without the attribute (or after XL0301).
  bool skip_lambdas(Out& w, const Stmt& loop);
  // `Copy X ... and accumulate {ordered}` (ordered.cc): wait for the tile's turn, add without atomics,
  // pass the turn; the tile's counter is a slab of the workspace (ws_counts_). False after XL0301.
  bool ordered_add(Out& w, const Stmt& s, const RegBuf& r);
  std::string ordered_loop_var() const;

  // The tiled MMA whose accumulator a register tile of `rows` rows is (preamble `Mma<R, WM>`): WM warps
  // along M (the tile's `{warps_m: WM}`, by default min(WARPS, rows / 16)), the rest along N. mma()
  // names it (and records it for the kernel IR); layout_ok() raises XL0202 when a (rows, cols) tile
  // cannot be split that way; same_rows() when two tiles combined row by row are laid out differently.
  // The register layout type of a tile (mma() or its N-split wgmma layout).
  std::string mma_of(const RegBuf& r) { return r.layout.empty() ? mma(r.rows, r.wm) : r.layout; }

  // ---- wgmma mode (Hopper): the GEMMs on warpgroup MMA (wgmma.cc) ---------------------------------
  // Chosen for an sm90 target when every GEMM of the program has a wgmma form (wgmma_plan's rules);
  // otherwise the kernel is lowered with mma.sync and wg_reason_ says why.
  bool wgmma_plan();
  // The GEMM's shape and operand forms in wgmma mode; nullopt (and the reason) when it has none.
  struct WgGemm {
    bool rs = false;               // A from registers
    bool a_mn = false, b_mn = false;
    int m = 0, n = 0, k = 0;       // the product (m, n) and the depth
    int a_rows = 0, b_rows = 0;    // rows of the shared tiles the operands are read from
    bool split_n = false;          // the warpgroups side by side along N (else along M)
  };
  std::optional<WgGemm> wg_form(const Stmt& s, std::string& why) const;
  void wg_gemm(Out& w, const Stmt& s, RegBuf& acc, const WgGemm& g);
  std::string wg_atom(const WgGemm& g) const;
  // The wgmma groups issued and not yet waited for (oldest first): the accumulator, the register A
  // operand and the shared tiles each reads. wait_before() waits (wgmma_wait<N>, N the groups issued
  // after the last one in conflict) before a statement that touches an accumulator, rewrites a
  // register A operand or writes a shared tile of a pending group; nullptr: every group.
  struct WgPending {
    std::string acc, a;
    std::set<std::string> smem;
  };
  std::vector<WgPending> wg_pending_;
  void wait_before(Out& w, const Stmt* s);
  void wait_for_smem(Out& w, const std::string& name);
  void wait_upto(Out& w, long idx);

  int warps_m(int rows, int wm = 0) const { return wm > 0 ? wm : std::max(1, std::min(warps_, rows / 16)); }
  int warps_n(int rows, int wm = 0) const { return warps_ / warps_m(rows, wm); }
  std::string mma(int rows, int wm = 0);
  bool layout_ok(int rows, int cols, int wm, const Stmt& s, const std::string& what);
  bool same_rows(const RegBuf& x, const RegBuf& y, const Stmt& s);
  int attr_wm(const Stmt& s);  // the statement's `{warps_m: N}`, 0 without it (-1 after a diagnostic)

  std::string shape(int r, int c) const { return "Shape<Int<" + std::to_string(r) + ">, Int<" + std::to_string(c) + ">>{}"; }

  void allocate(Out& w, const Stmt& s);

  void copy(Out& w, const Stmt& s);

  // The shared view a GEMM operand reads, (rows, K) for A / (N, K) for B, and its ldmatrix atom.
  struct View {
    std::string expr, atom;
  };
  std::optional<View> operand_view(const tl::Operand& o, bool is_a, const Stmt& s);

  void gemm(Out& w, const Stmt& s);

  bool is_tensor(const tl::Operand& o) const;

  void compute(Out& w, const Stmt& s);

  void mask(Out& w, const Stmt& s);

  // A Score / Mask declaration: device lambdas over the element's indices (the forward's form,
  // backend/emit_variant.cc), and for a Score its derivative in score (tl::derive_score).
  void declaration(Out& w, const Stmt& s);

  // `Compute Modify S at [r, c] with NAME` / `Compute Derivative dS, S0 at [r, c] with NAME`.
  void score_op(Out& w, const Stmt& s);

  void reshape(Out& w, const Stmt& s);

  // ---- Phases (phase.cc): kernels of their own, launched before the main one -----------------------
  bool collect_workspaces();  // the fp32 globals the phases write (workspaces_), XL0301 for a 2-D one
  bool is_workspace(const std::string& n) const;
  std::string workspace_elems() const;  // C++ (over p): the fp32 elements of every workspace together
  std::string workspace_ptr(const std::string& n, const tl::AllocateStmt& a) const;  // this block's (seqlen_q) of it
  void phase_kernels(Out& w);   // each Phase's __global__ (before the main kernel's text)
  void phase_launches(Out& w);  // their launches in qattn_bwd
  struct Phase {
    std::string kernel, threads, ref, kir;
    std::string ext[3];
  };
  std::vector<Phase> phases_;
  std::vector<std::string> workspaces_;  // in the order the phases declare them

  // ---- the C ABI -----------------------------------------------------------------------------------
  void abi(Out& w);

  std::string kir_text() const;

  const tl::Program& prog_;
  const tl::CheckInfo& info_;
  plan::Target target_;
  support::DiagSink& diags_;
  CppNames names_;
  tl::Env env_;
  bool failed_ = false;
  const Stmt* kernel_stmt_ = nullptr;
  const Stmt* grid_stmt_ = nullptr;
  tl::MaskSpec mask_;
  std::vector<std::pair<std::string, int64_t>> fixed_;
  std::vector<std::string> runtime_dims_;
  ArchSpec arch_;
  tl::DType elem_ = tl::DType::F16, dk_dtype_ = tl::DType::F32, dv_dtype_ = tl::DType::F32;
  int warps_ = 4, threads_ = 128, d_qk_ = 0, d_v_ = 0;
  std::string kernel_name_, info_json_;
  std::map<std::string, SharedBuf> shared_;
  std::map<std::string, RegBuf> regs_;
  std::set<std::string> computed_, elementwise_;
  int64_t smem_bytes_ = 0;
  std::set<std::string> written_async_, written_sync_;
  std::set<std::string> read_since_barrier_;  // shared buffers read since the last __syncthreads
  std::set<const Stmt*> prefetched_;  // loop Copies issued ahead (loop())
  std::vector<AuxGrad> aux_grads_;        // the gradients of auxiliary inputs (`Compute Gradient`)
  bool plan_aux_grads(int64_t& smem_off);  // their form and tables (after the shared buffers)
  const AuxGrad* aux_grad(const std::string& name) const;
  void gradient(Out& w, const Stmt& s);
  void aux_grad_lambdas(Out& w, const std::string& score);
  void aux_grad_init(Out& w, const AuxGrad& g);
  void aux_grad_flush(Out& w);
  std::map<std::string, int> aux_slot_;   // auxiliary inputs: ABI aux[] slot
  std::map<std::string, bool> aux_int_;   // ... int32 (else fp32)
  bool reads_softcap_ = false;            // a declaration reads the launch argument softcap
  std::string loop_var_;                  // the loop's variable while its body is lowered
  std::vector<const Stmt*> ring_pending_; // ring copies of iteration loop_var_ + 1 not yet issued
  std::string next_;                      // C++ index of the iteration after loop_var_'s (`i + 1`, `nx_i` with {skip})
  std::string fill_slot_;                 // C++ counter of the ring slot emit_g2s fills
  bool next_resolved_ = true;             // {skip}: nx_ assigned in this iteration (resolve_next)
  void resolve_next(Out& w);              // {skip}: nx_ from the clause read at the top, before its first use
  std::map<const Stmt*, std::string> full_flags_;  // a loop Mask's `full when` flag, read at the top
  void hoist_full_flags(Out& w, const std::vector<Stmt>& body);

  // ---- the loop's ring by TMA (wgmma mode; schedule.cc) -------------------------------------------
  // When every Copy the loop prefetches fills a 2-slot ring, and each 2-D one is a whole-width 16-bit
  // tile of a kernel input in 128-byte swizzled column blocks, the ring is filled by TMA (thread 0, one
  // tensor map per 2-D tile, built by qattn_bwd) and its fp32 rows by cp.async from the first 64
  // threads, all completing on the slot's mbarrier: the iteration waits on that mbarrier where it first
  // reads the ring (no cp.async.wait_group and __syncthreads at the loop's top), and the next tile is
  // issued right after the iteration's first block-wide barrier, when every warp is past the previous
  // iteration (the slot's last reader). H200: 1.03-1.17x (bench/results/2026-11-30-h200-bwd-tma-loads).
  struct TmaTile {
    std::string name, batch, head;  // the buffer; the C++ batch and head of its global Allocate's offset
    const GlobalArg* arg = nullptr;
    int rows = 0, cols = 0;  // (query tiles: rows along seqlen_q, heads_q heads)
  };
  std::vector<TmaTile> tma_tiles_;  // empty: the ring (if any) is filled by cp.async
  std::set<std::string> tma_ring_;  // every buffer of the TMA ring, its fp32 rows included
  int64_t tma_bar_off_ = -1;        // the two mbarriers' byte offset in shared memory
  bool tma_wait_due_ = false;       // this iteration's slot not waited for yet
  bool tma_issue_due_ = false;      // the next iteration's tiles not issued yet
  std::string tma_slot_, tma_parity_;  // C++: this iteration's slot and the parity its mbarrier completes
  static constexpr int kRingRowThreads = 64;  // the threads that copy the ring's fp32 rows

  // ---- tiles added to global memory by TMA (wgmma mode; schedule.cc) -----------------------------
  // An fp32 tile the loop adds into a kernel output (`Copy dQ (BM, d) in coordinate [i, 0] from
  // register to global and accumulate`, not `{ordered}`), the output's Allocate offset by the Grid's
  // batch and heads_q axes, the tile the wgmma accumulator of a product split over the warpgroups
  // (64 rows each, or a 64-row product split along N) in whole 32-column boxes: each warpgroup stages
  // its part in shared memory and one thread adds it with bulk tensor reductions
  // (device/qattn/sm90/backward.cuh add_acc_global_tma; a tensor map per tile built by qattn_bwd),
  // on a named barrier of its own (id 1 + warpgroups + wg) — FlashAttention-3's dQ. Not when the
  // stage does not fit in shared memory: then the threads' float4 reductions.
  // After the loop, the block's 16-bit dK and dV (`Copy dK (BN, d) in coordinate [n_block, 0] from
  // register to global`, MHA) go by bulk tensor stores (store_acc_global_tma) when the loop's shared
  // buffers can hold their stages (they are dead after the loop: a __syncthreads precedes the first
  // stage) — FlashAttention-3's epilogue. (GQA's fp32 dK, dV additions keep the float4 reductions.)
  struct TmaAdd {
    std::string name, batch, head;  // the tile; the C++ batch and head of its global Allocate's offset
    const GlobalArg* arg = nullptr;
    int rows = 0, cols = 0;
    int64_t off = 0;  // the stage's byte offset in shared memory (1024-byte aligned: the swizzle's period)
    bool epilogue = false;  // after the loop, staged in the loop's buffers
    bool store = false;     // ... a 16-bit tile stored (else fp32 added)
  };
  bool epilogue_synced_ = false;  // the __syncthreads before the epilogue's first stage is emitted
  std::vector<TmaAdd> tma_adds_;
  bool tma_add_wait_due_ = false;  // in the loop body before its first __syncthreads: that barrier waits for the previous additions
  bool tma_add_free_ = false;      // ... it did: the stages are free to write without a barrier of their own
  void plan_tma_adds();
  void plan_tma_epilogue(const Stmt& loop);
  std::optional<TmaAdd> tma_tile_copy(const Stmt& c) const;
  const Stmt* only_loop() const;                          // the program's one loop (nullptr: none or several)
  const Stmt* global_alloc(const std::string& n) const;  // n's `Allocate ... in global`
  const TmaAdd* tma_add(const std::string& n) const {
    for (const auto& t : tma_adds_)
      if (t.name == n) return &t;
    return nullptr;
  }
  bool grid_axis(const tl::Expr& e, const char* extent) const;  // e is the Grid variable over `extent`

  // ---- scratch handed between the warpgroups (wgmma mode, two or more warpgroups; schedule.cc) ---
  // A shared tile the loop body writes once from registers and then reads only in wgmma GEMMs (dS^T
  // for dQ = dS K, P and dS in the natural form): when no __syncthreads separates the previous
  // iteration's reads from the write (the TMA ring has none at the loop's top), the write waits on a
  // named barrier of its own warpgroup (id 1 + wg), on which every other warpgroup arrives once its
  // last wgmma reading such a tile has completed; the first visit waits for nothing and the last
  // arrives on nothing, so every sync meets its arrivals. A warpgroup running ahead then waits only
  // for the others' reads, not for them to reach the same statement.
  std::set<std::string> handoff_;      // the loop's scratch tiles
  int handoff_reads_left_ = 0;         // their GEMMs not yet issued in this iteration
  bool handoff_synced_ = false;        // this iteration's write waited on the named barrier
  bool handoff_arrived_ = false;       // ... and the arrival on the others' is emitted
  std::string visit_;                  // C++: the loop's visit index (0 on the first iteration)
  std::set<std::string> handed_;       // the scratch tiles some write waited on the named barrier for (kernel.kir)
  void handoff_plan(const Stmt& loop);
  void handoff_arrive(Out& w);  // after a wgmma wait: the arrival once every scratch read completed
  void plan_tma_ring();
  void tma_issue(Out& w, const std::vector<const Stmt*>& copies, const std::string& slot);
  std::string skip_;                      // the loop's `{skip: NAME}` (for the kernel IR)
  std::string skip_m_, skip_n_;           // ... its tile pair's rows and columns
  bool skip_reads_ = false;               // ... its `empty when` clause reads auxiliary inputs (preloaded)
  tl::Expr skip_at_[2];                   // ... and the Mask's `at [r, c]`
  const Stmt* loop_stmt_ = nullptr;       // the loop while its body is lowered
  std::vector<std::string> ws_counts_;    // `{ordered}`: each Copy's counters (C++ over p), in workspace order
  std::string reversed_grid_var_;         // ... the Grid variable launched in reverse (the in-loop order's)
  std::string reversed_extent_;           // ... and its extent (gridDim.x / y / z)
  std::set<std::pair<int, int>> mma_rows_; // (register tile rows, warps along M) of the Mma<R, WM> used
  int64_t row_scratch_bytes_ = 0;         // shared scratch of row reductions across warps (after the buffers)
  bool wg_ = false;                       // wgmma mode (sm90): the GEMMs on warpgroup MMA
  std::string wg_reason_;                 // ... or why an sm90 kernel keeps mma.sync
  std::map<std::string, std::string> split_acc_;  // wgmma: accumulators added to by products split along N -> their MmaCols layout
  std::map<std::string, std::pair<int, int>> col_vecs_;  // vectors used only as `X^T` of a (rows, cols) tile, filled from shared
  std::map<std::string, std::pair<int, int>> col_use_;   // every vector used as `X^T`: the tile it is read by column of
  std::set<std::string> row_use_;                        // vectors also read by row (a second operand without ^T)
  std::map<std::string, std::pair<int, int>> reg_shapes_; // register tiles' (rows, cols) (cols 0: a vector), in TL order
};

}  // namespace qattn::backend::bwd::detail
