// Backward programs: the gradients of auxiliary inputs, TL `Compute Gradient dS, S0 and accumulate
// dT at [r, c] with NAME` (docs/tl.md, "The backward pass"; lower_impl.h, AuxGrad). Each thread sums
// dS * d NAME / d T over its elements and over the loop, and the block adds its sums to dT once at
// its end (device/qattn/backward.cuh: grad_sum and add_grad_uniform where NAME reads T at an index
// the element does not change, grad_table and add_grad_table where the index's last component
// depends on the element, through a table of E floats in shared memory).
#include <cmath>

#include "backend/bwd/lower_impl.h"
#include "tl/printer.h"
#include "tl/variant.h"

namespace qattn::backend::bwd::detail {
namespace {

// A derivative that is finite wherever it is evaluated (+ - * of names and literals, abs / min / max /
// clamp; not `score`, which a program may have masked to -inf before the Modify, nor `inf`): a masked
// element's dS = 0 then adds 0 without a test (the device helpers' SAFE).
bool finite(const tl::Expr& e) {
  switch (e.kind) {
    case tl::Expr::Kind::Number: return std::isfinite(e.value);
    case tl::Expr::Kind::Name: return e.name != "score" && e.name != "inf";
    case tl::Expr::Kind::Unary: return e.op == "-" && finite(e.args[0]);
    case tl::Expr::Kind::Binary:
      return (e.op == "+" || e.op == "-" || e.op == "*") && finite(e.args[0]) && finite(e.args[1]);
    case tl::Expr::Kind::Call:
      if (!(e.name == "abs" || e.name == "min" || e.name == "max" || e.name == "clamp")) return false;
      for (const auto& a : e.args)
        if (!finite(a)) return false;
      return true;
    default: return false;  // an auxiliary read: its values are the caller's
  }
}

bool reads_element(const tl::Expr& e) {
  if (e.kind == tl::Expr::Kind::Name && (e.name == "q_idx" || e.name == "kv_idx" || e.name == "score")) return true;
  for (const auto& a : e.args)
    if (reads_element(a)) return true;
  return false;
}

}  // namespace

const AuxGrad* Lower::aux_grad(const std::string& name) const {
  for (const auto& g : aux_grads_)
    if (g.name == name) return &g;
  return nullptr;
}

// One Gradient statement per dT; the index's components before the last read no element (the
// block's head, batch); the last may, with a compile-time extent of at most 4096 (its table).
bool Lower::plan_aux_grads(int64_t& smem_off) {
  bool ok = true;
  walk(prog_.stmts, [&](const Stmt& s) {
    if (!ok || s.kind != Stmt::Kind::Compute || s.compute.op != "Gradient") return;
    const auto& c = s.compute;
    const auto slot = std::find(info_.aux_grads.begin(), info_.aux_grads.end(), c.target);
    if (slot == info_.aux_grads.end() || !info_.variants.count(c.mask.name)) {
      ok = fail("XL0301", s.loc, "Compute Gradient into '" + c.target + "', which is not the gradient of an auxiliary input", "");
      return;
    }
    if (aux_grad(c.target)) {
      ok = fail("XL0301", s.loc, "a second Compute Gradient into " + c.target + " is not lowered",
                "accumulate each gradient by one statement");
      return;
    }
    AuxGrad g;
    g.name = c.target;
    g.input = c.target.substr(1);
    g.score = c.mask.name;
    g.slot = int(slot - info_.aux_grads.begin());
    std::string why;
    auto d = tl::derive_aux(info_.variants.at(g.score).expr, g.input, why);
    if (!d) {
      ok = fail("XL0301", s.loc, "Score '" + g.score + "' has no derivative in " + g.input + ": " + why, "");
      return;
    }
    g.index = d->index;
    g.derivative = d->derivative;
    const auto& shape = info_.tensors.at(g.input).global_shape;
    if (shape.size() != g.index.size() || shape.empty()) {
      ok = fail("XL0301", s.loc, g.input + " is read with " + std::to_string(g.index.size()) + " indices", "");
      return;
    }
    for (size_t i = 0; i + 1 < g.index.size(); ++i)
      if (reads_element(g.index[i])) {
        ok = fail("XL0301", s.loc, "Compute Gradient: " + g.input + "'s index " + tl::print_expr(g.index[i]) +
                                       " depends on the element, and only its last component may",
                  "lay the element-dependent index out last (e.g. T[head, bucket])");
        return;
      }
    g.table = reads_element(g.index.back());
    if (g.table) {
      auto e = eval(shape.back(), s.loc, "the last extent of " + g.input + " (its gradient's shared table)");
      if (!e) { ok = false; return; }
      if (*e < 1 || *e > 4096) {
        ok = fail("XL0301", s.loc, "the gradient table of " + g.input + " would have " + std::to_string(*e) + " entries",
                  "an index whose last component depends on the element takes a table of 1 to 4096 entries");
        return;
      }
      g.extent = *e;
      g.offset = smem_off;
      smem_off += (g.extent * 4 + 127) / 128 * 128;
    }
    aux_grads_.push_back(std::move(g));
  });
  if (!ok) return false;
  for (const auto& n : info_.aux_grads)
    if (!aux_grad(n)) return fail("XL0301", kernel_stmt_->loc, "the gradient " + n + " is never accumulated", "");
  return true;
}

// At the Score NAME's declaration: d NAME / d T and where NAME reads T, for each gradient it feeds.
void Lower::aux_grad_lambdas(Out& w, const std::string& score) {
  for (const auto& g : aux_grads_) {
    if (g.score != score) continue;
    DeclType t;
    const std::string body = names_.decl_expr(g.derivative, t);
    w.line("[[maybe_unused]] auto dgrad_" + id(g.name) + " = [&](float score, int q_idx, int kv_idx) -> float { return " +
           (t == DeclType::Float ? body : "float(" + body + ")") + "; };  // d " + score + " / d " + g.input + ": " +
           tl::print_expr(g.derivative));
    const auto& ext = names_.aux_extents.at(g.input);
    auto clamp = [&](const tl::Expr& e, const std::string& n) {
      DeclType it;
      return "min(max(int(" + names_.decl_expr(e, it) + "), 0), int(" + n + ") - 1)";
    };
    // the flat index of the components before the last (times the last extent), and the last
    std::string base = "int64_t(0)";
    for (size_t i = 0; i + 1 < g.index.size(); ++i) base = "(" + base + ") * (" + ext[i] + ") + " + clamp(g.index[i], ext[i]);
    base = "(" + base + ") * (" + ext.back() + ")";
    if (g.table) {
      w.line("[[maybe_unused]] auto gbase_" + id(g.name) + " = [&]() -> int64_t { return " + base + "; };");
      // a tile whose elements all read one entry (the bucket's interval bounds meet: far from the diagonal)
      std::string one = "false";
      if (auto b = tl::index_bounds(g.index.back())) {
        DeclType lt, ht;
        one = "(" + names_.decl_expr(b->first, lt) + ") == (" + names_.decl_expr(b->second, ht) + ")";
      }
      w.line("[[maybe_unused]] auto gone_" + id(g.name) + " = [&](int q_lo, int q_hi, int kv_lo, int kv_hi) -> bool { return " + one +
             "; };");
      w.line("[[maybe_unused]] auto gbucket_" + id(g.name) + " = [&](int q_idx, int kv_idx) -> int { return " +
             clamp(g.index.back(), std::to_string(g.extent)) + "; };  // " + g.input + "[.., " + tl::print_expr(g.index.back()) + "]");
    } else {
      w.line("[[maybe_unused]] auto gbase_" + id(g.name) + " = [&]() -> int64_t { [[maybe_unused]] const int q_idx = 0, kv_idx = 0; return " + base +
             " + " + clamp(g.index.back(), ext.back()) + "; };  // " + g.input + "[" + [&] {
               std::string i;
               for (const auto& e : g.index) i += (i.empty() ? "" : ", ") + tl::print_expr(e);
               return i;
             }() + "]");
    }
  }
}

// At dT's Allocate: its pointer (ABI 9: daux[slot]) and the block's sums (a register, or the table
// zeroed before any thread adds to it).
void Lower::aux_grad_init(Out& w, const AuxGrad& g) {
  w.line("float* __restrict__ g_" + id(g.name) + " = p.daux[" + std::to_string(g.slot) + "];  // the gradient of " + g.input +
         " (fp32, zero at launch): this block adds its sums at its end");
  if (!g.table) {
    w.line("float acc_" + id(g.name) + " = 0.f;  // this thread's share of " + g.name + " over the loop");
    return;
  }
  w.line("float* table_" + id(g.name) + " = reinterpret_cast<float*>(smem + " + std::to_string(g.offset) + ");  // " + g.name +
         "'s entries of this block (" + std::to_string(g.extent) + ")");
  w.line("for (int e = tid; e < " + std::to_string(g.extent) + "; e += kThreads) table_" + id(g.name) + "[e] = 0.f;");
  w.line("__syncthreads();");
}

void Lower::gradient(Out& w, const Stmt& s) {
  const auto& c = s.compute;
  const AuxGrad* g = aux_grad(c.target);
  if (!g || c.at.size() != 2 || c.operands.size() != 2) return void(fail("XL0301", s.loc, "Compute Gradient without its form", ""));
  const RegBuf* x = rg(c.operands[0].expr.name, s);
  const RegBuf* y = x ? rg(c.operands[1].expr.name, s) : nullptr;
  if (!x || !y || !same_rows(*x, *y, s)) return;
  const std::string M = std::to_string(x->rows), N = std::to_string(x->cols);
  const bool tr = c.operands[0].transposed;  // keys along the tile's rows: q0 from its columns, k0 from its rows
  const std::string q0 = "(" + cint(c.at[0]) + ") * " + (tr ? N : M), k0 = "(" + cint(c.at[1]) + ") * " + (tr ? M : N);
  const std::string args = "<" + M + ", " + N + (tr ? ", true" : ", false") + (finite(g->derivative) ? ", true" : ", false") + ">(" +
                           mma_of(*x) + ", " + x->var +
                           ", " + y->var + ", " + q0 + ", " + k0 + ", p.seqlen_q, p.seqlen_k, dgrad_" + id(g->name);
  if (g->table)
    w.line("qattn::grad_table" + args + ", gbucket_" + id(g->name) + ", gone_" + id(g->name) + ", table_" + id(g->name) + ", tid);");
  else
    w.line("acc_" + id(g->name) + " += qattn::grad_sum" + args + ", tid);");
}

// The block's end: its sums into dT (a barrier first where they are in shared memory).
void Lower::aux_grad_flush(Out& w) {
  for (const auto& g : aux_grads_) {
    if (g.table) {
      w.line("__syncthreads();  // every thread's additions to table_" + id(g.name));
      w.line("qattn::add_grad_table<" + std::to_string(g.extent) + ", kThreads>(table_" + id(g.name) + ", g_" + id(g.name) +
             ", gbase_" + id(g.name) + "(), tid);");
    } else {
      w.line("qattn::add_grad_uniform(acc_" + id(g.name) + ", g_" + id(g.name) + ", gbase_" + id(g.name) + "());  // one atomic add per warp");
    }
  }
}

}  // namespace qattn::backend::bwd::detail
