// Internals of the TL checker shared by checker.cc (driver, scopes, names, data flow, loops, header
// statements, whole-program facts), checker_memory.cc (Allocate, Copy), checker_shapes.cc (Compute:
// GEMM / element-wise / reductions / Mask, Reshape, layouts), checker_ranges.cc (abstract execution
// over sample dims: TL0601-TL0604), checker_variants.cc (Score / Mask, skip), checker_schedule.cc
// (the Hopper schedule: Role, stages / async / wait / release / overlap: TL0702-TL0716) and
// checker_views.cc (shared views: TL0421, TL0422), checker_merge.cc (a split forward's Merge: TL0423,
// TL0424) and checker_util.cc (formatting, Reporter).
// Not part of the public API; see checker.h.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "support/diag.h"
#include "tl/ast.h"
#include "tl/checker.h"
#include "tl/eval.h"

namespace qattn::tl::detail {

std::string fmt_expr(const Expr& e);
std::string fmt_shape(const std::vector<Expr>& s);  // "(BM, d)"
bool same_shape(const std::vector<Expr>& a, const std::vector<Expr>& b);
const char* layout_name(Layout l);  // "MMA_C", "MMA_A", "operand", "unknown"
bool is_builtin_scalar(const std::string& n);  // softmax_scale, softcap, log2e, ln2, inf
size_t edit_distance(const std::string& a, const std::string& b);
std::string line_of(SrcLoc l);
std::string example_global(const std::string& name);  // "Allocate K in global (seqlen_k, d) ..."
int space_index(Space s);           // 0 global, 1 shared, 2 register
SrcLoc pick(SrcLoc a, SrcLoc b);    // a when it has a line, else b

// Forwards errors to a DiagSink, reporting each (code, line, col) once: loop bodies may be walked
// twice and the range analysis runs the same statement many times.
class Reporter {
 public:
  explicit Reporter(support::DiagSink& d) : d_(d) {}
  // Structural errors are deduplicated by (code, location, message); with by_location (the range
  // pass, whose messages name the sample) by (code, location) only.
  void error(const std::string& code, SrcLoc loc, const std::string& msg, const std::string& hint,
             bool by_location = false);
  int errors() const { return count_; }

 private:
  support::DiagSink& d_;
  std::set<std::tuple<std::string, int, int, std::string>> seen_;
  int count_ = 0;
};

enum class SymKind { Dim, Const, Grid, Let, LoopVar, Tensor };
enum class VType_ { Num, Bool, Bad };  // declaration expressions (checker_variants.cc)
const char* sym_kind_name(SymKind k);

// Which names an integer expression may use.
enum class Ctx {
  Static,  // Dims and Consts only (shapes, Const/Dim values, Grid extents, Role sizes)
  Window,  // Static plus the launch builtins window_left / window_right (a mask's window bounds)
  Index,   // any integer name (coordinates, offsets, loop bounds, Let values, Mask at)
  Scalar,  // integer names, numbers and builtin scalars (Compute scalar operands, init)
};

struct Buffer {
  bool exists = false;
  std::vector<Expr> shape;
  std::optional<DType> dtype;  // nullopt: not written in the program (documented defaults apply)
  SrcLoc decl;
  int frame = 0;                 // scope frame that owns it
  int loop_depth = 0;            // loop nesting depth at its declaration
  bool by_allocate = false;      // Allocate (vs `and get`)
  bool defined = false;          // must-be-written (init, Copy, get, ...)
  bool written_since_decl = false;  // fully written after its Allocate (init does not count)
  bool carried_reported = false;    // TL0304 already reported for this declaration
  bool undef_reported = false;      // TL0305 already reported (once per buffer)
  Layout layout = Layout::Unknown;
  std::string loop_header;       // "for j = 0: cdiv(seqlen_k, BN)" enclosing the declaration
  std::string decl_text;         // the Allocate as written, for hints
  std::string view_of;           // shared: `{view: B}`, the first columns of B's shared buffer (reads read B)
  long version = 0;              // register: the latest write (Walker::write_seq_)
  long staged = -1;              // shared: the register version a whole-buffer `Copy X from register to shared` holds
};

struct TensorState {
  Buffer lv[3];  // indexed by space_index
  bool any() const { return lv[0].exists || lv[1].exists || lv[2].exists; }
};

struct Symbol {
  SymKind kind = SymKind::Dim;
  SrcLoc decl;
  int frame = 0;
};

// A name whose scope ended (declared inside a loop body); used for better TL0301 hints.
struct Gone {
  SrcLoc decl;
  std::string loop_header;
  bool carried_reported = false;
  int level = -1;  // buffer level (space_index) for tensors; -1 for other names
};

struct LoopCtx {
  std::string header;             // "for j = LO: HI"
  std::string var;
  std::set<std::string> written;     // register tensors fully written so far in this iteration
  std::set<std::string> read_first;  // register tensors read before written in this iteration
};

class Walker {
 public:
  Walker(const Program& p, Reporter& r, CheckInfo& info) : prog_(p), rep_(r), info_(info) {}
  // A Phase's walker: the program is the main one's header plus the phase's body; `workspaces` are
  // the data flow of the workspaces earlier phases wrote (docs/tl.md, "Phases").
  void set_phase(const std::string& name) { phase_ = true, info_.phase_name = name; }
  void run();
  std::set<const Stmt*> poisoned;  // statements with structural errors; the range pass skips them

  // ---- checker.cc, checker_memory.cc ----
 private:
  void walk_body(const std::vector<Stmt>& body);
  void stmt(const Stmt& s);
  void kernel_stmt(const Stmt& s);
  void dim_stmt(const Stmt& s);
  void const_stmt(const Stmt& s);
  void grid_stmt(const Stmt& s);
  void let_stmt(const Stmt& s);
  void allocate_stmt(const Stmt& s);
  void copy_stmt(const Stmt& s);
  void for_stmt(const Stmt& s);
  void attrs(const Stmt& s);
  void finish();

  void error(const Stmt& s, const std::string& code, SrcLoc loc, const std::string& msg,
             const std::string& hint);
  bool check_expr(const Expr& e, Ctx ctx, const Stmt& s, int depth = 0);
  bool declare_name(const std::string& name, SymKind kind, SrcLoc loc, const Stmt& s);
  void push_frame();
  void pop_frame();
  std::string suggest(const std::string& name) const;
  void report_undeclared(const std::string& name, SrcLoc loc, const Stmt& s, const std::string& what,
                         const std::string& hint_override = {});
  // A missing buffer of an existing tensor whose buffer at that level went out of scope (declared in
  // a loop body): reports TL0301 (or nothing when TL0304 already covers it). True when handled.
  bool explain_gone_buffer(const std::string& name, Space sp, SrcLoc at, const Stmt& s);

 public:  // used by the shape checks
  TensorState* tensor(const std::string& name);
  Buffer* buffer(const std::string& name, Space sp);
  // Data flow: a read of (name, space) at this statement; reports TL0305 / TL0304.
  void read(const std::string& name, Space sp, SrcLoc at, const Stmt& s);
  void write_full(const std::string& name, Space sp);
  Buffer& declare_buffer(const std::string& name, Space sp, SrcLoc loc, bool by_allocate);

  // ---- checker_variants.cc ----
  void variant_stmt(const Stmt& s);
  bool check_named(const Stmt& s, bool modify);
  void modify(const Stmt& s);
  void check_skip(const Stmt& s, const Attr& a);
  void check_pack(const Stmt& s, const Attr& a);  // `{pack: G}` on a global Q / O / LSE (checker_memory.cc)
  void finish_pack();
  void finish_split();  // forward O / LSE at [batch, split, head] (checker_memory.cc)
  void phase_stmt(const Stmt& s);  // `Phase NAME ... end` (TL0419): checked by a walker of its own
  // ---- checker_merge.cc: `Merge AXIS ... end` (TL0423, TL0424) ----
  void merge_stmt(const Stmt& s);   // placement: a forward program's last statement, once
  void merge_attrs(const Stmt& s);  // `{rows: R}`, the only attribute of the Merge line
  void finish_merge();              // the axis, then the body, checked by a walker of its own
  void merge_alloc(const Stmt& s);  // (the body's walker) a global O / LSE / O_part / LSE_part against the main ones
  // "a combine program", or "the Merge block" when this walker checks a Merge's body (messages)
  const char* combine_name() const { return merge_body_ ? "the Merge block" : "a combine program"; }
  bool workspace_alloc(const Stmt& s);  // a phase's / the main program's global Allocate of a workspace
  // ---- checker_kvcache.cc: a KV cache's per-sequence key counts and pages (TL0416) ----
  bool kv_length_let(const Stmt& s);  // `Let seqlen_k = T[b]`; true when the Let is one (checked here)
  void check_paged(const Stmt& s, const Attr& a);  // `{paged: T}` on the global K / V
  void check_ragged(const Stmt& s, const Attr& a);  // `{ragged: T}` on a global Q / K / V / O / LSE (varlen)
  bool grid_var_over(const Expr& e, const char* dim) const;  // a Grid variable whose extent is the Dim `dim`
  void finish_ragged();
  void finish_kv_cache();
  bool is_aux(const std::string& name) const;
  // A kernel input (defined at launch, never stored): Q, K, V and the auxiliary inputs; a backward
  // program's O, dO and LSE too; a combine program's O_part and LSE_part.
  bool is_input(const std::string& name) const;
  VType_ vexpr(const Expr& e, const Stmt& s, const std::vector<std::string>& locals, int depth);

  // ---- checker_views.cc: `Allocate V in shared (...) {view: K}` (TL0421, TL0422) ----
  void check_view(const Stmt& s, const Attr& a, Buffer& b);
  bool copy_into_view(const Stmt& s);  // TL0422; true when reported
  bool v_is_view_of_k() const;         // a forward program without a global V whose shared V is a view of K

  // ---- checker_schedule.cc ----
  void role_stmt(const Stmt& s);  // names in the Role's expressions (the rest: check_schedule)

  // ---- checker_shapes.cc ----
  void compute_stmt(const Stmt& s);
  void reshape_stmt(const Stmt& s);

 private:
  struct Opnd;  // a resolved Compute operand (checker_shapes.cc)
  bool resolve_tensor_operand(const Operand& o, const Stmt& s, bool gemm, Opnd& out);
  bool resolve_operand(const Operand& o, const Stmt& s, Opnd& out);
  void gemm(const Stmt& s);
  void elementwise(const Stmt& s);
  void unary(const Stmt& s);
  void reduce(const Stmt& s);
  void rowop(const Stmt& s);
  void mask(const Stmt& s);
  void derivative(const Stmt& s);
  void gradient(const Stmt& s);
  void put_result(const Stmt& s, const std::vector<Expr>& shape, Layout layout, const char* code,
                  std::optional<DType> default_dtype);

  const Program& prog_;
  Reporter& rep_;
  CheckInfo& info_;
  std::map<std::string, Symbol> syms_;
  std::map<std::string, TensorState> tensors_;
  std::map<std::string, Gone> gone_;
  struct Frame {
    std::vector<std::string> names;                   // non-tensor symbols
    std::vector<std::pair<std::string, int>> bufs;    // tensor buffers (name, level)
  };
  std::vector<Frame> frames_;
  std::vector<LoopCtx> loops_;
  const Stmt* kernel_ = nullptr;
  bool backward() const { return kernel_ && kernel_->kernel.backward; }  // `Kernel NAME backward`
  bool combine() const { return kernel_ && kernel_->kernel.combine; }    // `Kernel NAME combine`
  std::set<std::string> accumulated_to_global_;  // `Copy X ... to global and accumulate`
  std::set<std::string> plain_to_global_;        // other Copies to global
  // A backward program's data flow: which global inputs each tensor's value derives from (bits of
  // kGradInputs, checker_memory.cc), checked where dQ, dK, dV are stored (TL0413).
  std::map<std::string, unsigned> deps_;
  std::set<std::string> derived_;                // Scores a `Compute Derivative` differentiates
  std::set<std::string> derived_here_;           // ... earlier in this walk of the innermost loop body
  std::set<std::string> modified_;               // Scores a `Compute Modify` applies
  std::vector<std::string> modify_order_;        // ... in the order of their first Modify
  std::set<std::string> grads_accumulated_;      // gradients of auxiliary inputs a `Compute Gradient` adds to
  bool aux_grad_alloc(const Stmt& s);  // a backward program's global Allocate of dT for an auxiliary input T
  void flow_compute(const Stmt& s);
  void check_gradient_flow(const Stmt& s);
  std::string missing_grad_inputs(const std::string& tensor);  // the inputs of dS a tensor does not derive from
  bool seen_non_header_ = false;
  std::map<std::string, SrcLoc> global_alloc_;  // first global Allocate per name
  std::set<std::string> stored_to_global_;
  std::vector<const Stmt*> masks_;               // Compute Mask statements
  std::map<std::string, const Attr*> pack_;      // `{pack: G}` per global view that carries one
  std::map<std::string, const Attr*> paged_;     // `{paged: T}` per global K / V that carries one
  std::map<std::string, const Attr*> ragged_;    // `{ragged: T}` per global view that carries one
  bool ragged_refused_ = false;                   // a `{ragged}` was refused (TL0416): no follow-up errors
  std::set<std::string> split_outputs_;          // forward O / LSE written at [batch, split, head]
  int walks_ = 0;                                // loop-body walks (bounded)
  long write_seq_ = 0;                           // register writes so far (Buffer::version, staged GEMM A operands)
  bool split_columns_ = false;                   // `Role consumer ... split columns`: P is staged in shared memory
  bool phase_ = false;                           // this walker checks a Phase's body
  // Merge: the main program's Merge statement (its body is checked in finish) and its `{rows: R}`;
  // in the body's walker (merge_body_): the split axis and the Lets that read it (not visible there),
  // and the main program's global O and LSE Allocates the body's views are compared with.
  const Stmt* merge_ = nullptr;
  int merge_rows_ = 0;
  bool merge_body_ = false;
  std::string merge_axis_;
  std::set<std::string> merge_hidden_;
  const Stmt* main_out_[2] = {nullptr, nullptr};  // O, LSE
  void run_merge(const std::vector<Stmt>& body, const Walker& outer);  // (the body's walker) see finish_merge
  std::vector<const Stmt*> header_;              // the Kernel, Dim and Const statements (a phase's header)
  std::map<std::string, const Stmt*> workspace_decl_;  // the global Allocate of each workspace a phase wrote
};

// ---- checker_schedule.cc ----
// The Hopper schedule (TL0702-TL0716): Role statements (placement, values, register budget),
// placement of the schedule attributes, and the async-copy protocol along every path (wait before
// read, no read after release, release in the loop that copies, no overwrite of a held 1-stage
// buffer). Fills info.schedule. Role statements in `poisoned` get no value checks.
bool is_schedule_attr(const std::string& key);  // stages, async, wait, release, overlap
void check_schedule(const Program& p, const std::set<const Stmt*>& poisoned, Reporter& rep, CheckInfo& info);

// ---- checker_ranges.cc ----
void check_ranges(const Program& p, const CheckOptions& opts, const std::set<const Stmt*>& poisoned,
                  Reporter& rep);

}  // namespace qattn::tl::detail
