// The TL interpreter: executes a TL program on the CPU at tile level, block by block, and compares
// its outputs with the fp64 reference attention (spec/reference.h). The meaning of every statement
// is in docs/tl.md ("Statements and their meaning", "Running a program").
//
// Input: a Program (normally one that passed the checker, but any AST is accepted) and a RunConfig.
// Output: a RunResult and diagnostics. Never throws and never crashes: shapes, names and indices
// are validated as the program runs.
// Diagnostics:
//   TL0603 an expression cannot be evaluated (from tl/eval.h)
//   TL0801 the program ran but its output differs from the reference (or was not fully written)
//   TL0901 runtime shape/index error (operand shapes, unknown tensor, copy outside a buffer, ...)
//   TL0902 problem or program too large for the interpreter
//   TL0903 construct the interpreter does not support
//   TL0904 bad run configuration (a Dim without value, a --dims entry that conflicts or is unknown)
//   TL0905 the Hopper schedule broken at run time: a read of a buffer whose async copy was not waited
//          for or whose slot was released, an async copy into a slot still held (the producer would
//          wait forever), a release of a slot not held, a bad `stages` / `async` / `wait` / `release`
//   TL0906 the run would hold more tensor memory than RunConfig::memory_budget (at the statement
//          that allocates: an Allocate, a Compute's result, an async Copy, the global tensors)
// Schedule attributes (docs/tl.md, "Hopper schedule") execute sequentially in program order: staged
// buffers are rings, async copies fill the next slot, wait/release move slots along; Roles and
// `{overlap}` do not change what is computed.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "spec/reference.h"
#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::tl {

inline constexpr int64_t kDefaultMemoryBudget = int64_t(1) << 30;  // 1 GiB (RunConfig::memory_budget)
inline constexpr int64_t kDefaultWindowLeft = 64, kDefaultWindowRight = 0;  // RunConfig::window_left / right
inline constexpr double kDefaultSoftcap = 30.0;                             // RunConfig::softcap

// FP64: every buffer holds fp64 and nothing is rounded (checks the algorithm).
// Storage: every store rounds to the destination buffer's dtype (checks the precision choices).
enum class Precision { FP64, Storage };

struct RunConfig {
  std::map<std::string, int64_t> dims;  // values of the program's Dims (e.g. from --dims)
  Precision precision = Precision::Storage;
  uint64_t seed = 1;                    // random inputs
  std::optional<double> softmax_scale;  // default 1/sqrt(d_qk)
  // The other launch-time builtins (docs/tl.md, "Names and scopes"): the sliding window, -1 meaning
  // unbounded on that side (the program then sees seqlen_q + seqlen_k, as a kernel does), and the
  // softcap. Unset: window (kDefaultWindowLeft, kDefaultWindowRight), softcap kDefaultSoftcap.
  std::optional<int64_t> window_left, window_right;
  std::optional<double> softcap;
  // The reference's score modification / extra mask, given the auxiliary tensors the run made.
  // Empty: the program's own Score / Mask declarations, evaluated per element (docs/tl.md).
  std::function<spec::ScoreVariant(const spec::AuxMap&)> reference_variant;
  // Bytes of tensors the run may hold at once: the global tensors with the reference's copies,
  // auxiliary tensors, every shared/register buffer (those a loop body rebinds are kept until its
  // iteration ends), pending async copies and one statement's result. Above it: TL0906.
  int64_t memory_budget = kDefaultMemoryBudget;
};

struct RunResult {
  bool ran = false;     // the program executed to the end (no TL09xx/TL0603 error)
  bool passed = false;  // ran, every output element written, and within tolerance
  double max_abs_err = 0;      // max |O - O_ref| over written elements
  double rel_err = 0;          // ||O - O_ref||_F / ||O_ref||_F over written elements
  double lse_max_abs_err = 0;  // max |LSE - LSE_ref| (0 when the program has no LSE)
  double tolerance = 0;        // FP64: bound on rel_err; Storage: bound on max_abs_err
  double lse_tolerance = 0;    // bound on lse_max_abs_err
  int64_t unwritten = 0;       // output elements (O and LSE) never written
  int64_t blocks = 0;          // grid points executed
  std::string summary;         // a few human-readable lines (problem, errors, verdict reasons)
};

// Runs p once per grid point and compares with the reference. Reports TL0801 when the outputs are
// wrong (ran = true, passed = false) and TL09xx when the program cannot be executed (ran = false).
RunResult run(const Program& p, const RunConfig& cfg, support::DiagSink& diags);

// Limits (refused with TL0902 above them).
inline constexpr double kMaxReferenceMadds = 2e8;   // batch*heads_q*seqlen_q*seqlen_k*(d_qk+d_v)
// Executed work, all blocks together: one unit per element operation (a multiply-add of a GEMM,
// one element of an element-wise op or copy), kStmtCost per statement and block, kIterCost per
// loop iteration. It bounds the run time of any program, however its loops are written.
inline constexpr double kMaxWork = 1.5e9;
inline constexpr double kStmtCost = 1000;
inline constexpr double kIterCost = 10000;
inline constexpr int64_t kMaxBufferElems = 1 << 24;  // one shared/register buffer
inline constexpr int64_t kMaxGlobalElems = 1 << 26;  // Q, K, V, O, LSE together

}  // namespace qattn::tl
