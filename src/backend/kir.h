// The kernel IR: what stage 2 decided about a kernel, as plain data, between the TL program and
// the CUDA text.
//
//   TL program (checked) --lower--> kir::Kernel --verify--> --emit--> CUDA C++
//                                        |
//                                        +--print--> kernel.kir (artifacts; qattn_kernel_info's JSON)
//
// Lowering (src/backend/sm90/lower.cc, ...) does all the analysis and raises every XL diagnostic;
// the verifier (kir_verify.cc) re-checks the invariants a lowering bug could break (shared memory
// fits, wgmma shapes, registers per SM, every wait has a producer, every ring slot is released
// before it is refilled); emitters turn a verified Kernel into CUDA and raise nothing. Every
// decision carries the TL statement it came from (`TlRef`), so the printed IR and the generated
// code both say `TL n: ...`.
//
// Strings named `cpp` or ending in `_cpp` are C++ expressions over the work tile's TL names (the
// generated Scope, `v.` in the kernel) or kernel constants; they are produced by the lowering from
// TL expressions (cpp_expr.h) and printed verbatim.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qattn/kinds.h"
#include "tl/ast.h"

namespace qattn::backend::kir {

// The TL statement a piece of the kernel lowers.
struct TlRef {
  int line = 0;      // 0: none (the lowering's own, e.g. an implicit release)
  std::string text;  // the statement as the TL printer writes it
};

// ---- the work tile: the TL names the generated code binds per Grid point ------------------------
struct Name {
  std::string tl;   // TL spelling
  std::string cpp;  // C++ identifier (cpp_expr.h ident)
  std::string value_cpp;  // Lets: the C++ value; runtime Dims: the Params field; fixed: the number
  TlRef stmt;             // Lets: the statement
};
struct Aux {  // an auxiliary global of the Score / Mask declarations (ABI aux[slot])
  std::string name;
  int slot = 0;
  bool is_int = false;
  std::vector<std::string> extents_cpp;
  TlRef tl;
};
struct Decl {  // a Score / Mask declaration as C++ (cpp_expr.h decl_expr)
  std::string name;
  bool is_mask = false;
  std::string body_cpp;                 // score: float over (score, q_idx, kv_idx); mask: bool over (q_idx, kv_idx)
  std::string empty_cpp, full_cpp;      // mask tile clauses over (q_lo, q_hi, kv_lo, kv_hi); "false" when absent
  std::string expr_tl;                  // the declaration's expression as TL prints it
  bool derived = false;                 // the clauses were derived by the front end
  TlRef tl;
};
// The kernel's mask (the `Compute Mask S ... with KIND` of the loop) in the one vocabulary of
// include/qattn/kinds.h: None, Bounds, Causal, CausalTopLeft or Window (a Named mask is in
// Scope::named_masks, never a MaskKind here). to_string: "none", "bounds", "causal", ...
using MaskKind = qattn::MaskKind;
using qattn::to_string;
struct Scope {
  std::vector<Name> grid;         // Grid variables, in axis order (m_block, head, b)
  std::vector<std::string> grid_extents_cpp;
  std::vector<Name> runtime_dims; // Dims bound at launch (value_cpp: the Params field)
  // The launch-time builtins the program reads (docs/tl.md): window_left, window_right, softcap, in
  // that order. The C ABI passes them (qattn_fwd_params); the kernel binds them under these names.
  std::vector<std::string> launch_args;
  std::vector<Name> fixed;        // fixed Dims and Consts (value_cpp: the number)
  std::vector<Name> lets;         // Lets, in order
  std::vector<TlRef> globals;     // the `Allocate X in global` of Q, K, V, O (and LSE): the C ABI's tensors
  std::vector<Aux> aux;
  std::vector<Decl> decls;
  MaskKind mask = MaskKind::None;         // the loop's `Compute Mask S ... with KIND`
  TlRef mask_tl;
  MaskKind kernel_mask = MaskKind::None;  // the Kernel statement's `with mask KIND` (what the ABI computes)
  std::string window_left_cpp, window_right_cpp;  // Window only
  int64_t window_left = -1, window_right = -1;    // Window: their values when constant (-1: not)
  std::vector<std::string> named_masks;           // `Compute Mask S ... with NAME`, in order
  std::vector<TlRef> named_masks_tl;
  std::string skip;                               // the loop's {skip: NAME} ("" = none)
  std::string skip_row_cpp, skip_col_cpp, skip_cols_cpp;  // its tile: at [row, col], key-tile width
  // A KV cache (docs/tl.md, "KV caches"): `Let seqlen_k = T[b]` narrows seqlen_k to kv_count_cpp
  // (T's element for the tile's batch entry, clamped to 0..p.seqlen_k; "" = no such Let), and
  // `{paged: T}` reads K and V through the block table `paged` (rows of page_size, "" = contiguous).
  std::string kv_lengths, kv_count_cpp, paged;
  TlRef kv_count_tl, paged_tl;
  // Ragged batches (docs/tl.md, "Ragged batches"): `Let seqlen_q = T[b + 1] - T[b]` narrows seqlen_q
  // to q_count_cpp (clamped to 0..p.seqlen_q; "" = no such Let; kv_count_cpp likewise for seqlen_k);
  // `{ragged: T}` starts the Q / O / LSE rows at q_start_cpp (T[b] clamped to 0..total_q) of the
  // packed tensors, K / V at kv_start_cpp ("" = not ragged).
  std::string q_lengths, q_count_cpp, q_ragged, q_start_cpp, kv_ragged, kv_start_cpp;
  TlRef q_count_tl, ragged_tl;
};

// ---- memory -----------------------------------------------------------------------------------
// A shared buffer (TL `Allocate X in shared (rows, cols) {stages: S}`): S slots of (rows, cols_padded)
// elements, stored as cols_padded / 64 column blocks of (rows, 64) with the 128-byte swizzle.
struct SharedBuf {
  std::string name, cpp;      // "K", "sK"
  int rows = 0, cols = 0, cols_padded = 0, stages = 1;
  tl::DType dtype = tl::DType::BF16;
  int64_t offset = 0, bytes = 0;  // from the 1024-aligned base; bytes of all slots
  bool ring = false;              // filled by {async} Copies: guarded by mbarriers
  int64_t barrier_offset = 0;     // ring: its 2 * stages mbarriers
  std::string alias_of;           // O staging in another buffer's space ("Q"), else ""
  std::string view_of;            // TL `{view: K}`: the first `cols` columns of K's slots, no storage of its own
  bool from_registers = false;    // filled by `Copy X from register to shared` (a split-columns P tile)
  TlRef tl;
};

// A register tensor of a consumer warpgroup (its 64 rows of the block's BM).
enum class RegKind {
  Tile,      // (64, cols) fp32 wgmma accumulator: float[cols / 2]
  Rows,      // a TL row vector (BM): float[2] (the thread's rows r and r + 8)
  OperandA,  // a converted tile as a register A operand: uint32_t[cols / 4]
};
struct Reg {
  std::string name, cpp;      // TL name, C++ name (tSrS, tOrO, rm, ...)
  RegKind kind = RegKind::Tile;
  int cols = 0;
  tl::DType dtype = tl::DType::F32;  // OperandA: the 16-bit type
  bool partial = false;       // Rows: per-thread shares of a row sum (quad_sum makes them whole)
  std::string init_cpp;       // a TL `init`, else ""
  bool allocated = false;     // declared by a TL register Allocate (else a Compute's `and get`)
  TlRef tl;                   // its Allocate or the statement that first writes it
};

// ---- the sm90 program ------------------------------------------------------------------------
// One operation of a consumer warpgroup, in program order. Each names the TL statement it lowers.
struct Op {
  enum class Kind {
    Stmt,         // `// TL n: ...`: the ops that follow lower this statement (a Copy {async}: none)
    RingWait,     // {wait: X}: ring X's current slot has landed
    RingRelease,  // {release: X} (or implicit: a buffer copied once per tile, after its last read)
    TurnWait,     // pingpong: this warpgroup's turn to issue GEMMs
    TurnPass,     //           and the other's
    GemmSS,       // c = a b^T (or +=): a = rows of a shared buffer, b = a ring slot; one commit group
    GemmRS,       // c += a b: a = an OperandA register tensor, b = a ring slot read MN-major
    GemmWait,     // at most `pending` GEMM groups in flight; regs = the registers now complete
    Scale,        // a pending factor of a tile applied: x *= scalar
    Mask,         // the kernel's mask and Mask declarations on a score tile at key tile coord
    Modify,       // x = score_NAME(x, q, k) on a score tile at key tile coord
    RowMax,       // result = rowmax(xscale * a) (accumulate: max with result)
    RowSum,       // result = rowsum(xscale * a) (accumulate: +=); partial: no quad reduction
    QuadSum,      // a partial row vector made whole, in place
    Ew,           // result = op(xscale * a, b), same shape
    EwRows,       // result = op(xscale * a, b) with b a row vector broadcast along rows
    EwScalar,     // result = op(xscale * a, scalar)
    Map,          // result = op(xscale * a)   (Exp, Exp2, Log, Log2)
    Rescale,      // a (tile or rows) *= b (rows)
    Normalize,    // a /= b per row (0 rows -> 0)
    Convert,      // result (OperandA) = convert(xscale * a)
    Copy,         // result = a (a fold: Max with -inf, Add to 0)
    Fill,         // a = scalar (a folded value made real)
    StoreO,       // a (tile) -> global O through shared `buffer` and TMA
    StoreRows,    // a (rows) -> global LSE
    // split columns (Roles::split_columns): the consumer warpgroups share every row
    RowCombine,   // a (rows) = op(a, the other warpgroups' a): exchanged through shared memory (op Max or Add)
    StoreShared,  // a (OperandA) -> its columns of the shared tile `buffer`, then a barrier of the warpgroups
  };
  Kind kind = Kind::Stmt;
  TlRef tl;
  std::string op;              // functor for Ew/EwRows/EwScalar/Map: Add Sub Mul Div Max Exp Exp2 Log Log2
  std::string a, b, result;    // register tensor names (TL), or a shared buffer for GemmSS's a
  std::string scalar_cpp;      // EwScalar, Scale
  std::string xscale_cpp;      // a pending positive factor of `a` applied on the way ("" = none)
  std::string buffer;          // RingWait/RingRelease/GEMM b: the ring; StoreO: the staging buffer
  std::string coord_cpp;       // Mask/Modify: the key tile index
  std::string head_cpp, batch_cpp;  // StoreO/StoreRows: the global view's offset
  bool accumulate = false;     // GEMM `and accumulate`; RowMax/RowSum `and accumulate`
  bool partial = false;        // RowSum: keep per-thread shares
  int group = -1;              // GEMM: its commit-group id (GemmWait: the newest group it waits for)
  int pending = 0;             // GemmWait
  std::vector<std::string> regs;  // GemmWait: registers to fence
  std::string atom;            // GEMM: the wgmma atom (CuTe type)
  int a_rows = 0, b_rows = 0, k_dim = 0;  // GemmSS: the A buffer's rows, the B slot's rows, K
  bool b_mn = false;           // GemmSS: B read MN-major (a view of a ring: O += P V with P staged in shared memory)
  bool barrier_first = false;  // StoreShared: the warpgroups meet first (another's GEMM may still read the tile: {overlap})
};

// The register tensors an op reads and writes (a GEMM writes its accumulator and reads its register
// A operand; an accumulating one reads its accumulator too).
void registers_of(const Op& op, std::set<std::string>& reads, std::set<std::string>& writes);

// A TMA load the producer issues (TL `Copy X (rows, cols) in coordinate [r, 0] from global to
// shared {async}`).
struct Load {
  TlRef tl;
  std::string buffer;             // the ring it fills
  std::string global;             // the global tensor (Q, K, V)
  int rows = 0, cols = 0;
  std::string row_cpp;            // first row: coordinate * rows
  std::string head_cpp, batch_cpp;  // the global view's offset (head or kv head, batch)
  bool packed = false;            // TL {pack}: through the 5-D map
  bool in_loop = false;
  bool late = false;              // once per tile, into a buffer the previous tile's epilogue still
                                  // uses (O staged in it): issued after the loop's first load
  bool stream = false;            // TL {stream}: under an L2 evict-first hint when the launch streams K / V
};

// The main loop over key tiles (TL `for j = lo: hi {overlap}`), software-pipelined in two stages
// when {overlap}: iteration j runs its stage-0 statements up to and including the first GEMM, then
// the stage-1 statements of iteration j - 1, then the rest of its stage 0. The consumer program is
// the unrolled schedule: `first` (stage 0 of the first iteration), `steady` (iterations 2..n),
// `drain` (stage 1 of the last iteration).
struct Loop {
  TlRef tl;
  std::string var, var_cpp;
  std::string lo_cpp, hi_cpp;     // bounds over the Scope's names (tiles outside are never loaded)
  bool overlap = false;
  std::vector<int> stage1_lines;  // TL lines of the stage-1 statements
  std::vector<Op> first, steady, drain;
};

struct Roles {
  int producer_wg = 1, producer_regs = 24, consumer_wg = 2, consumer_regs = 240;
  bool pingpong = true;
  // TL `split columns`: every consumer warpgroup holds all BM rows; warpgroup w computes key columns
  // [w BN / n, (w + 1) BN / n) of the score tile and columns [w d_v / n, ...) of O (n = consumer_wg)
  bool split_columns = false;
  int split() const { return split_columns ? consumer_wg : 1; }  // the warpgroups a row's columns are split over
  TlRef producer_tl, consumer_tl;  // the Role statements (line 0: the policy's defaults)
};

struct Launch {
  int threads = 0;
  int64_t smem_bytes = 0;          // dynamic shared memory, alignment slack included
  bool persistent = false;         // TL Grid {persistent}
  bool reverse_m = false;          // causal: the longest query rows first
  bool defer_store_wait = false;   // persistent with O in its own tile: wait for a store before the next
  bool split = false;              // split keys: the Grid's fourth axis `s = 0: splits`, folded into the batch axis
  TlRef grid_tl;
};

struct Sm90 {
  int bm = 0, bn = 0;
  bool pack = false;                  // TL {pack: heads_q / heads_kv}
  TlRef pack_tl;
  std::string mma_qk, mma_pv;         // the wgmma atoms (CuTe types)
  std::vector<Load> loads;            // producer: in program order (before the loop, then in it)
  std::vector<Reg> regs;              // consumer register tensors, declared per work tile
  struct Scalar {                     // a kernel-uniform float, computed by the host at launch into
    std::string cpp, value_cpp;       // Params::scalars[] (a pending factor of a tile: scale_S =
    TlRef tl;                         // p.softmax_scale * qattn::kLog2e); value_cpp over the ABI's p
  };
  std::vector<Scalar> scalars;
  std::vector<Op> before;             // consumer ops before the loop (hoisted waits)
  Loop loop;
  std::vector<Op> released_after_loop;  // implicit releases of buffers copied once per tile
  std::vector<Op> after;              // after the loop (Normalize, LSE, the stores)
  std::string lse_global;             // the global LSE tensor's name ("" = no LSE)
  int64_t exchange_offset = -1;       // split columns: the warpgroups' row exchange in shared memory
  // TL `Merge split ... end` (split keys merged in the kernel: qattn/sm90/merge.cuh): each consumer
  // warpgroup counts its rows' part after the stores; the one that counts the last part runs `code`
  // (the Merge body lowered onto row-distributed tiles of `rows` rows over its 4 warps, qattn/rowwise.cuh)
  struct Merge {
    bool on = false;
    TlRef tl;
    int rows = 0, cols = 0;            // the strip the body works on at a time (rows of the tile), d_v
    std::string code;                  // C++ lines, from the body's first statement (no Tiling declaration)
  } merge;
};

// ---- the mma.sync program (sm75 / sm80 / sm89) --------------------------------------------------
// All warps run every statement (no roles); each warp owns tile_m / warps rows of the block's
// tiles. The plan the emitter follows: where each GEMM reads its operands, and the cp.async
// pipeline of the two tiles the key loop streams (X = K, Y = V): X(j) is waited for before its
// first read, Y(j + 1) issued once X(j)'s last read is done, X(j + 1) once Y(j)'s is.
struct MmaGemm {
  TlRef tl;
  std::string a, b, c;          // TL names: c = a b (b^T when b_kmajor)
  enum class ASource { Streamed, Resident, Register } a_source = ASource::Streamed;
  // Streamed: fragments loaded from shared memory inside the GEMM; Resident: a register copy made
  // once before the loop; Register: a converted accumulator (a Reshape to MMA_A)
  bool b_kmajor = true;         // B stated transposed (K^T): ldmatrix; else the V^T view (fp8: the V^T buffer)
  bool accumulate = false;
  std::string descale_cpp;      // fp8: the product of the operands' descales ("" = none)
};
struct MmaStmt {                // one statement of the key loop, for the pipeline's verifier
  TlRef tl;
  std::string fills;            // a global -> shared Copy: the buffer it fills
  std::vector<std::string> reads;  // shared buffers it reads (GEMM operands, shared -> register Copies)
};
struct MmaPipeline {            // indices into Mma::loop
  bool pipelined = false;
  std::string why_not;          // not pipelined: why (each copy is waited for at its first read)
  std::string x, y;             // the streamed buffers (K, V)
  int x_copy = -1, y_copy = -1;  // their global -> shared Copies
  int x_first = -1, x_last = -1, y_first = -1;  // the first and last read of X, the first of Y
  // 1 stage: at X's first read: wait, barrier, issue Y(j); after X's last read: wait, barrier,
  //          issue X(j + 1).  S >= 2 stages: at X's first read: wait until 2S - 3 groups are in
  //          flight, barrier, issue X(j + S - 1), Y(j + S - 1); at Y's first read: wait until 2S - 2.
  TlRef prologue_after;         // the statement after which the prologue's copies go (line 0: before the loop)
};
struct Mma {
  std::string atom;             // the CuTe MMA atom
  std::string instr;            // its PTX, for the reader
  int tile_m = 0, warps = 0, stages = 1, tile_k = 0;
  bool cp_async = true;         // sm75: ld.global + st.shared instead
  std::vector<MmaGemm> gemms;   // in program order
  std::vector<MmaStmt> loop;    // the key loop's statements
  MmaPipeline pipeline;
  std::vector<std::string> resident_a;  // A operands copied to registers once
  std::string vt_buffer;        // fp8: the shared buffer whose transpose the P V GEMM reads ("" = none)
  int64_t epilogue_bytes = 0;   // O staged through shared memory (reuses the tiles)
};

// ---- the kernel -------------------------------------------------------------------------------
struct Kernel {
  std::string family;      // "wgmma" (sm90a: TMA + wgmma, warp-specialised) or "mma" (mma.sync)
  std::string arch;        // "sm90", "sm80", "sm75", "sm89"
  std::string target;      // the GPU the TL was translated for
  std::string tl_kernel, name;
  std::string tl_hash;     // of the printed TL program
  tl::DType elem = tl::DType::BF16, out = tl::DType::BF16;
  int d_qk = 0, d_v = 0;
  bool lse = false;
  std::vector<TlRef> header;         // Kernel, Dim, Const statements (constants)
  std::vector<std::pair<std::string, int64_t>> consts;  // the Consts, in order
  Scope scope;
  std::vector<SharedBuf> smem;       // in offset order
  Roles roles;
  Launch launch;
  Sm90 sm90;                         // family "wgmma"
  Mma mma;                           // family "mma"
  std::vector<std::string> nvcc_flags;
  int64_t smem_limit = 0, regs_per_sm = 65536;  // the target's, for the verifier
};

}  // namespace qattn::backend::kir
