// The statements of a row-wise kernel, lowered one by one in TL order onto the row-distributed
// register tiles of device/qattn/rowwise.cuh (no MMA, no shared memory): the body of a combine
// program (src/backend/combine) and of a backward program's Phase (src/backend/bwd/phase.cc).
//
// What the TL states: the rows of every register tile (one Const for all), their columns, the
// warps (`Const WARPS`, default min(rows, 4)), the loop over the parts, the order of the Computes.
// What is chosen here: a row's columns dealt to the 32 lanes of its warp in runs of up to 4
// consecutive columns (vector loads), the rows of the tile to the warps.
//
// The caller binds each global Allocate to a pointer (its kernel's parameters); the rest is here.
// Diagnostics: XL0201 (a tile extent not a compile-time constant), XL0202 (a tile the row tiling
// cannot deal), XL0301 (a statement with no row-wise form), XL0302 (nested loops).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpp_expr.h"
#include "backend/cuda_out.h"
#include "support/diag.h"
#include "tl/ast.h"
#include "tl/eval.h"

namespace qattn::backend::rowwise {

// A global Allocate as the kernel sees it: a pointer of this block's (batch, [split,] head) matrix.
struct GlobalView {
  std::string var;         // C++ pointer
  std::string row_stride;  // C++ expression: a row's address (qattn::rows::RowAddr: a stride, or packed rows)
  std::string rows;        // C++ expression: the view's rows (TL shape[0], times G when packed)
  bool vec = false;        // 1-D (LSE, a workspace)
};

// A strip-mined body (the in-kernel merge of split keys, src/backend/sm90): the TL's (BM, d) tiles
// are worked on `rows` rows at a time by `warps` warps, the strip's first tile row `row_offset` (a
// C++ expression) added to every copy's row (rows are independent in a row-wise body).
struct Strip {
  int64_t rows = 0;  // 0: the TL's rows at once
  int warps = 0;
  std::string row_offset;
  // An unrolled block's loads (its global views, `Copy X ... from global to register` and X's
  // Allocate) written before any of its other statements: a block of one warpgroup has no other
  // warps to hide a load's latency behind, and ptxas kept each part's loads after the previous
  // part's math, one L2 round trip a part.
  bool hoist_loads = false;
};

class Body {
 public:
  // Writes the declaration of the global `s` allocates and returns its view (nullopt: refused,
  // the binder reported why).
  using BindGlobal = std::function<std::optional<GlobalView>(CudaOut& w, const tl::Stmt& s)>;
  // kind: the program's kind in messages ("combine", "phase"); env: its Dims and Consts.
  Body(std::string kind, const CppNames& names, const tl::Env& env, support::DiagSink& diags, BindGlobal bind)
      : kind_(std::move(kind)), names_(names), env_(env), diags_(diags), bind_(std::move(bind)) {}

  // The row tiling of the register tiles `stmts` allocate (nested loops included); false on error.
  bool tiling(const std::vector<tl::Stmt>& stmts, support::SrcLoc at);
  void set_strip(Strip s) { strip_ = std::move(s); }
  void emit(CudaOut& w, const std::vector<tl::Stmt>& stmts);  // the statements, in TL order
  // `using Tiling = qattn::rows::RowTiling<...>;`
  std::string tiling_decl() const;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int warps() const { return warps_; }
  bool failed() const { return failed_; }

 private:
  struct Reg {
    std::string var;
    bool vec = false;  // a row vector (ROWS)
  };
  bool fail(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint);
  std::optional<int64_t> constant(const tl::Expr& e, support::SrcLoc at, const std::string& what);
  std::string cint(const tl::Expr& e) const { return names_.int_expr(e); }
  std::string id(const std::string& n) const { return names_.ident(n); }
  void allocate(CudaOut& w, const tl::Stmt& s);
  void loop(CudaOut& w, const tl::Stmt& s, long unroll);
  void hoisted_block(CudaOut& w, const tl::Stmt& s, const std::string& first, long n);
  void copy(CudaOut& w, const tl::Stmt& s);
  void compute(CudaOut& w, const tl::Stmt& s);
  const Reg* reg(const std::string& n, const tl::Stmt& s);
  bool is_tensor(const tl::Operand& o) const;

  std::string kind_;
  const CppNames& names_;
  const tl::Env& env_;
  support::DiagSink& diags_;
  BindGlobal bind_;
  bool failed_ = false;
  int64_t rows_ = 0, cols_ = 0;
  int warps_ = 1;
  std::map<std::string, Reg> regs_;
  std::map<std::string, GlobalView> globals_;
  Strip strip_;
};

}  // namespace qattn::backend::rowwise
