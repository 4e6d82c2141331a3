// The TL checker's memory statements: Allocate (declarations per memory level, global views:
// TL0302, TL0403, TL0405, TL0406) and Copy (levels, tiles against buffers and global layouts, global
// inputs/outputs, data flow: TL0303, TL0305, TL0402-TL0404, TL0406). Input: one statement plus the
// walker's state; output: diagnostics and the updated buffers.
#include <algorithm>

#include "tl/checker_internal.h"

namespace qattn::tl::detail {
namespace {

const char* kGlobalNames[] = {"Q", "K", "V", "O", "LSE"};
const char* kBackwardNames[] = {"dO", "dQ", "dK", "dV"};  // a backward program's arguments besides those

bool is_backward_name(const std::string& n) {
  for (const char* g : kBackwardNames)
    if (n == g) return true;
  return false;
}

// The inputs a backward's gradients derive from, and what each one stands for in the algorithm.
struct GradInput { const char* name; const char* role; };
const GradInput kGradInputs[] = {
    {"Q", "S = Q K^T"}, {"K", "S = Q K^T"}, {"LSE", "P = exp(S - LSE), recomputed from the forward's LSE"},
    {"dO", "dP = dO V^T"}, {"V", "dP = dO V^T"}, {"O", "the D term rowsum(dO * O) in dS = P * (dP - D)"}};
constexpr unsigned kAllGradInputs = 0x3f;       // dQ and dK: dS needs every input
constexpr unsigned kDvGradInputs = 0x1 | 0x2 | 0x4 | 0x8;  // dV = P^T dO

unsigned grad_input_bit(const std::string& n) {
  for (unsigned i = 0; i < sizeof(kGradInputs) / sizeof(kGradInputs[0]); ++i)
    if (n == kGradInputs[i].name) return 1u << i;
  return 0;
}

}  // namespace

// A workspace (docs/tl.md, "Phases"): an fp32 global (seqlen_q) or (seqlen_q, X) per [batch, head]
// that a Phase writes and the main program (or a later phase) reads. True when `s` declares one (its
// rules checked here, TL0419); false for the kernel's arguments and auxiliary inputs.
bool Walker::workspace_alloc(const Stmt& s) {
  const AllocateStmt& a = s.alloc;
  if (!backward()) return false;
  bool argument = is_backward_name(a.name);
  for (const char* g : kGlobalNames) argument = argument || a.name == g;
  auto earlier = workspace_decl_.find(a.name);
  if (argument || (!phase_ && earlier == workspace_decl_.end())) {
    if (phase_ && (a.name == "dQ" || a.name == "dK" || a.name == "dV"))
      error(s, "TL0419", s.loc, "Phase " + info_.phase_name + " allocates the gradient " + a.name,
            "a phase reads the kernel's inputs and writes workspaces; the gradients are the main program's");
    return false;
  }
  const std::string text = fmt_shape(a.shape) + " " + (a.dtype ? to_string(*a.dtype) : "fp16");
  const bool shape_ok = (a.shape.size() == 1 || a.shape.size() == 2) && a.shape[0].kind == Expr::Kind::Name &&
                        a.shape[0].name == "seqlen_q";
  if (!shape_ok || !a.dtype || *a.dtype != DType::F32 || a.offset.size() != 2) {
    error(s, "TL0419", s.loc, "workspace " + a.name + " is " + text + (a.offset.size() != 2 ? " without a [batch, head] offset" : ""),
          "a workspace holds fp32 values per query row: `Allocate " + a.name + " in global (seqlen_q) fp32 with offset [b, head]`");
  } else if (!loops_.empty()) {
    error(s, "TL0406", s.loc, "global tensor allocated inside a loop", "allocate global views at the top of the program");
  } else if (earlier != workspace_decl_.end()) {
    const AllocateStmt& e = earlier->second->alloc;
    const std::string etext = fmt_shape(e.shape) + " " + (e.dtype ? to_string(*e.dtype) : "fp16");
    if (etext != text || !(e.offset == a.offset))
      error(s, "TL0419", s.loc,
            "workspace " + a.name + " is " + text + " here but " + etext + " in the phase that writes it (line " +
                line_of(earlier->second->loc) + ")",
            "declare it as the phase does");
  }
  if (phase_ && earlier == workspace_decl_.end() &&
      std::find(info_.workspaces.begin(), info_.workspaces.end(), a.name) == info_.workspaces.end())
    info_.workspaces.push_back(a.name);
  if (!phase_ && std::find(info_.workspaces.begin(), info_.workspaces.end(), a.name) == info_.workspaces.end())
    info_.workspaces.push_back(a.name);
  return true;
}

bool Walker::is_input(const std::string& n) const {
  if (combine()) return n == "O_part" || n == "LSE_part";
  if (backward() && workspace_decl_.count(n)) return true;  // written by an earlier phase
  return n == "Q" || n == "K" || n == "V" || is_aux(n) || (backward() && (n == "O" || n == "dO" || n == "LSE"));
}

// Data flow of a backward program: a result derives from its operands (and, accumulated or in
// place, from its earlier value); a load from global derives from that input.
void Walker::flow_compute(const Stmt& s) {
  const ComputeStmt& c = s.compute;
  unsigned from = 0;
  for (const auto& o : c.operands)
    if (o.expr.kind == Expr::Kind::Name) {
      auto it = deps_.find(o.expr.name);
      if (it != deps_.end()) from |= it->second;
    }
  if (c.result == ComputeStmt::Result::Get) deps_[c.target] = from;
  else if (c.result == ComputeStmt::Result::Accumulate) deps_[c.target] |= from;
  else if (!c.operands.empty() && c.operands[0].expr.kind == Expr::Kind::Name) deps_[c.operands[0].expr.name] |= from;
}

// Where a gradient is stored: it must derive from every input its formula reads (docs/tl.md,
// "The backward pass"). A missing D term, a dS computed without P, a dV without dO are TL0413.
void Walker::check_gradient_flow(const Stmt& s) {
  const std::string& n = s.copy.name;
  const unsigned want = n == "dV" ? kDvGradInputs : kAllGradInputs;
  const unsigned have = deps_.count(n) ? deps_[n] : 0;
  std::string missing, roles;
  for (unsigned i = 0; i < sizeof(kGradInputs) / sizeof(kGradInputs[0]); ++i) {
    if (!(want & (1u << i)) || (have & (1u << i))) continue;
    missing += (missing.empty() ? "" : ", ") + std::string(kGradInputs[i].name);
    if (roles.find(kGradInputs[i].role) == std::string::npos) roles += (roles.empty() ? "" : "; ") + std::string(kGradInputs[i].role);
  }
  if (missing.empty()) return;
  error(s, "TL0413", s.loc,
        "the gradient " + n + " stored here does not depend on " + missing + ": its formula needs " + roles,
        n == "dV" ? "dV accumulates P^T dO with P recomputed from Q, K and LSE"
                  : "d" + std::string(n == "dQ" ? "Q accumulates dS K" : "K accumulates dS^T Q") +
                        " with dS = P * (dP - D), P from Q, K and LSE, dP = dO V^T and D = rowsum(dO * O)");
}

std::string Walker::missing_grad_inputs(const std::string& tensor) {
  const unsigned have = deps_.count(tensor) ? deps_[tensor] : 0;
  std::string missing;
  for (unsigned i = 0; i < sizeof(kGradInputs) / sizeof(kGradInputs[0]); ++i)
    if ((kAllGradInputs & (1u << i)) && !(have & (1u << i))) missing += (missing.empty() ? "" : ", ") + std::string(kGradInputs[i].name);
  return missing;
}

// `Allocate dT in global (shape) fp32` in a backward program, T an fp32 auxiliary input declared
// above: the gradient of T, accumulated by `Compute Gradient ... and accumulate dT` (an output, zero
// at launch). Its shape is T's, with no offset (TL0406). False for any other Allocate.
bool Walker::aux_grad_alloc(const Stmt& s) {
  const AllocateStmt& a = s.alloc;
  if (!backward() || a.name.size() < 2 || a.name[0] != 'd' || !is_aux(a.name.substr(1))) return false;
  const std::string t = a.name.substr(1);
  const TensorInfo& ti = info_.tensors[t];
  if (ti.global_dtype != DType::F32) {
    error(s, "TL0406", s.loc, "'" + a.name + "' names the gradient of the auxiliary input " + t + ", which is " +
          to_string(ti.global_dtype) + ": only fp32 inputs (slopes, bias tables) have gradients",
          "rename the tensor, or make " + t + " fp32");
    return true;
  }
  const bool same = a.shape.size() == ti.global_shape.size() &&
                    std::equal(a.shape.begin(), a.shape.end(), ti.global_shape.begin());
  if (!same || !a.offset.empty() || !a.dtype || *a.dtype != DType::F32 || a.init) {
    error(s, "TL0406", s.loc,
          "the gradient " + a.name + " of the auxiliary input " + t + " is a global of " + t + "'s shape " +
              fmt_shape(ti.global_shape) + ", fp32, without offset or init",
          "write `Allocate " + a.name + " in global " + fmt_shape(ti.global_shape) + " fp32`");
  } else if (!loops_.empty()) {
    error(s, "TL0406", s.loc, "global tensor allocated inside a loop", "allocate global views at the top of the program");
  } else if (info_.aux_grads.size() >= 4) {
    error(s, "TL0406", s.loc, "more than 4 gradients of auxiliary inputs", "a kernel writes at most 4 (the C ABI's daux[4])");
  } else if (std::find(info_.aux_grads.begin(), info_.aux_grads.end(), a.name) == info_.aux_grads.end()) {
    info_.aux_grads.push_back(a.name);
  }
  return true;
}

void Walker::allocate_stmt(const Stmt& s) {
  const AllocateStmt& a = s.alloc;
  if (a.name.empty()) {
    error(s, "TL0306", s.loc, "Allocate without a name", "write `Allocate NAME in SPACE (shape) DTYPE`");
    return;
  }
  if (is_builtin_scalar(a.name) || is_launch_int(a.name)) {
    error(s, "TL0302", s.loc, "'" + a.name + "' is a builtin and cannot name a tensor", "choose another name");
    return;
  }
  auto sym = syms_.find(a.name);
  if (sym != syms_.end() && sym->second.kind != SymKind::Tensor) {
    error(s, "TL0302", s.loc,
          "'" + a.name + "' is already declared as " + sym_kind_name(sym->second.kind) + " at line " +
              line_of(sym->second.decl),
          "choose another name for the tensor");
    return;
  }
  if (Buffer* old = buffer(a.name, a.space)) {
    error(s, "TL0302", s.loc,
          "'" + a.name + "' already has a " + to_string(a.space) + " buffer (line " + line_of(old->decl) + ")",
          "a tensor has at most one buffer per memory level: remove this Allocate or use another name");
    return;
  }
  bool shape_ok = true;
  for (const auto& e : a.shape) shape_ok = check_expr(e, Ctx::Static, s) && shape_ok;
  std::string decl_text = "Allocate " + a.name + " in " + to_string(a.space) + " " + fmt_shape(a.shape) +
                          (a.dtype ? std::string(" ") + to_string(*a.dtype) : std::string()) +
                          (a.init ? " init " + fmt_expr(*a.init) : std::string());

  if (a.space == Space::Global && workspace_alloc(s)) {
    for (const auto& e : a.offset) check_expr(e, Ctx::Index, s);
  } else if (a.space == Space::Global && aux_grad_alloc(s)) {
    // the gradient of an auxiliary input: checked there
  } else if (a.space == Space::Global) {
    const bool part = a.name == "O_part" || a.name == "LSE_part";  // a combine program's inputs
    // a forward program that splits the keys writes its part's O and LSE at [batch, split, head]
    // (docs/tl.md, "Splitting the keys"); finish() checks both do and that `splits` is a Dim
    const bool split_out = !combine() && !backward() && (a.name == "O" || a.name == "LSE") && a.offset.size() == 3;
    if (split_out) split_outputs_.insert(a.name);
    bool known = combine() ? part || a.name == "O" || a.name == "LSE" : backward() && is_backward_name(a.name);
    if (!combine())
      for (const char* g : kGlobalNames) known = known || a.name == g;
    if (!known && combine()) {
      error(s, "TL0406", s.loc,
            "'" + a.name + "' is not an argument of " + combine_name() + " (O_part, LSE_part, O, LSE)",
            std::string(merge_body_ ? "a Merge block" : "a `Kernel NAME combine`") +
                " reads the partial results O_part and LSE_part and writes O and LSE; keep other values in registers");
    } else if (!known) {
      // An auxiliary input of Score / Mask declarations: full shape, fp32 or int32, no offset.
      const bool dt_ok = a.dtype && (*a.dtype == DType::F32 || *a.dtype == DType::I32);
      if (!dt_ok || !a.offset.empty() || a.shape.empty() || a.shape.size() > 2) {
        error(s, "TL0406", s.loc,
              "'" + a.name + "' is not a kernel argument (" +
                  (backward() ? "Q, K, V, O, dO, LSE, dQ, dK, dV" : "Q, K, V, O, LSE") +
                  "); an auxiliary global tensor is 1-D or 2-D, fp32 or int32, with no offset" +
                  (is_backward_name(a.name) ? " (dO, dQ, dK and dV are the arguments of a `Kernel NAME backward`)" : ""),
              "write e.g. `Allocate " + a.name + " in global (batch, seqlen_k) int32` for a Score/Mask input, or keep "
              "intermediate values in shared or register memory");
      } else if (info_.aux.size() >= 4) {
        error(s, "TL0406", s.loc, "more than 4 auxiliary global tensors", "a kernel takes at most 4 (the C ABI's aux[4])");
      } else {
        info_.aux.push_back(a.name);
      }
    }
    if (!loops_.empty() && !(combine() && part)) {
      error(s, "TL0406", s.loc, "global tensor allocated inside a loop",
            combine() ? "only the partial results' views (O_part, LSE_part) move with the loop over the splits; allocate "
                        "O and LSE at the top of the program"
                      : "allocate global views at the top of the program");
    }
    if (known) {
      bool is_lse = a.name == "LSE" || a.name == "LSE_part";
      std::string rows = (a.name == "K" || a.name == "V" || a.name == "dK" || a.name == "dV") ? "seqlen_k" : "seqlen_q";
      bool ok = is_lse ? a.shape.size() == 1 : a.shape.size() == 2;
      if (ok) ok = a.shape[0].kind == Expr::Kind::Name && a.shape[0].name == rows;
      if (!ok) {
        error(s, "TL0406", s.loc,
              "global " + a.name + " has shape " + fmt_shape(a.shape) + "; expected " +
                  (is_lse ? "(seqlen_q)" : "(" + rows + ", HEAD_DIM)"),
              "write `" + example_global(a.name) + "` (one row per token; the head dim is a Dim)");
      }
      if (is_lse && a.dtype && *a.dtype != DType::F32) {
        error(s, "TL0406", s.loc, a.name + " is fp32, found " + std::string(to_string(*a.dtype)), "write `" + example_global(a.name) + "`");
      }
      if (a.name == "dQ" && (!a.dtype || *a.dtype != DType::F32)) {
        error(s, "TL0413", s.loc,
              "dQ is " + std::string(a.dtype ? to_string(*a.dtype) : "fp16 (the default)") +
                  ": every key block adds its share of dQ, so it is accumulated in fp32",
              "write `" + example_global("dQ") + "` and store it with `Copy dQ (BM, d) in coordinate [i, 0] from register "
              "to global and accumulate`");
      }
      if (a.offset.size() != (part || split_out ? 3u : 2u)) {
        error(s, "TL0406", s.loc,
              "global " + a.name + " needs an offset of " + (part ? "3 indices [batch, split, head]" : "2 indices [batch, head]") +
                  ", found " + std::to_string(a.offset.size()),
              "write `" + example_global(a.name) + "`");
      }
    }
    for (const auto& e : a.offset) check_expr(e, Ctx::Index, s);
    if (known && merge_body_) merge_alloc(s);  // the same views as the main program's O and LSE (checker_merge.cc)
    if (a.init) error(s, "TL0403", s.loc, "`init` on a global tensor", "only register tensors take `init`; remove it");
  } else {
    if (!a.offset.empty()) {
      error(s, "TL0406", s.loc, "`with offset` on a " + std::string(to_string(a.space)) + " buffer",
            "only global views take an offset; remove it");
    }
    if (a.shape.empty() || a.shape.size() > 2) {
      error(s, "TL0405", s.loc,
            std::string(to_string(a.space)) + " tensors are 2-D tiles or 1-D row vectors; '" + a.name + "' has shape " +
                fmt_shape(a.shape),
            "write a shape like (BM, d) or (BM)");
    }
    if (a.init && a.space != Space::Register) {
      error(s, "TL0403", s.loc, "`init` on a shared buffer", "only register tensors take `init`; fill shared buffers with Copy");
    }
    if (a.init) check_expr(*a.init, Ctx::Scalar, s);
  }

  Buffer& b = declare_buffer(a.name, a.space, s.loc, true);
  b.shape = a.shape;
  b.dtype = a.dtype;
  if (!b.dtype) {  // the documented defaults: register fp32, shared and global fp16 (LSE fp32)
    b.dtype = a.space == Space::Register || (a.space == Space::Global && (a.name == "LSE" || a.name == "LSE_part"))
                  ? DType::F32 : DType::F16;
  }
  b.decl_text = decl_text;
  for (const auto& at : s.attrs)
    if (at.key == "view") check_view(s, at, b);  // the first columns of an earlier shared buffer
  if (a.space == Space::Global) {
    b.defined = is_input(a.name);
    if (!global_alloc_.count(a.name)) global_alloc_[a.name] = s.loc;
  } else if (a.space == Space::Register) {
    b.defined = a.init.has_value();
  }
  (void)shape_ok;
  TensorInfo& ti = info_.tensors[a.name];
  DType dt = b.dtype.value_or(DType::F16);
  if (a.space == Space::Global) {
    ti.in_global = true, ti.global_shape = a.shape, ti.global_dtype = dt;
  } else if (a.space == Space::Shared) {
    ti.in_shared = true, ti.shared_shape = a.shape, ti.shared_dtype = dt;
  } else {
    ti.in_register = true, ti.register_shape = a.shape, ti.register_dtype = dt;
  }
}

void Walker::copy_stmt(const Stmt& s) {
  const CopyStmt& c = s.copy;
  auto sym = syms_.find(c.name);
  if (sym == syms_.end()) {
    report_undeclared(c.name, s.loc, s, "tensor");
    return;
  }
  if (sym->second.kind != SymKind::Tensor) {
    error(s, "TL0306", s.loc, "'" + c.name + "' is " + sym_kind_name(sym->second.kind) + ", not a tensor",
          "Copy moves the buffers of a tensor declared by Allocate");
    return;
  }
  if (c.to == Space::Global) {  // an attempted store counts for "never stored" (TL0406)
    stored_to_global_.insert(c.name);
  }
  if (copy_into_view(s)) return;
  for (const auto& e : c.tile) check_expr(e, Ctx::Static, s);
  for (const auto& e : c.coord) check_expr(e, Ctx::Index, s);
  const std::string route = std::string(to_string(c.from)) + " to " + to_string(c.to);
  if (c.from == c.to) {
    error(s, "TL0403", s.loc, "Copy from " + route + ": source and destination are the same level",
          "Copy moves data between levels: global->shared, shared->register, register->shared, register/shared->global");
    return;
  }
  if (c.from == Space::Global && c.to == Space::Register && !combine() && !phase_) {  // (a combine program and a Phase are row-wise kernels)
    error(s, "TL0403", s.loc, "Copy from global to register is not supported: register tiles are loaded from shared memory",
          "stage it through shared: `Copy " + c.name + " (...) in coordinate [...] from global to shared`, then `Copy " +
              c.name + " from shared to register`");
    return;
  }
  bool global = c.from == Space::Global || c.to == Space::Global;
  Space local = c.from == Space::Global ? c.to : c.from;
  Buffer* g = global ? buffer(c.name, Space::Global) : nullptr;
  if (global && !g) {
    std::string later;
    for (const auto& st : prog_.stmts) {
      if (st.kind == Stmt::Kind::Allocate && st.alloc.name == c.name && st.alloc.space == Space::Global) {
        later = fmt_shape(st.alloc.shape);
        break;
      }
    }
    error(s, "TL0303", s.loc, "Copy of '" + c.name + "' " + (c.from == Space::Global ? "from" : "to") +
                                  " global before its global Allocate",
          later.empty() ? "add `" + example_global(c.name) + "` at the top of the program"
                        : "move `Allocate " + c.name + " in global " + later + " ...` above this Copy (to the top of the program)");
    if (c.to != Space::Global) write_full(c.name, c.to);  // no cascade of TL0305 on the destination
    return;
  }
  bool ok = true;
  auto need = [&](Space sp) -> Buffer* {
    Buffer* b = buffer(c.name, sp);
    if (!b && sp != Space::Global && explain_gone_buffer(c.name, sp, s.loc, s)) {
      ok = false;
    } else if (!b && sp != Space::Global) {
      error(s, "TL0403", s.loc, "'" + c.name + "' has no " + to_string(sp) + " buffer for this Copy",
            "add `Allocate " + c.name + " in " + to_string(sp) + " " +
                (c.tile.empty() ? std::string("(...)") : fmt_shape(c.tile)) +
                (sp == Space::Shared ? " fp16" : " fp32") + "` before this Copy");
      ok = false;
    }
    return b;
  };
  Buffer* src = need(c.from);
  Buffer* dst = need(c.to);
  if (c.accumulate) {
    const bool out = backward() && (c.name == "dQ" || c.name == "dK" || c.name == "dV");
    const Buffer* gb = buffer(c.name, Space::Global);
    if (c.from != Space::Register || c.to != Space::Global || !out) {
      error(s, "TL0413", s.loc,
            "`and accumulate` on a Copy of '" + c.name + "' from " + route +
                ": only a backward program's outputs (dQ, dK, dV) accumulate, from register to global",
            backward() ? "write `Copy dQ (BM, d) in coordinate [i, 0] from register to global and accumulate`"
                       : "remove `and accumulate` (a forward kernel stores O and LSE once per tile)");
      ok = false;
    } else if (gb && gb->dtype && *gb->dtype != DType::F32) {
      error(s, "TL0413", s.loc,
            "`and accumulate` into " + c.name + ", which is " + to_string(*gb->dtype) + ": the tiles are added in fp32",
            "allocate it as fp32: `" + example_global(c.name) + "`");
      ok = false;
    }
    accumulated_to_global_.insert(c.name);
  } else if (c.to == Space::Global) {
    plain_to_global_.insert(c.name);
  }
  if (global) {
    const bool input = is_input(c.name) && !is_aux(c.name);
    if (c.to == Space::Global && input) {
      error(s, "TL0406", s.loc, "'" + c.name + "' is a kernel input; it is never written",
            backward() ? "a backward kernel stores dQ, dK and dV" : "only O and LSE are stored to global");
      ok = false;
    }
    if (c.from == Space::Global && !input) {
      error(s, "TL0406", s.loc, "'" + c.name + "' is a kernel output; it is never read from global",
            "keep the running value in registers (e.g. `Allocate O in register (BM, d) fp32 init 0`)");
      ok = false;
    }
  }
  if (!ok || !src || !dst) {
    poisoned.insert(&s);
    if (dst && c.to != Space::Global) write_full(c.name, c.to);
    return;
  }
  Buffer* lb = global ? buffer(c.name, local) : dst;
  if (global) {
    if (c.tile.empty()) {
      error(s, "TL0404", s.loc, "a Copy " + std::string(c.from == Space::Global ? "from" : "to") + " global names its tile",
            "write `Copy " + c.name + " " + fmt_shape(lb->shape) + " in coordinate [...] from " + route + "`");
    } else if (c.tile.size() != g->shape.size() || c.coord.size() != c.tile.size()) {
      error(s, "TL0404", s.loc,
            "tile " + fmt_shape(c.tile) + " with " + std::to_string(c.coord.size()) + " coordinates does not match global '" +
                c.name + "' " + fmt_shape(g->shape),
            "give one tile extent and one coordinate per global dimension: `Copy " + c.name + " " + fmt_shape(lb->shape) +
                " in coordinate [...] from " + route + "`");
    } else if (c.tile.size() == 2 && g->shape.size() == 2 && c.tile[0] == g->shape[1] && !(c.tile[1] == g->shape[1]) &&
               !(c.tile[0] == g->shape[0])) {
      std::vector<Expr> fixed = {c.tile[1], c.tile[0]};
      error(s, "TL0402", s.loc,
            "tile " + fmt_shape(c.tile) + " reads '" + c.name + "' transposed: global " + c.name + " is laid out " +
                fmt_shape(g->shape) + " (one row per token)",
            "copy `" + c.name + " " + fmt_shape(fixed) + "` into a " + fmt_shape(fixed) + " buffer and state the transpose in the GEMM (`" +
                c.name + "^T`)");
    } else if (!same_shape(c.tile, lb->shape)) {
      bool transposed = c.tile.size() == 2 && lb->shape.size() == 2 && c.tile[0] == lb->shape[1] && c.tile[1] == lb->shape[0];
      if (transposed) {
        error(s, "TL0402", s.loc,
              "tile " + fmt_shape(c.tile) + " is the transpose of " + c.name + "'s " + to_string(local) + " buffer " +
                  fmt_shape(lb->shape) + "; buffers keep the global tensor's row-major layout",
              "allocate `" + c.name + " in " + to_string(local) + " " + fmt_shape(c.tile) + "` and write the transpose in the GEMM (`" +
                  c.name + "^T`)");
      } else {
        error(s, "TL0404", s.loc,
              "tile " + fmt_shape(c.tile) + " differs from " + c.name + "'s " + to_string(local) + " buffer " + fmt_shape(lb->shape),
              "copy a " + fmt_shape(lb->shape) + " tile, or allocate the buffer as " + fmt_shape(c.tile));
      }
    }
  } else {
    const std::vector<Expr>& want = c.tile.empty() ? src->shape : c.tile;
    if (!c.tile.empty() && c.coord.size() != c.tile.size()) {
      error(s, "TL0404", s.loc, "tile " + fmt_shape(c.tile) + " needs " + std::to_string(c.tile.size()) + " coordinates",
            "write `in coordinate [r, c]`, or copy the whole buffer: `Copy " + c.name + " from " + route + "`");
    } else if (!same_shape(want, dst->shape)) {
      bool transposed = want.size() == 2 && dst->shape.size() == 2 && want[0] == dst->shape[1] && want[1] == dst->shape[0];
      error(s, transposed ? "TL0402" : "TL0404", s.loc,
            std::string(c.tile.empty() ? "source buffer " : "tile ") + fmt_shape(want) +
                (transposed ? " is the transpose of " : " differs from ") + c.name + "'s " + to_string(c.to) + " buffer " +
                fmt_shape(dst->shape),
            transposed ? "buffers keep the global row-major layout: allocate `" + c.name + " in " + to_string(c.to) + " " +
                             fmt_shape(want) + "` and write the transpose in the GEMM (`" + c.name + "^T`)"
                       : "give both buffers the same shape " + fmt_shape(want));
    }
  }
  if (!(c.from == Space::Global)) read(c.name, c.from, s.loc, s);
  if (backward()) {
    if (c.from == Space::Global) {
      deps_[c.name] |= grad_input_bit(c.name);
      if (auto w = info_.workspace_deps.find(c.name); w != info_.workspace_deps.end() && workspace_decl_.count(c.name))
        deps_[c.name] |= w->second;  // a workspace derives from what its phase read
    }
    if (phase_ && c.to == Space::Global) info_.workspace_deps[c.name] = deps_.count(c.name) ? deps_[c.name] : 0;
    if (c.to == Space::Global && (c.name == "dQ" || c.name == "dK" || c.name == "dV")) check_gradient_flow(s);
  }
  write_full(c.name, c.to);
  if (c.to == Space::Register) {
    if (Buffer* r = buffer(c.name, Space::Register)) r->layout = Layout::Operand;
  }
  if (c.from == Space::Register && c.to == Space::Shared && c.tile.empty())  // the whole register tile, staged
    if (Buffer* r = buffer(c.name, Space::Register)) dst->staged = r->version;
  if (c.to == Space::Global) info_.tensors[c.name].written_to_global = true;
}


// `{pack: G}` (docs/tl.md, "GQA packing"): on the global Allocate of Q, O or LSE only, with a
// compile-time or launch-time integer (Dims, Consts). Consistency across Q, O, LSE and the
// declarations is checked once the whole program is seen (finish_pack). TL0412.
void Walker::check_pack(const Stmt& s, const Attr& a) {
  const SrcLoc at = pick(a.loc, s.loc);
  const bool view = s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Global &&
                    (s.alloc.name == "Q" || s.alloc.name == "O" || s.alloc.name == "LSE" ||
                     (merge_body_ && (s.alloc.name == "O_part" || s.alloc.name == "LSE_part")));  // a Merge reads packed parts
  if (!view) {
    rep_.error("TL0412", at, "`pack` applies to the global Allocate of Q, O or LSE (the views a packed tile reads and writes)",
               "write `Allocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head] {pack: heads_q / heads_kv}` and the "
               "same `{pack: ...}` on O (and LSE); K and V stay per kv head");
    return;
  }
  if (!a.value) {
    rep_.error("TL0412", at, "`pack` needs the number of query heads a tile interleaves",
               "write `{pack: heads_q / heads_kv}`");
    return;
  }
  if (!check_expr(*a.value, Ctx::Static, s)) return;
  if (pack_.count(s.alloc.name)) {
    rep_.error("TL0412", at, "`pack` given twice for '" + s.alloc.name + "'", "keep one `{pack: G}`");
    return;
  }
  pack_[s.alloc.name] = &a;
}

void Walker::finish_pack() {
  if (pack_.empty()) return;
  auto q = pack_.find("Q");
  const Attr* ref = q != pack_.end() ? q->second : pack_.begin()->second;
  const std::string g = fmt_expr(*ref->value);
  for (const char* n : {"Q", "O", "LSE"}) {
    if (!global_alloc_.count(n)) continue;
    auto it = pack_.find(n);
    if (it == pack_.end()) {
      rep_.error("TL0412", global_alloc_.at(n),
                 std::string("global ") + n + " is not packed but " + (q != pack_.end() ? "Q" : pack_.begin()->first) +
                     " is (`{pack: " + g + "}`): the rows of a tile are (query, head) pairs for every view it reads or writes",
                 std::string("add `{pack: ") + g + "}` to the global Allocate of " + n);
    } else if (fmt_expr(*it->second->value) != g) {
      rep_.error("TL0412", pick(it->second->loc, global_alloc_.at(n)),
                 std::string("global ") + n + " is packed by " + fmt_expr(*it->second->value) + " but Q by " + g,
                 "Q, O and LSE interleave the same number of heads: write `{pack: " + g + "}`");
    }
  }
  for (const auto& st : prog_.stmts) {
    if (st.kind != Stmt::Kind::Variant) continue;
    rep_.error("TL0412", st.loc,
               "a Score / Mask declaration in a program with packed views: a packed tile's rows belong to different "
               "query heads, and the declarations bind one `head` per tile",
               "remove `{pack: ...}` (one query head per tile: `Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, ...`)");
    break;
  }
  info_.pack = *ref->value;
}

// A forward program that splits the keys (docs/tl.md, "Splitting the keys"): O and LSE both at
// [batch, split, head] (the combine merges a part's O by its LSE), and `splits` a Dim (the number
// of parts, a launch value). TL0406.
void Walker::finish_split() {
  if (split_outputs_.empty()) return;
  const SrcLoc at = global_alloc_.count("O") ? global_alloc_.at("O") : global_alloc_.at(*split_outputs_.begin());
  for (const char* n : {"O", "LSE"}) {
    if (split_outputs_.count(n)) continue;
    const bool have = global_alloc_.count(n) > 0;
    rep_.error("TL0406", have ? global_alloc_.at(n) : at,
               std::string("global ") + (split_outputs_.count("O") ? "O" : "LSE") + " is a part's result ([batch, split, head]) but " +
                   n + (have ? " is not" : " is never allocated"),
               std::string("the parts are merged by their LSE: write `") + (std::string(n) == "O"
                   ? "Allocate O in global (seqlen_q, d) bf16 with offset [b, s, head]"
                   : "Allocate LSE in global (seqlen_q) fp32 with offset [b, s, head]") + "` and store it");
    return;
  }
  auto dim = syms_.find("splits");
  if (dim == syms_.end() || dim->second.kind != SymKind::Dim) {
    rep_.error("TL0406", at, "O and LSE are written per part of the keys ([batch, split, head]) but the program has no Dim splits",
               "declare the number of parts: `Dim ..., splits` and the Grid axis over them: `Grid ..., s = 0: splits`");
    return;
  }
  const Expr* parts[2] = {nullptr, nullptr};  // the part index of O's and LSE's offsets
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::Allocate && st.alloc.space == Space::Global && st.alloc.offset.size() == 3 &&
        (st.alloc.name == "O" || st.alloc.name == "LSE"))
      parts[st.alloc.name == "LSE"] = &st.alloc.offset[1];
  if (parts[0] && parts[1] && fmt_expr(*parts[0]) != fmt_expr(*parts[1])) {
    rep_.error("TL0406", global_alloc_.at("LSE"),
               "LSE's part index `" + fmt_expr(*parts[1]) + "` is not O's `" + fmt_expr(*parts[0]) +
                   "`: a part's output and its LSE are merged together",
               "index both with the Grid axis over the parts: `with offset [b, split, head]`");
    return;
  }
  info_.split = true;
  if (parts[0]) info_.split_var = *parts[0];
}

}  // namespace qattn::tl::detail
