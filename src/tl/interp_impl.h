// Internal state of the TL interpreter (not part of the public API): buffers, global tensors,
// scopes and the Machine that executes statements. Split over interp.cc (setup, grid, verdict),
// interp_exec.cc (Allocate, Copy, Let, for), interp_compute.cc (Compute), interp_variant.cc
// (Score / Mask declarations, skip), interp_schedule.cc (the Hopper schedule attributes),
// interp_view.cc (shared views) and interp_merge.cc (a split forward's Merge block).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "spec/reference.h"
#include "support/diag.h"
#include "tl/ast.h"
#include "tl/eval.h"
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tl/interp.h"
#include "tl/variant.h"

namespace qattn::tl::interp {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// splitmix64: the KV cache's and the ragged batches' draws, deterministic on every platform
inline uint64_t mix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// "(2, 128)": a shape in diagnostics
inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

bool is_kernel_arg(const std::string& n);  // Q, K, V, O, LSE, and a backward program's dO, dQ, dK, dV

// The ring of a shared buffer that `{async}` Copies fill (docs/tl.md, "Hopper schedule"): N slots
// (`{stages: N}`, else 1). The k-th async copy fills slot k mod N and leaves it pending; a wait
// makes the latest copy's slot current (reads see it: its values move into Buffer::data); a
// release gives the current slot back. Only the latest copy's values are kept while pending.
struct Ring {
  enum class St : uint8_t { Free, Pending, Held, Released };
  std::vector<St> slot;          // one per stage
  int64_t copies = 0;            // async copies so far; the next fills slot copies % stages
  int latest = -1;               // slot of the latest async copy
  int current = -1;              // slot that reads see: the latest waited for
  std::vector<double> pending;   // the latest copy's values until it is waited for
  SrcLoc copy_loc, release_loc;  // the latest async Copy and release, for messages
};

// Bytes counted against the run's memory budget (RunConfig::memory_budget) for as long as the
// object that holds it lives: added to *pool on construction and copy, taken off on destruction;
// a move hands the bytes over.
class Charge {
 public:
  Charge() = default;
  Charge(int64_t* pool, int64_t bytes) : pool_(pool), bytes_(bytes) {
    if (pool_) *pool_ += bytes_;
  }
  Charge(const Charge& o) : Charge(o.pool_, o.bytes_) {}
  Charge(Charge&& o) noexcept : pool_(o.pool_), bytes_(o.bytes_) { o.pool_ = nullptr; o.bytes_ = 0; }
  Charge& operator=(Charge o) noexcept {
    std::swap(pool_, o.pool_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~Charge() {
    if (pool_) *pool_ -= bytes_;
  }

 private:
  int64_t* pool_ = nullptr;
  int64_t bytes_ = 0;
};

// A shared or register buffer: a 1-D or 2-D array of values already rounded to dtype.
struct Buffer {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  std::vector<double> data;
  std::optional<Ring> ring;  // shared buffers with `{stages: N}` or filled by `{async}` Copies
  std::string view_of;       // `{view: K}`: the first columns of K's shared buffer, refreshed at every read
  Charge charge;             // data and ring->pending (Machine::recharge)
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

// One kernel argument (Q, K, V, O, LSE), all (batch, head) matrices.
struct Global {
  std::string name;
  DType dtype = DType::F32;
  bool output = false;
  bool accumulated = false;         // a backward output that `Copy ... and accumulate` adds to: zero at launch
  bool workspace = false;           // written by a Phase, read by the main program (poisoned at launch)
  int64_t heads = 1;                // heads_q or heads_kv
  int64_t parts = 0;                // `splits` for a view with the offset [b, s, head] (a combine program's O_part /
                                    // LSE_part, a split forward's O / LSE: data (batch, parts, heads, view)); else 0
  std::vector<int64_t> view;        // one (batch, head) matrix: (rows, cols) or (rows)
  int64_t pack = 1;                 // `{pack: G}`: a block's view interleaves G heads (docs/tl.md, GQA packing)
  std::vector<double> data;         // (batch, heads, view...)
  std::vector<uint8_t> written;     // outputs only
  SrcLoc loc;                       // its Allocate
  // `{paged: T}` (K, V of a KV cache): data is the page pool (num_pages, heads, page_size, cols);
  // row r of batch entry b is row r % page_size of page table[b * pages + r / page_size].
  int64_t page_size = 0, pages = 0;
  std::vector<int64_t> table;
  // `{ragged: T}` (packed ragged batches): data is (total, heads, cols) (LSE: (heads, total)); row r of
  // batch entry b is row T[b] + r. writer: the batch entry of the block that wrote each element. With
  // `parts` too (a split forward's ragged O / LSE, offset [b, split, head]) the parts one after another:
  // (parts, total, heads, cols) (LSE: (parts, heads, total)).
  std::string ragged;
  int64_t total = 0;
  std::vector<int32_t> writer;
  int64_t view_elems() const { return view.size() == 2 ? view[0] * view[1] : view[0]; }
  int64_t all_parts() const { return parts > 0 ? parts : 1; }
};

// The merge of one row: LSE = log sum_s exp(lse_s), O = sum_s exp(lse_s - LSE) O_s; every part
// empty: O = 0, LSE = -inf. `r` rounds each intermediate (identity in fp64, fp32 for the naive
// merge).
template <class Round>
void merge_row(const std::vector<const double*>& o, const std::vector<double>& lse, int64_t d, Round r, double* out,
               double& lse_out) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : lse) m = std::max(m, x);
  if (m == -std::numeric_limits<double>::infinity()) {
    for (int64_t c = 0; c < d; ++c) out[c] = 0;
    lse_out = -std::numeric_limits<double>::infinity();
    return;
  }
  double l = 0;
  std::vector<double> w(lse.size());
  for (size_t s = 0; s < lse.size(); ++s) l = r(l + (w[s] = r(std::exp(r(lse[s] - m)))));
  for (int64_t c = 0; c < d; ++c) {
    double acc = 0;
    for (size_t s = 0; s < lse.size(); ++s) acc = r(acc + r(w[s] * o[s][c]));
    out[c] = r(acc / l);
  }
  lse_out = r(m + r(std::log(l)));
}

// Split keys: O / LSE with `parts` > 0 merged into (batch, heads, view) Globals by their LSE, as the
// combine does, in fp64; an element is written when every part's is (and the parts' LSE rows).
void merge_parts(const Global& o, const Global& lse, int64_t batch, Global& mo, Global& mlse);

// The written elements of an output (got) with the reference's values there (want); returns how many
// elements were never written (the verdicts of interp.cc and interp_combine.cc).
std::string fmt(double x);  // 3 significant digits, scientific (the verdicts' numbers)
int64_t written_pairs(const Global& g, const std::vector<double>& ref, std::vector<double>& got, std::vector<double>& want);

// This block's view of a Global: the element offset of its (batch, head) matrix. A packed view
// (Global::pack = G > 1) has G * rows rows: row r is row r / G of head (first head + r % G).
// A KV cache's view (docs/tl.md, "KV caches"): `limit` rows (the sequence's key count, read by
// `Let seqlen_k = T[b]`; -1: all), pages of the Global looked up for (batch, head). A ragged view
// (docs/tl.md, "Ragged batches") starts at row `start` of the packed tensor; packed too, its `limit`
// is G times the sequence's query count and `head` the head group.
struct View {
  Global* g = nullptr;
  int64_t base = 0;
  int64_t limit = -1, batch = 0, head = 0;
  int64_t start = -1;  // a ragged view: its first row in the packed tensor (-1: not ragged)
  int64_t part = 0;    // a ragged view of split keys' parts: part `part` of (parts, total, heads, cols) / (parts, heads, total)
  int64_t rows() const { return limit >= 0 ? limit : g->view[0] * g->pack; }
  size_t at(int64_t r, int64_t col, int64_t cols) const {
    if (start >= 0) {  // ragged: row T[b] + r of head `head`; packed: query r / G of head head * G + r % G
      const int64_t q = start + r / g->pack, h = head * g->pack + r % g->pack;
      const int64_t p0 = part * g->total * g->heads * (g->view.size() == 1 ? 1 : cols);  // the part's first element
      return g->view.size() == 1 ? size_t(p0 + h * g->total + q) : size_t(p0 + (q * g->heads + h) * cols + col);
    }
    if (g->page_size > 0) {
      const int64_t page = g->table[size_t(batch * g->pages + r / g->page_size)];
      return size_t(((page * g->heads + head) * g->page_size + r % g->page_size) * cols + col);
    }
    if (g->pack == 1) return size_t(base + r * cols + col);
    return size_t(base + (r % g->pack) * g->view_elems() + (r / g->pack) * cols + col);
  }
};

constexpr int kShared = 0, kRegister = 1;

// The buffers of one tensor name.
struct Slot {
  std::optional<View> global;
  std::array<std::optional<Buffer>, 2> buf;  // kShared, kRegister
};

// Undo log of one loop-body iteration: names (re)bound in the body are restored at its end.
struct Frame {
  struct IntUndo { std::string name; std::optional<int64_t> old; };
  struct BufUndo { std::string name; int level; std::optional<Buffer> old; };
  std::vector<IntUndo> ints;
  std::vector<BufUndo> bufs;
  std::set<std::pair<std::string, int>> recorded;
};

class Machine {
 public:
  Machine(const RunConfig& cfg, support::DiagSink& diags) : cfg_(cfg), diags_(diags) {}
  bool setup(const Program& p);          // header, problem, global tensors, inputs
  bool run_grid(const Program& p);       // every grid point of each Phase (in order), then of the program
  RunResult verdict(const Program& p);   // compare with the reference

 private:
  // ---- interp.cc ----
  bool setup_header(const Program& p);
  bool setup_globals(const Program& p);
  bool setup_workspaces(const Program& p);  // the fp32 globals the Phases write (docs/tl.md, "Phases")
  // A global Allocate's shape at the header's values (each extent 1 .. 2^30; TL0901 names `what`).
  bool eval_view(const AllocateStmt& a, const std::string& what, std::vector<int64_t>& view);
  void make_inputs(const Program& p);
  bool in_phase_ = false;
  // ---- interp_exec.cc ----
  bool exec_block(const std::vector<Stmt>& body, bool top);
  bool exec_let(const Stmt& s);
  bool exec_allocate(const Stmt& s);
  bool exec_copy(const Stmt& s);
  bool copy_values(const Stmt& s, Buffer* into);  // the Copy's data movement; `into` replaces the shared destination
  bool exec_reshape(const Stmt& s);
  bool exec_for(const Stmt& s);
  void bind_int(const std::string& name, int64_t v);
  void bind_buffer(const std::string& name, int level, Buffer b);
  bool count(double work, SrcLoc loc);  // adds to the work budget; false (TL0902) when exceeded
  // The memory budget: true when `bytes` more fit beside what the run holds (live_bytes_), else
  // TL0906 at loc naming `what`; recharge() counts a buffer's current data (and pending copy).
  bool fits(double bytes, SrcLoc loc, const std::string& what);
  void recharge(Buffer& b);
  // ---- interp_compute.cc ----
  bool exec_compute(const Stmt& s);
  bool compute_gemm(const Stmt& s);
  bool compute_binary(const Stmt& s);
  bool compute_unary(const Stmt& s);
  bool compute_reduce(const Stmt& s);
  bool compute_rowwise(const Stmt& s);  // Rescale, Normalize
  bool compute_mask(const Stmt& s);
  // ---- interp_schedule.cc (the Hopper schedule: rings, async copies, wait, release) ----
  bool schedule_before(const Stmt& s);            // `{wait: X}`
  bool schedule_after(const Stmt& s);             // `{release: X}`
  bool async_copy(const Stmt& s);                 // `Copy ... from global to shared {async}`
  bool make_ring(const Stmt& s, Buffer& b);       // `Allocate X in shared ... {stages: N}`
  // TL0905 for a read of a pending / released slot; a view (`{view: K}`) is checked as a read of its
  // base and its values refreshed from the base (view_read).
  bool shared_read_ok(const std::string& name, const Buffer* b, SrcLoc loc);
  bool ring_read_ok(const std::string& name, const Buffer& b, SrcLoc loc, const std::string& via);
  // ---- interp_view.cc: shared views (docs/tl.md, "Allocate NAME in shared") ----
  bool v_view_of_k_ = false;                   // no global V; V in shared is `{view: K}`: V = K[:, :dv]
  bool setup_view_v(const Program& p);         // the global V the reference reads (K's first columns)
  void make_view_inputs();                     // ... filled from K's inputs (before paging / packing)
  bool make_view(const Stmt& s, const Attr& a, Buffer& b);  // `Allocate V in shared ... {view: K}`
  bool view_read(const std::string& name, Buffer& v, SrcLoc loc);
  // ---- interp_variant.cc ----
  bool setup_variants(const Program& p);
  std::optional<double> aux_read(const std::string& name, const int64_t* idx, size_t n) const;
  std::optional<double> aux_read(const std::string& name, std::initializer_list<int64_t> idx) const {
    return aux_read(name, idx.begin(), idx.size());
  }
  std::optional<double> eval_decl(const Expr& e, const Env& env, const VLocals& locals);
  std::optional<int> tile_class(const VariantStmt& m, int64_t q_lo, int64_t q_hi, int64_t kv_lo, int64_t kv_hi);
  Buffer* score_tile(const Stmt& s, int64_t& q0, int64_t& k0);
  bool compute_modify(const Stmt& s);
  bool compute_named_mask(const Stmt& s);
  bool compute_derivative(const Stmt& s);
  bool compute_gradient(const Stmt& s);
  bool gradient_tiles(const Stmt& s, double cost, Buffer*& x, Buffer*& y, int64_t& q0, int64_t& k0);
  void verdict_aux_grads(const Program& p, std::ostringstream& sum, std::string& why, bool& ok);
  bool skip_iteration(const Stmt& loop, bool& skip);
  spec::ScoreVariant declared_variant(const Program& p);
  // Stores `vals` (shape `shape`) as the result of s: in place into x, into a new register tensor
  // (and get), or added/maxed into an existing one (and accumulate, `acc` combines old and new).
  bool store_result(const Stmt& s, Buffer* x, const std::vector<int64_t>& shape, std::vector<double> vals,
                    double (*acc)(double, double));
  // ---- helpers ----
  Buffer* tensor(const std::string& name);            // register, else shared; nullptr if none
  Buffer* operand_tensor(const Operand& o, const Stmt& s, const char* what);  // reports TL0901
  bool is_tensor(const Operand& o);
  std::optional<int64_t> ev_int(const Expr& e);
  std::optional<double> ev_scalar(const Expr& e);
  double rnd(DType t, double x) const;
  bool error(const char* code, SrcLoc loc, std::string msg, std::string hint = {});

  const RunConfig& cfg_;
  support::DiagSink& diags_;
  int64_t live_bytes_ = 0;    // bytes of every Charge alive (declared before what holds them)
  Charge globals_charge_;     // the global tensors and the reference's copies of the outputs
  std::vector<Charge> aux_charges_;  // auxiliary global tensors
  Env env_;                   // header names + this block's grid, let and loop variables
  Env header_env_;            // dims and consts only
  spec::AttentionProblem prob_;
  struct GridVar { std::string name; int64_t extent; };
  std::vector<GridVar> grid_;
  bool run_blocks(const std::vector<Stmt>& body, const std::vector<GridVar>& grid);
  bool eval_grid(const std::vector<Stmt>& stmts, std::vector<GridVar>& grid);
  std::map<std::string, Global> globals_;
  int64_t pack_ = 1;          // GQA packing of Q's view: a score row r is query r / pack_
  std::map<std::string, Slot> slots_;
  std::vector<Frame> frames_;
  double work_ = 0;
  int64_t blocks_ = 0;
  SrcLoc kernel_loc_;
  spec::AuxMap aux_;                                      // auxiliary global tensors
  std::map<std::string, std::vector<double>> aux_grads_;  // dT of an fp32 auxiliary input T (`Compute Gradient`), T's shape
  std::map<std::string, std::vector<double>> aux_grad_abs_;  // sum |contribution| per entry (the storage bound)
  std::map<std::string, const VariantStmt*> variants_;    // Score / Mask declarations
  std::vector<const VariantStmt*> decls_;                 // in program order
  std::map<std::string, Expr> derivatives_;               // Score name -> d / d score (derive_score)
  std::map<std::pair<int64_t, int64_t>, Env> ref_envs_;   // reference: names per (batch, head)
  // reference: each declaration with the names of a (batch, head) bound (bind_names), per declaration
  std::map<std::tuple<const VariantStmt*, int64_t, int64_t>, Expr> ref_exprs_;
  std::shared_ptr<bool> ref_failed_ = std::make_shared<bool>(false);
  std::string kernel_name_ = "kernel";
  bool backward_ = false;     // `Kernel NAME backward`: the gradients dQ, dK, dV (docs/tl.md, "The backward pass")
  RunResult verdict_backward(const Program& p);
  // ---- interp_kvcache.cc: a KV cache (docs/tl.md, "KV caches") ----
  std::string kv_lengths_, kv_table_;  // the tensors `Let seqlen_k = T[b]` and `{paged: T}` read
  std::vector<int64_t> kv_len_;        // each batch entry's key count
  std::vector<double> ref_k_, ref_v_;  // the reference's K and V (BHSD; zero past each key count)
  bool setup_kv_cache(const Program& p);  // contents of the lengths and the block table (after setup_variants)
  void make_kv_inputs();                  // K, V into their pages; NaN wherever no key is
  bool kv_view(const Stmt& s, View& v);   // a K / V view's key count and pages for this block
  std::optional<int64_t> kv_length_let(const Stmt& s);  // `Let seqlen_k = T[b]` / `T[b + 1] - T[b]` (or seqlen_q)
  int64_t block_seqlen_k() const;         // seqlen_k as this block sees it
  int64_t block_seqlen_q() const;         // seqlen_q as this block sees it
  // ---- interp_varlen.cc: packed ragged batches (docs/tl.md, "Ragged batches") ----
  bool ragged_ = false;
  std::string q_cu_, k_cu_;             // the cumulative counts `{ragged: T}` names (Q side, K side)
  std::vector<int64_t> q_len_;          // each batch entry's query count (ragged Q)
  std::vector<double> ref_q_;           // the reference's Q (BHSD)
  bool setup_ragged(const Program& p);  // draw the counts, fill the cumulative tables
  void make_ragged_inputs();            // Q, K, V packed (NaN past the last sequence); O, LSE packed and poisoned
  bool ragged_view(const Stmt& s, View& v, int64_t b, int64_t h);
  // A ragged output's written elements of each sequence with the reference's values (BHSD); counts the
  // unwritten ones and those written outside their sequence (a row of another sequence, or past all).
  int64_t ragged_pairs(const Global& g, const std::vector<double>& ref, std::vector<double>& got, std::vector<double>& want,
                       int64_t& stray) const;
  // Split keys over ragged queries: the parts of O / LSE merged by their LSE in fp64 into ragged
  // (total, heads, d) / (heads, total) Globals for ragged_pairs. A merged element is written when every
  // part's is, and its writer is its sequence when every part's writer is (else -2: ragged_pairs counts
  // it as stray); returns the elements of any part written past the last sequence.
  int64_t merge_ragged_parts(const Global& o, const Global& lse, Global& mo, Global& mlse) const;
  // The reference's problem and variant: each sequence's keys and mask alignment folded into keep.
  spec::AttentionProblem ref_problem() const;
  spec::ScoreVariant ref_variant(spec::ScoreVariant base) const;
  const std::vector<double>& ref_k() { return kv_lengths_.empty() && kv_table_.empty() && !ragged_ ? globals_["K"].data : ref_k_; }
  const std::vector<double>& ref_v() { return kv_lengths_.empty() && kv_table_.empty() && !ragged_ ? globals_["V"].data : ref_v_; }
  const std::vector<double>& ref_q() { return ragged_ ? ref_q_ : globals_["Q"].data; }
  // ---- interp_combine.cc: `Kernel NAME combine` (docs/tl.md, "Combining partial results") ----
  bool combine_ = false;
  int64_t splits_ = 1;
  bool setup_globals_combine(const Program& p);
  void make_inputs_combine();
  RunResult verdict_combine();
  // ---- interp_merge.cc: a split forward's `Merge AXIS ... end` (docs/tl.md, "Merging the parts in the kernel") ----
  const Stmt* merge_ = nullptr;  // the program's Merge (its last statement)
  bool in_merge_ = false;        // running the Merge's body
  int64_t merge_blocks_ = 0;     // merge blocks run (one per tile of the other Grid axes)
  bool setup_merge_globals();    // the merged O and LSE, beside the parts
  bool run_merge(const Program& p);  // the body once per tile, after the grid; O / LSE become O_part / LSE_part
  // The end of an O / LSE verdict: passed, and else TL0801 naming what differs from what (o_ref,
  // lse_ref), with the hint for unwritten outputs or for wrong values.
  void finish_verdict(RunResult& r, bool ok_o, bool ok_lse, const char* o_ref, const char* lse_ref,
                      const std::string& hint_unwritten, const std::string& hint_wrong);
};

}  // namespace qattn::tl::interp
