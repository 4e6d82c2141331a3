// Internals of stage 2 (not part of the public API; see translate.h).
//   analyze.cc      the pre-pass: header facts, tensor roles, GEMM operand sources, the K/V
//                   pipeline schedule, shared-memory plan; every unsupported form -> XL diagnostic
//   emit_kernel.cc  the kernel body, statement by statement (`// TL n:` blocks)
//   emit_ops.cc     the Compute / Reshape lowerings (element-wise, rows, GEMM, Mask, epilogue)
//   emit_host.cc    the preamble (types, tile constants, architecture choices) and the C ABI
//   describe.cc     the kernel IR (kir.h) of a lowering: the facts every family shares (header,
//                   work-tile names, mask program) and the mma.sync kernel's plan (shared memory,
//                   GEMMs, the cp.async pipeline), printed, verified, and read by the emitter
// A Hopper program in the wgmma form takes analyze_front() here, then the sm90 lowering
// (sm90/lower.h) to the kernel IR.
//   expr.cc         TL expressions -> C++ expressions
#pragma once
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/arch.h"
#include "backend/cpp_expr.h"
#include "backend/kir.h"
#include "backend/translate.h"
#include "tl/checker.h"

namespace qattn::backend::sm90 {
class Lower;
}

namespace qattn::backend::detail {

// Indented C++ text.
class Writer {
 public:
  void line(const std::string& s = {}) {
    if (s.empty()) {
      out_ << "\n";
      return;
    }
    out_ << std::string(indent_ * 2, ' ') << s << "\n";
  }
  void open(const std::string& s) { line(s); ++indent_; }
  void close(const std::string& s = "}") { --indent_; line(s); }
  std::string str() const { return out_.str(); }
  int indent() const { return indent_; }

 private:
  std::ostringstream out_;
  int indent_ = 0;
};

// How a register tensor lives in the kernel.
enum class RegKind {
  None,      // not (yet) materialised
  Tile,      // 2-D tile in the accumulator layout of the tiled MMA: (MMA, MMA_M, MMA_N)
  Rows,      // 1-D row vector: one value per tile row this thread owns
  OperandA,  // A-operand fragment (MMA, MMA_M, MMA_K): a Reshape result or a resident copy
  Streamed,  // GEMM operand whose fragments are loaded from shared memory inside the GEMM
};

struct RegTensor {
  RegKind kind = RegKind::None;
  std::string var;      // C++ name
  std::string family;   // accumulator family letter(s) for naming: "S", "O"
  tl::DType dtype = tl::DType::F32;
  int rows = 0, cols = 0;
  std::string cols_expr;      // C++ constant expression of the column extent
  std::string pending_scale;  // a positive factor not yet multiplied in ("" = none)
};

// How a GEMM reads its operands.
struct GemmPlan {
  enum class A { Streamed, Resident, Register } a = A::Streamed;
  std::string a_name, b_name, c_name;
  bool b_kmajor = true;   // B^T written (K stored (N, K)): ldmatrix; else V^T view / fp8 transpose
  bool accumulate = false;
  std::string descale;    // fp8: product of the operands' descales ("" = none)
};

// The K/V pipeline of the main loop (see docs/translation.md, "Overlap").
struct Schedule {
  bool pipelined = false;
  std::string why_not;           // when not pipelined: the reason, printed in the kernel
  std::string x, y;              // first and second streamed tensor (K, V)
  size_t x_copy = 0, y_copy = 0; // body indices of their global->shared Copy
  size_t a_pos = 0;              // before body[a_pos]: wait for X(j), barrier, issue
  size_t b_pos = 0;              // after body[b_pos] (1 stage) / before it (>= 2 stages)
  long prologue_after = -1;      // top-level index after which the prologue is emitted
};

// An auxiliary global tensor (Score/Mask input): its ABI slot and C++ extents.
struct AuxInfo {
  int slot = 0;
  bool is_int = false;
  std::vector<std::string> extents;
};

// `{skip: NAME}`: the key-tile test's tile (the Mask's [row, col] and the key tile's width), as C++.
struct SkipTile {
  std::string row, col, cols;
};

// The C ABI's opening of a generated .cu (every family): closes the kernel's namespace, opens
// extern "C", qattn_last_error and qattn_kernel_info (returning `info_json`); qattn_fwd follows.
void write_abi_exports(Writer& w, const std::string& info_json);
// The launch-time builtins a kernel reads (kir::Scope::launch_args): host checks and bindings under
// their TL names (write_launch_args, in qattn_fwd after `p`), or the bindings alone (a kernel body
// that receives qattn_fwd_params as `p`; resolved: qattn_fwd passed the window with an unbounded side
// already replaced, so the kernel reads the parameter as is).
void write_launch_args(Writer& w, const std::vector<std::string>& args);
void write_launch_bindings(Writer& w, const std::vector<std::string>& args, bool resolved);

// A TL statement as the kernel IR names it: its line and its one-line printed form.
kir::TlRef tl_ref(const tl::Stmt& s);
kir::MaskKind mask_kind(tl::MaskSpec::Kind k);  // k itself, except Named (a declaration): None

struct SharedBuf {
  std::string name;
  int rows = 0, cols = 0;
  std::string rows_expr, cols_expr;
  tl::DType dtype = tl::DType::F16;
  bool staged = false;   // STAGES buffers (pipelined copies)
  bool vt = false;       // fp8 V^T buffer (cols x rows)
  int64_t bytes = 0;
};

class Lowering {
 public:
  Lowering(const tl::Program& p, const tl::CheckInfo& info, const plan::Target& t, support::DiagSink& d)
      : prog_(p), info_(info), target_(t), diags_(d) {}
  bool analyze_front();      // analyze.cc: header + tensors (every family); then wgmma() picks the lowering
  bool wgmma() const { return wgmma_; }
  bool analyze_mma();        // analyze.cc: the rest of the mma.sync analysis
  // describe.cc: the kernel IR. describe() after analyze_mma: the whole mma.sync kernel plan;
  // describe_header / describe_scope: the parts every family shares (the sm90 lowering uses them).
  kir::Kernel describe() const;
  void describe_header(kir::Kernel& k) const;
  void describe_scope(kir::Kernel& k, CppNames& names) const;
  std::vector<std::string> launch_args() const;  // the launch builtins the program reads (kir::Scope)
  // The `{skip: NAME}` tile of the loop, or nullopt when the loop has no such Mask / GEMM pair.
  std::optional<SkipTile> skip_tile(const tl::Stmt& loop, const std::string& name, const CppNames& names) const;
  Translation emit(const kir::Kernel& k);  // emit_host.cc (drives emit_kernel.cc); k = describe()

 private:
  friend struct ExprPrinter;
  friend class sm90::Lower;  // reads the header facts of analyze_front()
  // ---- analyze.cc
  bool analyze_header();
  bool analyze_tensors();
  bool analyze_gemms();
  bool analyze_statements(const std::vector<tl::Stmt>& body, int depth);
  bool analyze_skip(const tl::Stmt& loop, const std::string& name);
  void analyze_schedule();
  bool analyze_smem();
  std::optional<int64_t> eval(const tl::Expr& e, support::SrcLoc where, const std::string& what);
  bool is_positive_scalar(const tl::Expr& e) const;
  void collect_names(const tl::Expr& e, std::set<std::string>& out) const;

  // ---- expr.cc (wrappers of cpp_expr.h)
  CppNames names() const;
  std::string cpp_int(const tl::Expr& e) const;
  std::string cpp_float(const tl::Expr& e) const;
  std::string ident(const std::string& tl_name) const;  // TL scalar name -> C++ identifier

  // ---- emit_kernel.cc
  void emit_kernel(Writer& w);
  void emit_stmt(Writer& w, const tl::Stmt& s, bool in_loop, size_t index);
  void emit_loop(Writer& w, const tl::Stmt& s);
  void emit_allocate(Writer& w, const tl::Stmt& s);
  void emit_copy(Writer& w, const tl::Stmt& s, bool in_loop, size_t index);
  void emit_prologue(Writer& w);
  void emit_wait_for(Writer& w, const std::string& tensor);
  void ensure_ready(Writer& w, const std::string& tensor);
  std::string g2s_call(const std::string& tensor, const std::string& tile_row, const std::string& stage) const;
  std::string stage_view(const std::string& tensor, const std::string& stage) const;
  void comment_stmt(Writer& w, const tl::Stmt& s, const std::string& note = {});

  // ---- emit_ops.cc
  void emit_compute(Writer& w, const tl::Stmt& s);
  void emit_gemm(Writer& w, const tl::Stmt& s);
  void emit_reshape(Writer& w, const tl::Stmt& s);
  void emit_mask(Writer& w, const tl::Stmt& s);
  void emit_store(Writer& w, const tl::Stmt& s);
  void materialize(Writer& w, RegTensor& t);
  RegTensor& target_of(Writer& w, const tl::ComputeStmt& c, const RegTensor& like, tl::DType dt);
  std::string operand_name(const tl::Operand& o) const;
  RegTensor* reg(const std::string& name);

  // ---- emit_variant.cc
  std::string cpp_decl(const tl::Expr& e, DeclType& t) const;
  void emit_aux(Writer& w, const tl::Stmt& s);
  void emit_declaration(Writer& w, const tl::Stmt& s);
  void emit_modify(Writer& w, const tl::Stmt& s);
  void emit_named_mask(Writer& w, const tl::Stmt& s);
  std::string emit_skip_lambda(Writer& w);

  // ---- emit_host.cc
  void emit_tl_header(Writer& w);
  void emit_preamble(Writer& w, const kir::Kernel& k);
  void emit_abi(Writer& w, const std::string& info_json);

  // inputs
  const tl::Program& prog_;
  const tl::CheckInfo& info_;
  // seqlen_k as the block sees it: a KV cache's sequence count (`Let seqlen_k = T[b]`), else the ABI's
  std::string seqlen_k_cpp() const { return info_.kv_lengths.empty() ? "p.seqlen_k" : "seqlen_k"; }
  std::string seqlen_q_cpp() const { return info_.q_lengths.empty() ? "p.seqlen_q" : "seqlen_q"; }
  plan::Target target_;
  support::DiagSink& diags_;

  // header facts
  ArchSpec arch_;
  std::string tl_kernel_name_, kernel_name_;
  tl::MaskSpec mask_;
  std::map<std::string, int64_t> env_;                  // fixed Dims and Consts
  std::vector<std::pair<std::string, int64_t>> consts_; // in order
  std::vector<std::pair<std::string, int64_t>> fixed_dims_;
  std::map<std::string, std::string> runtime_dims_;     // TL dim -> params field ("seqlen_q")
  std::vector<std::pair<std::string, tl::Expr>> grid_;  // var, extent
  std::set<std::string> scalar_names_;                  // every TL integer name (for collisions)
  const tl::Stmt* kernel_stmt_ = nullptr;
  const tl::Stmt* dim_stmt_ = nullptr;
  const tl::Stmt* const_stmt_ = nullptr;               // the first Const statement (for locations)
  std::vector<const tl::Stmt*> const_stmts_;            // every Const statement, in order
  const tl::Stmt* grid_stmt_ = nullptr;
  const tl::Stmt* loop_ = nullptr;
  size_t loop_index_ = 0;
  int tile_m_ = 0, warps_ = 4, stages_ = 1, threads_ = 128;
  std::string tile_m_expr_, warps_expr_ = "4", stages_expr_ = "1";
  tl::DType elem_ = tl::DType::F16, out_ = tl::DType::F16;
  int d_qk_ = 0, d_v_ = 0;
  std::string q_cols_expr_, v_cols_expr_;
  bool has_lse_ = false;

  // tensors
  std::map<std::string, SharedBuf> shared_;
  std::vector<std::string> shared_order_;
  std::map<std::string, RegTensor> regs_;               // current state during emission
  std::map<const tl::Stmt*, GemmPlan> gemms_;
  std::set<std::string> resident_a_;                    // A operands kept in registers
  std::map<std::string, std::string> reshape_family_;   // reshaped tensor -> family of its GEMM
  std::map<std::string, std::string> acc_descale_;      // accumulate target -> fp8 descale factor
  Schedule sched_;
  bool wgmma_ = false;  // a Hopper program in the wgmma form: lowered by sm90/lower.cc instead
  int64_t smem_bytes_ = 0, smem_stage_bytes_ = 0;
  std::string vt_buffer_;                               // fp8: V^T shared buffer name ("" = none)
  std::map<std::string, AuxInfo> aux_;                  // auxiliary globals by name
  std::vector<std::string> aux_order_;                  // in ABI slot order
  std::string skip_mask_;                               // the loop's {skip: NAME} ("" = none)
  std::string skip_row_, skip_col_, skip_cols_;         // its tile: at [row, col], key-tile width

  // emission state
  std::vector<std::string> pending_groups_;             // committed cp.async groups, oldest first
  std::set<std::string> body_unwaited_;                 // fallback schedule: copies not waited for
  std::set<std::string> loop_created_;                  // register tensors whose scope is the loop body
  bool prologue_done_ = false;
  bool in_loop_ = false;
  std::string loop_var_;
  int tmp_counter_ = 0;
};

}  // namespace qattn::backend::detail
