// The sm90 (Hopper, sm90a) lowering: a checked TL program in the wgmma form -> kir::Kernel.
//   lower.cc         the kernel's facts: tiles, roles, rings and shared memory, the producer's loads,
//                    the work tile's names (Scope), the mask program
//   lower_body.cc    each consumer statement -> ops (register tensors, pending scale factors,
//                    partial row sums); the statement read/write sets for the schedule
//   merge.cc         TL `Merge`: the in-kernel merge of split keys on row-distributed tiles
//   schedule.cc      the software pipeline of the key loop ({overlap}, {stage}): first / steady /
//                    drain blocks, ring waits and releases, GEMM waits, ping-pong turns
// Every form the sm90 kernel cannot run is an XL diagnostic here, at the TL statement, with what
// the lowering lacks; what comes out passes kir::verify and emits without diagnostics.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/kir.h"
#include "backend/lowering.h"

namespace qattn::backend::sm90 {

// One consumer statement of the loop body (or after it), lowered to ops but not yet scheduled.
struct BodyStmt {
  const tl::Stmt* stmt = nullptr;
  std::vector<kir::Op> ops;          // in order; GEMM issue without its completion
  std::set<std::string> reads, writes;  // register tensors (TL names) and ring buffers read
  std::vector<std::string> waits, releases;  // rings: before / after the statement
  std::vector<std::string> copies;   // rings this statement's {async} Copy fills (the producer's)
  bool gemm = false;                 // issues a GEMM (async until a GemmWait)
  int stage = 0;                     // {overlap}: 0 or 1
};

class Lower {
 public:
  Lower(const detail::Lowering& front, const tl::Program& prog, const tl::CheckInfo& info, const plan::Target& target,
        support::DiagSink& diags)
      : f_(front), prog_(prog), info_(info), target_(target), diags_(diags) {}
  std::optional<kir::Kernel> run();

 private:
  // lower.cc
  bool lower_header();
  bool lower_scope();
  bool lower_roles();
  bool lower_smem();
  bool lower_loads();
  bool error(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint);
  kir::TlRef ref(const tl::Stmt& s) const;
  const kir::SharedBuf* buf(const std::string& name) const;
  // lower_body.cc
  bool lower_registers();
  bool lower_statement(const tl::Stmt& s, bool in_loop, BodyStmt& out);
  bool lower_compute(const tl::Stmt& s, BodyStmt& out);
  bool lower_gemm(const tl::Stmt& s, BodyStmt& out);
  bool lower_score_op(const tl::Stmt& s, BodyStmt& out);
  bool lower_store(const tl::Stmt& s, BodyStmt& out);
  void find_partial_rows();
  void nonneg_step(const tl::Stmt& s, std::set<std::string>& nn) const;
  std::set<std::string> nonneg_at_loop(const std::set<std::string>& before) const;
  kir::Reg* reg(const std::string& name);
  kir::Reg& define(const std::string& name, kir::RegKind kind, int cols, tl::DType dt, const tl::Stmt& s);
  bool whole(const std::string& rows, bool in_loop, const tl::Stmt& s, BodyStmt& out);
  std::string take_pending(const std::string& tile);
  bool materialize(const std::string& tile, const tl::Stmt& s, BodyStmt& out);
  // merge.cc
  bool lower_merge(const tl::Stmt& s);
  // schedule.cc
  bool schedule();
  bool assign_stages(std::vector<BodyStmt>& body);

  const detail::Lowering& f_;
  const tl::Program& prog_;
  const tl::CheckInfo& info_;
  plan::Target target_;
  support::DiagSink& diags_;
  CppNames names_;         // TL names inside the generated Scope (bare)
  CppNames kernel_names_;  // TL names in the kernel body (the Scope's as `v.NAME`)
  kir::Kernel k_;
  std::map<std::string, std::string> pending_;   // tile -> its pending positive factor (C++)
  std::set<std::string> partial_;                // row vectors kept as per-thread shares
  std::set<std::string> whole_now_;              // partial row vectors made whole after the loop
  std::set<std::string> nonneg_;                 // tensors now >= 0, never -inf (exponentials, their sums)
  std::map<std::string, std::set<std::string>> upper_;  // b -> the tensors b is known to bound from above
  std::vector<BodyStmt> body_, after_;           // the loop body; the statements after the loop
  std::vector<std::string> once_rings_;          // rings copied once per tile (before the loop)
  std::vector<std::pair<std::string, const tl::Stmt*>> pre_waits_;  // {wait: X} before the loop
  bool in_loop_ = false;                         // lowering a statement of the loop body
  int groups_ = 0;                               // GEMM commit groups numbered so far
};

}  // namespace qattn::backend::sm90
