// The built-in attention variants of an AttentionSpec (spec.h `Variants`) as data the other stages
// share: the auxiliary input tensors each needs (names, shapes, dtypes: the kernel's `aux[]`
// arguments, in order), and the reference's score modification / extra mask written directly in
// C++ from the formulas of docs/spec.md ("Variants") — independently of the TL declarations the
// planner writes, so the interpreter checks those declarations against something else.
// Custom score_mod / mask_mod text is TL; the spec library does not parse TL, so it cannot give
// their reference (reference_variant returns nullopt: the interpreter then evaluates the program's
// own declarations, docs/tl.md).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "spec/reference.h"
#include "spec/spec.h"

namespace qattn::spec {

// One auxiliary input of a variant: a full, row-major, contiguous global tensor without offset.
struct AuxInput {
  std::string name;                // TL name: alibi_slopes, seg_q, seg_k, rel_bias
  std::vector<std::string> shape;  // TL dimension names: heads_q, batch, seqlen_q, seqlen_k, NB
  bool is_int = false;             // int32 (segment ids) or fp32
  std::string meaning;             // one line for docs and generated comments
};

// The auxiliary inputs of `v`, in the order the kernel takes them (at most 4: alibi_slopes,
// seg_q, seg_k, rel_bias; that is the C ABI's aux[0..3]).
std::vector<AuxInput> aux_inputs(const Variants& v);

// The fixed order in which score modifications apply (docs/spec.md): "alibi", "relpos",
// "score_mod", "softcap" (the TL Score names), filtered to those `v` has. Masks: "prefix_lm",
// "document", "mask_mod", after the kernel's own mask.
std::vector<std::string> score_order(const Variants& v);
std::vector<std::string> mask_order(const Variants& v);

// The reference's score modification and extra mask for the built-in variants of `v`, reading
// the auxiliary tensors from `aux` (by the names above; the interpreter makes them with
// random_aux) and seqlen_q / seqlen_k from `p`. nullopt when `v` has a custom score_mod or
// mask_mod (their meaning is TL text), or when a needed auxiliary tensor is missing from `aux`
// or has the wrong rank. An empty ScoreVariant when `v` has no variant.
std::optional<ScoreVariant> reference_variant(const Variants& v, const AttentionProblem& p, const AuxMap& aux);
inline std::optional<ScoreVariant> reference_variant(const AttentionSpec& s, const AttentionProblem& p,
                                                     const AuxMap& aux) {
  return reference_variant(s.variants, p, aux);
}

}  // namespace qattn::spec
