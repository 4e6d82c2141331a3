// The TL checker: the static verifier every TL program must pass before any CUDA is generated.
// Input: a parsed Program. Output: diagnostics (codes TL03xx-TL07xx, see docs/tl.md "What the
// checker verifies") and, through the info overload, the facts the translator relies on.
// Never throws; any AST (including garbage) yields diagnostics, not crashes.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
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
  // `Allocate X in shared (rows, cols) DTYPE {view: B}`: X's shared buffer is no storage of its own
  // but the first `cols` columns of B's shared buffer (B's current ring slot); empty otherwise.
  std::string shared_view_of;
};

// The Hopper (sm90) schedule of a program (docs/tl.md, "Hopper schedule"): its warp Roles and the
// schedule attributes the translator lowers. Meaningful when the program checks without errors.
struct ScheduleInfo {
  bool present = false;  // the program declares its warp Roles (then both: producer and consumer)
  int producer_wg = 0, producer_regs = 0;  // `Role producer warpgroups N registers R`
  int consumer_wg = 0, consumer_regs = 0;  // `Role consumer warpgroups N registers R [pingpong | split columns]`
  bool pingpong = false;
  // `split columns`: the consumer warpgroups share every row of the query tile, warpgroup w taking
  // the w-th of consumer_wg equal parts of the score tile's key columns and of the output's columns
  // (row statistics combined through shared memory, P staged in shared memory by the program).
  bool split_columns = false;
  // Ring size per shared buffer: every shared buffer with `{stages: N}` and every shared buffer an
  // `{async}` Copy fills (1 when it has no stages attribute).
  std::map<std::string, int> stages;
  std::set<std::string> async_buffers;  // shared buffers filled by `{async}` Copies (Q, K, V)
  bool overlap = false;                 // some loop has `{overlap}`
  bool persistent = false;              // the Grid has `{persistent}`: one block per SM walks its points
};

struct CheckInfo {
  std::string kernel_name;
  MaskSpec kernel_mask;
  std::vector<std::string> dims, consts, grid_vars, lets;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, VariantStmt> variants;  // Score / Mask declarations by name
  std::vector<std::string> aux;                 // auxiliary global tensors, in declaration order
  // A backward program's gradients of auxiliary inputs (docs/tl.md, "The backward pass"): the fp32
  // global dT of an fp32 auxiliary input T, accumulated by `Compute Gradient`, in declaration order.
  std::vector<std::string> aux_grads;
  ScheduleInfo schedule;                        // Role statements and schedule attributes
  // GQA packing: the `{pack: G}` of the global Q, O (and LSE) views, when they carry one (docs/tl.md,
  // "GQA packing"): row r of the view is query r / G of head offset * G + r % G.
  std::optional<Expr> pack;
  // A KV cache (docs/tl.md, "KV caches"): the int32 auxiliary tensor `Let seqlen_k = T[b]` reads (each
  // sequence's key count), and the block table `{paged: T}` names on the global K and V (their rows
  // live in pages of `page_size` rows). Empty when the program has none.
  std::string kv_lengths, kv_batch_var, paged;
  // Packed ragged batches (docs/tl.md, "Ragged batches"): `Let seqlen_q = T[b + 1] - T[b]` (q_lengths;
  // kv_lengths likewise for seqlen_k, *_diff true for the difference form, false for `T[b]`), and the
  // cumulative counts `{ragged: T}` names on the global Q / O / LSE (q_ragged) and K / V (kv_ragged):
  // row r of sequence b is row T[b] + r of a packed (total, heads, d) tensor.
  std::string q_lengths, q_ragged, kv_ragged;
  bool q_lengths_diff = false, kv_lengths_diff = false;
  // Phases (docs/tl.md, "Phases"): a backward program's `Phase NAME ... end` blocks, each checked as a
  // kernel of its own (its CheckInfo: phase_name set, `workspaces` the fp32 globals it writes). In
  // the main program's info, `workspaces` are the globals it reads that a phase wrote.
  std::string phase_name;
  std::vector<std::string> workspaces;
  std::map<std::string, unsigned> workspace_deps;  // (the checker's data flow of each workspace)
  std::vector<CheckInfo> phases;
  // Split keys (docs/tl.md, "Splitting the keys"): a forward program whose O and LSE views carry the
  // offset [b, s, head]: each block writes the partial result of its part s of the keys (the Dim
  // `splits` parts), merged by a combine program; split_var is the offset's middle index.
  bool split = false;
  std::optional<Expr> split_var;
  // Merge (docs/tl.md, "Merging the parts in the kernel"): a split forward's `Merge AXIS ... end`, whose
  // body is checked as a combine program of its own scope: its CheckInfo (merge_axis the split Grid
  // axis, merge_rows the `{rows: R}` attribute or 0) is the one entry of `merges`; the main program's
  // `tensors` keep its own O and LSE. Empty when the program has no Merge.
  std::vector<CheckInfo> merges;
  std::string merge_axis;
  int merge_rows = 0;
};

bool check(const Program& p, support::DiagSink& diags, const CheckOptions& opts = {});  // true when no errors
bool check(const Program& p, support::DiagSink& diags, const CheckOptions& opts, CheckInfo& info);

}  // namespace qattn::tl
