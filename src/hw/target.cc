// Target-aware checks of an AttentionSpec against GpuFacts, and choosing the target GPU.
#include "hw/target.h"

namespace qattn::hw {

using spec::DType;

namespace {

// "L40S/RTX 4090/H100 SXM/..." : the table's GPUs that have a tensor-core path for `t`.
std::string gpus_with(DType t) {
  std::vector<std::string> v;
  for (const auto& g : gpus())
    if (g.supports(t)) v.push_back(g.name);
  return spec::join(v, "/");
}

std::vector<std::string> dtypes_of(const GpuFacts& g) {
  std::vector<std::string> v;
  for (const auto& [t, instrs] : g.mma) v.push_back(spec::to_string(t));
  return v;
}

std::string arch_word(const GpuFacts& g) {
  if (g.sm >= 90) return "Hopper";
  if (g.sm == 89) return "Ada";
  if (g.sm >= 80) return "Ampere";
  if (g.sm == 75) return "Turing";
  return g.arch;
}

}  // namespace

bool validate_for_gpu(const spec::AttentionSpec& s, const GpuFacts& gpu, DiagSink& diags,
                      const spec::SourceMap* where) {
  int before = diags.error_count();
  support::SrcLoc loc = where ? where->at("/dtype") : support::SrcLoc{};
  std::string on = std::string(spec::to_string(s.dtype)) + " on " + gpu.name + " (" + gpu.arch + "): the " +
                   arch_word(gpu) + " tensor cores have no " + spec::to_string(s.dtype) + " path";
  if (!gpu.supports(s.dtype)) {
    if (s.dtype == DType::BF16) {
      diags.error("SPEC0230", loc, on + "; available on " + gpu.name + ": " + gpu.dtypes_supported(),
                  "use \"dtype\": \"fp16\" (--dtype fp16), or target a GPU with bf16: " + gpus_with(DType::BF16));
    } else if (s.dtype == DType::F8E4M3) {
      diags.error("SPEC0231", loc,
                  on + "; use " + gpu.dtypes_supported() + " or target " + gpus_with(DType::F8E4M3),
                  "set \"dtype\" to " + spec::join(dtypes_of(gpu), " or ") +
                      " (--dtype), or \"gpu\" to an sm89/sm90 GPU (--gpu l40s, --gpu h100)");
    } else {
      diags.error("SPEC0232", loc, on + "; available: " + gpu.dtypes_supported(),
                  "choose a dtype from: " + gpu.dtypes_supported());
    }
  }
  if (s.split_keys && gpu.sm < 90)
    diags.error("SPEC0233", where ? where->at("/split_keys") : support::SrcLoc{},
                "split_keys on " + gpu.name + " (" + gpu.arch + "): the split is lowered for Hopper's kernels (sm90) only",
                "target an H100 / H200 (--gpu h100), or leave split_keys out (qattn.attention_with_kvcache splits on other "
                "GPUs by folding the parts into the batch)");
  return diags.error_count() == before;
}

const GpuFacts* resolve_target(const spec::AttentionSpec& s, DiagSink& diags, std::string* note) {
  if (!s.gpu.empty()) {
    const GpuFacts* g = find_gpu(s.gpu, diags);
    if (g && note) *note = "from the spec (\"" + s.gpu + "\")";
    return g;
  }
  std::string why;
  auto local = detect_local_gpu(&why);
  if (!local) {
    diags.error("HW0202", support::SrcLoc{}, "no target GPU: the spec names none and no GPU was detected (" + why + ")",
                "set \"gpu\" in the spec or pass --gpu NAME (e.g. h100, a100, l40s, t4); `qattn gpus` lists them");
    return nullptr;
  }
  if (!local->facts) {
    diags.error("HW0203", support::SrcLoc{},
                "the local GPU \"" + local->name + "\" (compute capability " + std::to_string(local->cc_major) + "." +
                    std::to_string(local->cc_minor) + ") is not in the GPU table",
                "pass --gpu NAME to generate for a known GPU: " + spec::join(gpu_names()));
    return nullptr;
  }
  if (note) *note = "detected: " + local->name + " -> " + local->facts->name + " (matched by " + local->match + ")";
  return local->facts;
}

}  // namespace qattn::hw
