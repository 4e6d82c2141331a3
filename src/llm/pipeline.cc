// llm::run: the stages of `qattn generate --mode ...` (see pipeline.h). Per stage: render the
// prompt, run the repair loop with the stage's verifier, and fall back to the rules engine when
// the mode allows it.
#include "llm/pipeline.h"

#include <exception>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/arch.h"
#include "llm/prompt.h"
#include "llm/repair.h"
#include "llm/transcript.h"
#include "plan/sketch.h"
#include "tl/parser.h"

namespace qattn::llm {
namespace {

using json = nlohmann::json;

std::string gpu_facts_json(const hw::GpuFacts& g) {
  try {
    auto j = json::parse(hw::gpus_json());
    for (const auto& e : j.at("gpus"))
      if (e.value("name", "") == g.name) return e.dump(2);
  } catch (const std::exception&) {
  }
  return "{\"name\": \"" + g.name + "\", \"arch\": \"" + g.arch + "\"}";
}

std::string tensor_cores(const hw::GpuFacts& g, tl::DType dt) {
  std::ostringstream os;
  os << g.name << " (" << g.arch << "), " << tl::to_string(dt) << " operands:";
  for (const auto& [k, v] : g.mma)
    if (std::string(tl::to_string(dt)) == spec::to_string(k))
      for (const auto& m : v) os << " " << m.text;
  const auto& f = g.features;
  os << "\nfeatures: cp.async " << (f.cp_async ? "yes" : "no") << ", ldmatrix " << (f.ldmatrix ? "yes" : "no")
     << ", wgmma " << (f.wgmma ? "yes" : "no") << ", TMA " << (f.tma ? "yes" : "no") << "\nshared memory per block (opt-in) "
     << g.smem_per_block_optin << " bytes, " << g.regs_per_thread_max << " registers per thread at most";
  return os.str();
}

std::string atoms_text(const plan::Target& t, tl::DType dt) {
  support::DiagSink ignore;
  auto a = backend::choose_arch(t, dt, ignore, {});
  if (!a) return "(the rules translator has no lowering for this target and dtype: choose the atoms yourself)";
  std::ostringstream os;
  os << "lowering: " << a->name << " (element type " << a->element << ")\n"
     << "MMA atom: " << a->mma_atom << " (" << a->mma_instr << ", K = " << a->mma_k << ")\n"
     << "shared->register copy atom (K-major operands): " << a->ldsm_n << "\n";
  if (!a->ldsm_t.empty()) os << "shared->register copy atom (transposed B operand, V): " << a->ldsm_t << "\n";
  os << "global->shared copy: " << (a->cp_async ? "cp.async 16 B (SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>)"
                                                 : "ld.global + st.shared (UniversalCopy<cute::uint128_t>)")
     << "\nReshape MMA_C -> MMA_A: " << a->reshape_fn << " (device/qattn runtime)\n";
  return os.str();
}

// The kernel name, architecture and nvcc flags an LLM-written CUDA file is built with: the rules
// translator's for this TL when it has a lowering, else the target's own gencode.
backend::Translation cuda_meta(const plan::Plan& p, const hw::GpuFacts& g) {
  support::DiagSink ignore;
  if (auto t = backend::translate_text(p.code, p.target, ignore, "code.tl")) return *t;
  backend::Translation t;
  t.kernel_name = plan::kernel_name(p.problem) + "_llm";
  t.arch = g.arch;
  t.nvcc_flags = backend::common_nvcc_flags();
  t.nvcc_flags.push_back(g.nvcc_gencode);
  return t;
}

void demote(const support::DiagSink& from, support::DiagSink& to) {
  for (auto d : from.all()) {
    if (d.severity == support::Severity::Error) d.severity = support::Severity::Warning;
    to.add(d);
  }
}

struct Run {
  const spec::AttentionSpec& s;
  const hw::GpuFacts& g;
  const plan::Plan& rules;
  const Modes& m;
  Client& client;
  const Options& o;
  support::DiagSink& diags;
  Transcript tr;
  PromptVars vars;
  std::string system;
  Result r;
  bool backward = false;  // the rules engine's code is `Kernel NAME backward`: the backward prompts

  void say(const std::string& line) {
    if (o.progress) o.progress(line);
  }

  std::optional<std::vector<Message>> prompt(const std::string& name) {
    auto user = render_template(name, vars, diags);
    if (!user) return std::nullopt;
    return std::vector<Message>{{"system", system}, {"user", *user}};
  }

  // One LLM stage. Returns the verified answer; on failure with fallback allowed, demotes the
  // diagnostics to warnings and returns nullopt with *fell_back = true.
  std::optional<std::string> stage(const std::string& id, const std::string& what, const std::string& tmpl, Engine e,
                                   std::vector<std::string> langs, const Verifier& verify, bool* fell_back) {
    auto& rec = tr.stage(id, to_string(e));
    *fell_back = false;
    say("stage " + id + " (" + what + ") by the LLM (" + client.endpoint().model + ")");
    auto msgs = prompt(tmpl);
    if (!msgs) return std::nullopt;
    StageRequest req{id, what, std::move(*msgs), std::move(langs), o.max_turns};
    support::DiagSink sd;
    auto res = run_stage(client, tr, std::move(req), verify, sd);
    if (res.answer) {
      rec.used = "llm";
      rec.ok = true;
      say("  accepted after " + std::to_string(rec.turns) + " turn(s), " + std::to_string(rec.repairs) + " repair(s)");
      return res.answer;
    }
    if (e == Engine::LlmThenRules) {
      demote(sd, diags);
      rec.used = "rules";
      rec.ok = true;
      rec.note += "; fell back to the rules engine";
      tr.note(id, "fell back to the rules engine");
      say("  the LLM's answer failed: falling back to the rules engine");
      *fell_back = true;
      return std::nullopt;
    }
    for (const auto& d : sd.all()) diags.add(d);
    return std::nullopt;
  }

  void rules_stage(const std::string& id) {
    auto& rec = tr.stage(id, "rules");
    rec.used = "rules";
    rec.ok = true;
  }

  bool run_tl_stages() {
    r.plan = rules;
    bool fb = false;
    // Stage 1a: the sketch.
    if (m.sketch == Engine::Rules) {
      rules_stage("1a");
    } else {
      const std::string* rc = m.params == Engine::Rules ? &rules.code : nullptr;
      auto a = stage("1a", "the TL sketch", backward ? "sketch_backward" : "sketch", m.sketch, {"tl"},
                     [&](const std::string& b, support::DiagSink& d) { return verify_sketch(b, rules.problem, rc, d, backward); },
                     &fb);
      if (!a && !fb) return false;
      if (a) r.plan.sketch = *a;
    }
    vars["sketch"] = r.plan.sketch;
    // Stage 1b: parameters (the TL code).
    if (m.params == Engine::Rules) {
      rules_stage("1b");  // the sketch verifier already checked that the rules code refines it
    } else {
      std::optional<plan::Plan> accepted;
      auto b = stage("1b", "the TL code", backward ? "params_backward" : "params", m.params, {"tl"},
                     [&](const std::string& text, support::DiagSink& d) {
                       accepted = verify_code(text, r.plan.sketch, rules, m.translate == Engine::Rules, d);
                       return accepted.has_value();
                     },
                     &fb);
      if (!b && !fb) return false;
      if (b && accepted) {
        r.plan = *accepted;
      } else if (r.plan.sketch != rules.sketch) {
        // The rules engine's code must refine the LLM's sketch, else the sketch falls back too.
        support::DiagSink inner("code.tl");
        bool ok = plan::refines(tl::parse(r.plan.sketch, inner, "sketch.tl"), tl::parse(rules.code, inner, "code.tl"), inner);
        if (!ok && m.sketch != Engine::LlmThenRules) {
          for (const auto& d : inner.all()) diags.add(d);
          diags.error("LLM0303", {}, "stage 1b fell back to the rules engine, whose TL code does not refine the LLM's sketch",
                      "use --mode 1a=llm+rules (or rules) together with 1b=llm+rules");
          return false;
        }
        if (!ok) {
          r.plan.sketch = rules.sketch;
          tr.stage("1a", "").used = "rules";
          tr.note("1a", "the rules engine's code does not refine the LLM's sketch: the sketch falls back too");
        }
        std::string keep_sketch = r.plan.sketch;
        r.plan = rules;
        r.plan.sketch = keep_sketch;
      }
    }
    vars["code"] = r.plan.code;
    return true;
  }

  bool run_cuda_stage(const std::string& id, const std::string& tmpl, Engine e) {
    const backend::Translation meta = cuda_meta(r.plan, g);
    bool fb = false;
    std::optional<backend::Translation> built;
    auto c = stage(id, id == "vanilla" ? "a CUDA kernel for the spec" : "the CUDA translation of the TL code", tmpl, e,
                   {"cuda", "cu", "cpp", "c++"},
                   [&](const std::string& src, support::DiagSink& d) {
                     say("  compiling the LLM's CUDA (nvcc)...");
                     built = verify_cuda(src, meta, o.cuda, d);
                     return built.has_value();
                   },
                   &fb);
    if (c && built) r.translation = built;
    return c.has_value() || fb;
  }
};

}  // namespace

Result run(const spec::AttentionSpec& s, const hw::GpuFacts& g, const plan::Plan& rules, const Modes& m, Client& client,
           const Options& o, support::DiagSink& diags) {
  Run run{s, g, rules, m, client, o, diags, {}, {}, {}, {}};
  run.tr.set_redactor([&client](std::string x) { return client.redact(std::move(x)); });
  const plan::Problem& p = rules.problem;
  run.vars = {{"spec_json", spec::to_json(s)},
              {"spec_summary", spec::summary(s)},
              {"gpu_name", g.name},
              {"gpu_arch", g.arch},
              {"gpu_facts", gpu_facts_json(g)},
              {"kernel_name", plan::kernel_name(p)},
              {"mask", tl::to_string(p.mask)},
              {"dtype", tl::to_string(p.dtype)},
              {"out_dtype", tl::to_string(p.out_dtype)},
              {"head_dim_qk", std::to_string(p.d_qk)},
              {"head_dim_v", std::to_string(p.d_v)},
              {"lse", p.return_lse ? "yes" : "no"},
              {"tensor_cores", tensor_cores(g, p.dtype)},
              {"atoms", atoms_text(rules.target, p.dtype)},
              {"sketch", rules.sketch},
              {"code", rules.code}};
  {
    support::DiagSink quiet("code.tl");
    const tl::Program rp = tl::parse(rules.code, quiet, "code.tl");
    for (const auto& st : rp.stmts)
      if (st.kind == tl::Stmt::Kind::Kernel && st.kernel.backward) {
        run.backward = true;
        run.vars["kernel_name"] = st.kernel.name;  // the backward kernel's own name (flash_bwd_...)
      }
  }
  if (run.backward && m.llm_writes_cuda()) {
    diags.error("LLM0306", {}, "the LLM writes the backward pass's TL (stages 1a and 1b), not its CUDA",
                "keep stage 2 on the rules translator: --mode 1a=llm,1b=llm (stage 2 defaults to rules)");
    Result r;
    r.plan = rules;
    return r;
  }
  Result& r = run.r;
  r.plan = rules;
  r.vanilla = m.vanilla;
  bool ok = false;
  try {  // an exception ends the stages with a diagnostic; the transcript so far is still returned
    if (auto sys = render_template("system", run.vars, diags)) {
      run.system = *sys;
      if (m.vanilla)
        ok = run.run_cuda_stage("vanilla", "vanilla", Engine::Llm);
      else
        ok = run.run_tl_stages() && (m.translate == Engine::Rules ? (run.rules_stage("2"), true)
                                                                  : run.run_cuda_stage("2", "translate", m.translate));
    }
  } catch (const std::bad_alloc&) {
    ok = false;
    diags.error("LLM0601", {}, "out of memory while verifying an LLM answer; the stages stopped",
                "the answer asks for more memory than this machine gives; see the transcript");
  } catch (const std::exception& e) {
    ok = false;
    diags.error("LLM0601", {}, std::string("internal error while running the LLM stages: ") + e.what(),
                "this is a bug in qattn; please report it with the transcript");
  }
  r.ok = ok && !diags.has_errors();
  r.unverified = r.ok && r.translation && !o.cuda.numerics;
  const Transcript& tr = run.tr;
  r.summary_md = tr.summary_md(client.endpoint(), client.usage(), r.ok, r.unverified);
  r.files = {{"llm/transcript.jsonl", tr.jsonl()},
             {"llm/summary.json", tr.summary_json(client.endpoint(), client.usage(), r.ok, r.unverified)},
             {"llm/summary.md", r.summary_md}};
  return r;
}

}  // namespace qattn::llm
