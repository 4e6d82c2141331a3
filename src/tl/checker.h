// The TL checker: the static verifier every TL program must pass before any CUDA is generated.
// Input: a parsed Program. Output: diagnostics (codes TL03xx-TL07xx, see docs/tl.md "What the
// checker verifies") and, through the info overload, the facts the translator relies on.
// Never throws; any AST (including garbage) yields diagnostics, not crashes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::tl {

struct CheckOptions {
  // Dimension assignments used by the range analysis (tile coordinates, loop bounds). Empty: the
  // checker picks its own representative set (ragged sizes not divisible by the tiles,
  // seqlen_q < seqlen_k and >, 1 and several kv tiles, batch 2, heads_q = 2*heads_kv ...),
  // respecting Dims with fixed values.
  std::vector<std::map<std::string, int64_t>> sample_dims;
};

// Register-tensor layout as tracked by the checker.
enum class Layout { Unknown, Operand, MmaC, MmaA };

// Per-tensor facts collected by the checker (one entry per declared tensor name).
struct TensorInfo {
  std::string name;
  bool in_global = false, in_shared = false, in_register = false;
  std::vector<Expr> global_shape, shared_shape, register_shape;  // as allocated
  DType global_dtype = DType::F16, shared_dtype = DType::F16, register_dtype = DType::F32;
  bool written_to_global = false;  // some Copy ... to global of it exists
  bool loop_carried = false;       // register tensor read before written in some loop iteration
  SrcLoc decl;                     // first Allocate
};

struct CheckInfo {
  std::string kernel_name;
  MaskSpec kernel_mask;
  std::vector<std::string> dims, consts, grid_vars, lets;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, VariantStmt> variants;  // Score / Mask declarations by name
  std::vector<std::string> aux;                 // auxiliary global tensors, in declaration order
};

bool check(const Program& p, support::DiagSink& diags, const CheckOptions& opts = {});  // true when no errors
bool check(const Program& p, support::DiagSink& diags, const CheckOptions& opts, CheckInfo& info);

}  // namespace qattn::tl
