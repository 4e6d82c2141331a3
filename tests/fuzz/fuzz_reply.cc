// libFuzzer target for what an LLM answers. Input: arbitrary bytes as one reply.
// llm::extract_block for the TL stages and for the CUDA stages, then the TL answer through the
// verifiers of stages 1a and 1b (llm::verify_sketch, llm::verify_code: parse, check, refinement,
// spec agreement, tiles, the interpreter against the reference), against the rules engine's plan
// for llama3-8b on an A100 (the replayed scenarios' request). Nothing may crash, throw or hang;
// verify_cuda is not run (it needs nvcc). No network and no GPU.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "hw/gpu.h"
#include "llm/extract.h"
#include "llm/verify.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace {

const qattn::plan::Plan& rules() {
  static const qattn::plan::Plan plan = [] {
    using namespace qattn;
    support::DiagSink d;
    const spec::AttentionSpec* s = spec::find_preset("llama3-8b");
    const hw::GpuFacts* g = hw::find_gpu("a100");
    std::optional<plan::Plan> p;
    if (s && g) p = plan::make_plan(*s, *g, d);
    if (!p) {
      fprintf(stderr, "fuzz_reply: no rules plan for llama3-8b on a100:\n%s", d.render().c_str());
      std::abort();
    }
    return *p;
  }();
  return plan;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qattn;
  const plan::Plan& r = rules();
  std::string_view reply(reinterpret_cast<const char*>(data), size);
  support::DiagSink d0;
  auto tl = llm::extract_block(reply, {"tl"}, d0);
  auto cuda = llm::extract_block(reply, {"cuda", "cu", "cpp", "c++"}, d0);
  (void)cuda;
  if (tl) {
    support::DiagSink d1("sketch.tl");
    llm::verify_sketch(*tl, r.problem, &r.code, d1);
    support::DiagSink d2("code.tl");
    llm::verify_code(*tl, r.sketch, r, /*translate_too=*/false, d2);
    (void)d1.render();
    (void)d2.render();
  }
  (void)d0.render();
  return 0;
}
