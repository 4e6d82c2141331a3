// Target-aware spec checks: does this AttentionSpec make sense on this GPU (dtype paths of its
// tensor cores, ...), and which GPU is the target (the spec's "gpu", else the detected one).
// Codes: SPEC023x for spec-vs-GPU errors, HW02xx for target resolution.
#pragma once
#include "hw/gpu.h"
#include "spec/spec.h"

namespace qattn::hw {

// Errors for what `gpu` cannot run: SPEC0230 bf16 without a bf16 tensor-core path (Turing),
// SPEC0231 fp8 without an fp8 path (Turing, Ampere). Each names what is available instead and which
// GPUs would run it. Does not repeat spec::validate(). Returns true when there is no error.
bool validate_for_gpu(const spec::AttentionSpec& s, const GpuFacts& gpu, DiagSink& diags,
                      const spec::SourceMap* where = nullptr);

// The target GPU: find_gpu(s.gpu) when the spec names one (HW0201 if unknown), else the local GPU
// (HW0202 when none is detected, with the probe's reason; HW0203 when it is not in the table).
// `note`, if given, says how the target was chosen ("from the spec", "detected: ...").
const GpuFacts* resolve_target(const spec::AttentionSpec& s, DiagSink& diags, std::string* note = nullptr);

}  // namespace qattn::hw
