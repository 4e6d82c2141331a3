// plan::refines: does a TL code program keep its sketch? Stage 1b may add parameters (Dim, Const,
// Grid, Let), Allocate, Reshape, tile shapes, coordinates, loop bounds, `at` clauses and schedule
// attributes (`{skip: NAME}`, the Hopper schedule's `{async}`, `{stages: N}`, `{wait: X}`, ...), warp
// Role statements and layout moves (Reshape, `Copy X from shared to register`: values unchanged, a
// register tile read back in operand layout; misplaced, the interpreter sees stale values), and must keep every sketch statement, in order, with the same
// operation, tensors and operands; Score / Mask declarations with the same expression. This is
// the check an LLM's stage-1b answer must pass before the checker even runs.
#include "plan/sketch.h"
#include "tl/checker.h"
#include "tl/parser.h"
#include "tl/printer.h"

namespace qattn::plan {
namespace {

using tl::Stmt;

bool added_by_params(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::Dim:
    case Stmt::Kind::Const:
    case Stmt::Kind::Grid:
    case Stmt::Kind::Let:
    case Stmt::Kind::Role:
    case Stmt::Kind::Allocate:
    case Stmt::Kind::Reshape:
    case Stmt::Kind::Comment:
    case Stmt::Kind::Blank: return true;
    case Stmt::Kind::Copy: return s.copy.from == tl::Space::Shared && s.copy.to == tl::Space::Register;
    default: return false;
  }
}

// The parameter-free signature of a statement: what the sketch fixes.
std::string signature(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::Kernel: return "Kernel " + s.kernel.name;
    case Stmt::Kind::Copy:
      return "Copy " + s.copy.name + " from " + tl::to_string(s.copy.from) + " to " + tl::to_string(s.copy.to);
    case Stmt::Kind::Compute: {
      std::string r = "Compute " + s.compute.op;
      for (size_t i = 0; i < s.compute.operands.size(); ++i)
        r += (i ? ", " : " ") + tl::print_expr(s.compute.operands[i].expr) + (s.compute.operands[i].transposed ? "^T" : "");
      if (s.compute.result == tl::ComputeStmt::Result::Get) r += " and get " + s.compute.target;
      if (s.compute.result == tl::ComputeStmt::Result::Accumulate) r += " and accumulate " + s.compute.target;
      if (s.compute.op == "Mask" || s.compute.op == "Modify")
        r += " with " + (s.compute.mask.kind == tl::MaskSpec::Kind::Named ? s.compute.mask.name
                                                                           : std::string(tl::to_string(s.compute.mask.kind)));
      return r;
    }
    case Stmt::Kind::For: return "for " + s.loop.var;
    case Stmt::Kind::Phase: return "Phase " + s.loop.var;
    case Stmt::Kind::Merge: return "Merge " + s.loop.var;
    case Stmt::Kind::Variant:  // the declaration itself; its tile clauses are schedule facts
      return std::string(s.variant.is_mask ? "Mask " : "Score ") + s.variant.name + " = " + tl::print_expr(s.variant.expr);
    default: return "?";
  }
}

void flatten(const std::vector<Stmt>& in, std::vector<const Stmt*>& out, std::vector<std::string>& sig) {
  for (const auto& s : in) {
    if (added_by_params(s)) continue;
    out.push_back(&s);
    sig.push_back(signature(s));
    if (s.kind == Stmt::Kind::For || s.kind == Stmt::Kind::Phase || s.kind == Stmt::Kind::Merge) {
      flatten(s.loop.body, out, sig);
      out.push_back(&s);
      sig.push_back("end " + s.loop.var);
    }
  }
}

}  // namespace

bool check_written(const std::string& sketch, const std::string& code, support::DiagSink& inner) {
  auto sketch_prog = tl::parse(sketch, inner, "sketch.tl");
  auto code_prog = tl::parse(code, inner, "code.tl");
  if (!inner.has_errors()) tl::check(code_prog, inner);
  if (!inner.has_errors()) refines(sketch_prog, code_prog, inner);
  return !inner.has_errors();
}

bool refines(const tl::Program& sketch, const tl::Program& code, support::DiagSink& diags) {
  std::vector<const Stmt*> a, b;
  std::vector<std::string> sa, sb;
  flatten(sketch.stmts, a, sa);
  flatten(code.stmts, b, sb);
  size_t n = std::min(sa.size(), sb.size());
  for (size_t i = 0; i < n; ++i) {
    if (sa[i] != sb[i]) {
      diags.error("PLAN0201", b[i]->loc,
                  "the TL code changes sketch statement `" + sa[i] + "` (line " + std::to_string(a[i]->loc.line) +
                      " of the sketch) into `" + sb[i] + "`",
                  "stage 1b may only add Allocate, Reshape, Copy from shared to register, parameters, tile shapes, "
                  "coordinates and loop bounds; keep the sketch's statements in order");
      return false;
    }
  }
  if (sa.size() != sb.size()) {
    bool dropped = sa.size() > sb.size();
    const Stmt* at = dropped ? a[n] : b[n];
    diags.error("PLAN0201", dropped ? support::SrcLoc{} : at->loc,
                dropped ? "the TL code drops sketch statement `" + sa[n] + "` (line " + std::to_string(at->loc.line) +
                              " of the sketch)"
                        : "the TL code adds statement `" + sb[n] + "` that is not in the sketch",
                "stage 1b may only add Allocate, Reshape, Copy from shared to register, parameters, tile shapes, coordinates "
                "and loop bounds");
    return false;
  }
  return true;
}

}  // namespace qattn::plan
