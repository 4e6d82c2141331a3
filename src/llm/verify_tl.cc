// verify_sketch (stage 1a) and verify_code (stage 1b): see verify.h.
#include <functional>
#include <set>

#include "llm/verify.h"
#include "plan/budget.h"
#include "plan/sketch.h"
#include "tl/checker.h"
#include "tl/eval.h"
#include "tl/parser.h"

namespace qattn::llm {
namespace {

using tl::Stmt;

void walk(const std::vector<Stmt>& body, const std::function<void(const Stmt&, int)>& f, int depth = 0) {
  for (const auto& s : body) {
    f(s, depth);
    if (s.kind == Stmt::Kind::For) walk(s.loop.body, f, depth + 1);
  }
}

const Stmt* kernel_stmt(const tl::Program& p) {
  for (const auto& s : p.stmts)
    if (s.kind == Stmt::Kind::Kernel) return &s;
  return nullptr;
}

std::string mask_name(tl::MaskSpec::Kind k) { return tl::to_string(k); }

bool is_backward(const tl::Program& prog) {
  const Stmt* k = kernel_stmt(prog);
  return k && k->kernel.backward;
}

bool check_kernel_mask(const tl::Program& prog, const plan::Problem& p, const char* code, support::DiagSink& diags,
                       bool backward = false) {
  const Stmt* k = kernel_stmt(prog);
  const std::string form = backward ? " backward" : "";
  if (!k) {
    diags.error(code, {}, "the program has no `Kernel NAME" + form + " with mask M` header",
                "start with `Kernel flash_" + std::string(backward ? "bwd" : "fwd") + form + " with mask " +
                    mask_name(p.mask) + "`");
    return false;
  }
  if (k->kernel.backward != backward) {
    diags.error(code, k->loc,
                backward ? "the Kernel header does not say `backward`, and the request is the backward pass (dQ, dK, dV)"
                         : "the Kernel header says `backward`, and the request is the forward pass",
                "write `Kernel " + k->kernel.name + form + " with mask " + mask_name(p.mask) + "`");
    return false;
  }
  if (k->kernel.mask.kind != p.mask) {
    diags.error(code, k->loc,
                "the Kernel header says `with mask " + mask_name(k->kernel.mask.kind) + "` but the spec asks for mask " +
                    mask_name(p.mask),
                "write `Kernel " + k->kernel.name + " with mask " + mask_name(p.mask) + "`");
    return false;
  }
  return true;
}

// The backward sketch's shape: the tensors in and out, one loop over the query tiles, the five GEMMs
// and the D term of dS = P * (dP - D).
bool backward_sketch_shape(const tl::Program& prog, support::DiagSink& local) {
  int loops = 0, gemms = 0, rowsums = 0, d_term = 0;
  std::set<std::string> in, out;
  walk(prog.stmts, [&](const Stmt& s, int) {
    if (s.kind == Stmt::Kind::For) ++loops;
    if (s.kind == Stmt::Kind::Compute && s.compute.op == "GEMM") ++gemms;
    if (s.kind == Stmt::Kind::Compute && s.compute.op == "RowSum") ++rowsums;
    if (s.kind == Stmt::Kind::Compute && s.compute.op == "Subtract" && !s.compute.operands.empty() &&
        s.compute.operands[0].expr.name == "dP")
      ++d_term;
    if (s.kind == Stmt::Kind::Copy && s.copy.from == tl::Space::Global) in.insert(s.copy.name);
    if (s.kind == Stmt::Kind::Copy && s.copy.to == tl::Space::Global) out.insert(s.copy.name);
  });
  bool ok = true;
  auto need = [&](bool have, const std::string& what, const std::string& hint) {
    if (have) return;
    local.error("LLM0301", {}, "the backward sketch does not " + what, hint);
    ok = false;
  };
  std::string missing_in, missing_out;
  for (const char* n : {"Q", "K", "V", "O", "dO", "LSE"})
    if (!in.count(n)) missing_in += std::string(missing_in.empty() ? "" : ", ") + n;
  for (const char* n : {"dQ", "dK", "dV"})
    if (!out.count(n)) missing_out += std::string(missing_out.empty() ? "" : ", ") + n;
  need(missing_in.empty(), "copy " + missing_in + " from global memory",
       "K and V before the loop (`Copy K from global to shared`), Q, dO, O and LSE in it");
  need(missing_out.empty(), "store " + missing_out + " to global memory",
       "`Copy dQ from register to global and accumulate` in the loop; dK and dV after it");
  need(loops == 1, "have exactly one loop over the query tiles (it has " + std::to_string(loops) + ")",
       "write `for i = 0: M` ... `end` around the per-query-tile work");
  need(gemms == 5, "have the five GEMMs of the backward (it has " + std::to_string(gemms) + ")",
       "S = Q K^T, dV += Pc^T dO, dP = dO V^T, dK += dSc^T Q, dQ = dSc K");
  need(rowsums >= 1 && d_term >= 1, "compute the D term of dS = P * (dP - D), D = rowsum(dO * O)",
       "`Compute Multiply dO, O and get dOO`, `Compute RowSum dOO and get Di`, `Compute Subtract dP, Di and get dS`, "
       "then `Compute Multiply dS, P`");
  return ok;
}

}  // namespace

bool verify_sketch(const std::string& text, const plan::Problem& p, const std::string* rules_code, support::DiagSink& diags,
                   bool backward) {
  support::DiagSink local("sketch.tl");
  auto prog = tl::parse(text, local, "sketch.tl");
  bool ok = !local.has_errors();
  if (ok) ok = check_kernel_mask(prog, p, "LLM0301", local, backward);
  if (ok && backward) {
    ok = backward_sketch_shape(prog, local);
  } else if (ok) {
    int loops = 0, gemms = 0, normalize = 0;
    bool q_in = false, k_in = false, v_in = false, o_out = false;
    walk(prog.stmts, [&](const Stmt& s, int) {
      if (s.kind == Stmt::Kind::For) ++loops;
      if (s.kind == Stmt::Kind::Compute && s.compute.op == "GEMM") ++gemms;
      if (s.kind == Stmt::Kind::Compute && s.compute.op == "Normalize") ++normalize;
      if (s.kind == Stmt::Kind::Copy && s.copy.from == tl::Space::Global) {
        q_in |= s.copy.name == "Q";
        k_in |= s.copy.name == "K";
        v_in |= s.copy.name == "V";
      }
      if (s.kind == Stmt::Kind::Copy && s.copy.to == tl::Space::Global && s.copy.name == "O") o_out = true;
    });
    auto need = [&](bool have, const std::string& what, const std::string& hint) {
      if (have) return;
      local.error("LLM0301", {}, "the sketch does not " + what, hint);
      ok = false;
    };
    need(q_in && k_in && v_in, "copy Q, K and V from global memory",
         "write `Copy Q from global to shared` (and the same for K and V, inside the loop)");
    need(o_out, "store O to global memory", "end with `Copy O from register to global`");
    need(loops == 1, "have exactly one loop over the K/V tiles (it has " + std::to_string(loops) + ")",
         "write `for j = 0: N` ... `end` around the K/V work");
    need(gemms == 2, "have the two GEMMs of attention (it has " + std::to_string(gemms) + ")",
         "`Compute GEMM Q, K^T and get S` and `Compute GEMM P, V and accumulate O`");
    need(normalize >= 1, "normalize O by the softmax denominator", "add `Compute Normalize O, l` after the loop");
  }
  if (ok && rules_code) {
    // Stage 1b runs on the rules engine: its TL code must refine this sketch.
    support::DiagSink inner("code.tl");
    auto code = tl::parse(*rules_code, inner, "code.tl");
    if (!plan::refines(prog, code, inner)) {
      for (auto d : inner.all()) {
        d.message = "the rules engine's stage 1b cannot complete this sketch: " + d.message;
        d.hint = "with --mode 1b=rules the sketch must have the statements of the rules engine's sketch, in order";
        local.add(d);
      }
      ok = false;
    }
  }
  for (const auto& d : local.all()) diags.add(d);
  return ok && !local.has_errors();
}

std::optional<plan::Plan> verify_code(const std::string& text, const std::string& sketch, const plan::Plan& rules,
                                      bool translate_too, support::DiagSink& diags) {
  support::DiagSink local("code.tl");
  auto finish = [&](bool ok) {
    for (const auto& d : local.all()) diags.add(d);
    return ok && !local.has_errors();
  };
  auto fail = [&]() -> std::optional<plan::Plan> {
    finish(false);
    return std::nullopt;
  };
  auto prog = tl::parse(text, local, "code.tl");
  if (local.has_errors()) return fail();
  tl::CheckInfo info;
  tl::check(prog, local, {}, info);
  if (local.has_errors()) return fail();
  {
    support::DiagSink inner("code.tl");
    auto sk = tl::parse(sketch, inner, "sketch.tl");
    if (!plan::refines(sk, prog, local)) return fail();
  }
  const plan::Problem& p = rules.problem;
  support::DiagSink quiet("rules.tl");
  const bool backward = is_backward(tl::parse(rules.code, quiet, "rules.tl"));
  if (!check_kernel_mask(prog, p, "LLM0302", local, backward)) return fail();

  // The spec's dtypes, head dims and LSE.
  tl::Env env;
  for (const auto& s : prog.stmts) {
    if (s.kind == Stmt::Kind::Dim)
      for (const auto& it : s.dim.items)
        if (it.value)
          if (auto v = tl::eval_int(*it.value, env)) env.ints[it.name] = *v;
    if (s.kind == Stmt::Kind::Const)
      for (const auto& it : s.cnst.items)
        if (auto v = tl::eval_int(it.value, env)) env.ints[it.name] = *v;
  }
  auto spec_error = [&](const std::string& msg, const std::string& hint) { local.error("LLM0302", {}, msg, hint); };
  auto tensor = [&](const char* n) -> const tl::TensorInfo* {
    auto it = info.tensors.find(n);
    return it == info.tensors.end() || !it->second.in_global ? nullptr : &it->second;
  };
  const tl::TensorInfo* q = tensor("Q");
  const tl::TensorInfo* v = tensor("V");
  const tl::TensorInfo* o = tensor("O");
  if (q && q->global_dtype != p.dtype)
    spec_error(std::string("Q is ") + tl::to_string(q->global_dtype) + " but the spec's dtype is " + tl::to_string(p.dtype),
               std::string("allocate Q, K and V in global as ") + tl::to_string(p.dtype));
  if (o && o->global_dtype != p.out_dtype)
    spec_error(std::string("O is ") + tl::to_string(o->global_dtype) + " but the output dtype is " + tl::to_string(p.out_dtype),
               std::string("allocate O in global as ") + tl::to_string(p.out_dtype));
  auto head_dim = [&](const tl::TensorInfo* t, int want, const char* name) {
    if (!t || t->global_shape.size() != 2) return;
    auto d = tl::eval_int(t->global_shape[1], env);
    if (!d)
      spec_error(std::string("the head dim of ") + name + " is not fixed", "declare it as a fixed Dim, e.g. `Dim ..., d = " +
                                                                               std::to_string(want) + "`");
    else if (*d != want)
      spec_error(std::string("the head dim of ") + name + " is " + std::to_string(*d) + " but the spec's is " +
                     std::to_string(want),
                 "fix the Dim: `d = " + std::to_string(want) + "`");
  };
  head_dim(q, p.d_qk, "Q");
  head_dim(v, p.d_v, "V");
  if (!backward && (tensor("LSE") != nullptr) != p.return_lse)
    spec_error(p.return_lse ? "the spec asks for the LSE output but the program does not store LSE"
                            : "the program stores LSE but the spec does not ask for it",
               p.return_lse ? "allocate LSE in global (seqlen_q) fp32 with offset [b, head] and store it" : "drop LSE");
  if (local.has_errors()) return fail();

  // Tiles: the Consts BM, BN (WARPS, STAGES when stated) must fit the target.
  plan::Plan out = rules;
  out.sketch = sketch;
  out.code = text;
  auto get = [&](const char* n, int dflt) {
    auto it = env.ints.find(n);
    return it == env.ints.end() ? dflt : static_cast<int>(it->second);
  };
  out.tiles.bm = get("BM", 0);
  out.tiles.bn = get("BN", 0);
  out.tiles.warps = get("WARPS", 4);
  out.tiles.stages = get("STAGES", 1);
  out.tiles.reason = "chosen by the LLM (stage 1b)";
  if (out.tiles.bm <= 0 || out.tiles.bn <= 0) {
    spec_error("the TL code does not declare its tile sizes as `Const BM = ..., BN = ...`",
               backward ? "declare `Const BM = 64, BN = 64, WARPS = 4` (values for this GPU)"
                        : "declare `Const BM = 128, BN = 64, WARPS = 4, STAGES = 1` (values for this GPU)");
    return fail();
  }
  out.budget = backward ? plan::backward_budget(p, rules.target, out.tiles) : plan::estimate(p, rules.target, out.tiles);
  if (!out.budget.fits) {
    spec_error("tiles BM=" + std::to_string(out.tiles.bm) + " BN=" + std::to_string(out.tiles.bn) + " WARPS=" +
                   std::to_string(out.tiles.warps) + " STAGES=" + std::to_string(out.tiles.stages) + " do not fit " +
                   rules.target.name + ": " + out.budget.why_not,
               "choose smaller tiles or fewer stages (the resource model is in docs/planner.md)");
    return fail();
  }
  out.report = "# Plan (stage 1b by the LLM)\n\nTiles BM=" + std::to_string(out.tiles.bm) + ", BN=" +
               std::to_string(out.tiles.bn) + ", warps=" + std::to_string(out.tiles.warps) + ", stages=" +
               std::to_string(out.tiles.stages) + " chosen by the LLM; the resource model estimates " +
               std::to_string(out.budget.smem_bytes) + " bytes of shared memory" +
               (backward ? std::string(".") : " and about " + std::to_string(out.budget.regs_per_thread) + " registers per thread.") +
               "\n\nThe rules engine would choose BM=" +
               std::to_string(rules.tiles.bm) + ", BN=" + std::to_string(rules.tiles.bn) + ", warps=" +
               std::to_string(rules.tiles.warps) + ", stages=" + std::to_string(rules.tiles.stages) + ".\n";

  // The interpreter against the reference, exactly as for the rules engine's code.
  auto verdict = plan::verify(out, local);
  if (!verdict.passed()) {
    if (!local.has_errors())
      local.error("TL0801", {}, "the TL code's output differs from the reference attention at " + verdict.sizes(),
                  verdict.fp64.summary);
    return fail();
  }
  out.report += "\nInterpreted against the reference (fp64 and storage precision) at " + verdict.sizes() + ".\n";
  if (translate_too) {
    support::DiagSink xl("code.tl");
    if (!backend::translate(prog, rules.target, xl)) {
      for (const auto& d : xl.all()) local.add(d);
      return fail();
    }
  }
  if (!finish(true)) return std::nullopt;
  return out;
}

}  // namespace qattn::llm
