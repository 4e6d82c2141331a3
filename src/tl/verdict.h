// What an interpreter verdict must also satisfy to mean "verified" (issue 18): a finite error and a
// finite tolerance. tl::run compares with `error <= tolerance`, which holds for inf <= inf: in
// storage precision a dtype overflow (a score too large for fp32, say) makes the program's O and
// the naive attention's O both NaN, so the error and the bound are both inf and the run passed.
// Used by plan::verify (stage 1, rules engine and LLM) and `qattn tl run`.
#pragma once
#include "support/diag.h"
#include "tl/interp.h"

namespace qattn::tl {

// When r ran and passed but one of max_abs_err, rel_err, tolerance, lse_max_abs_err,
// lse_tolerance is inf or NaN: sets r.passed = false, appends the reason to r.summary and reports
// TL0801 naming the values. Returns r.passed.
bool require_finite(RunResult& r, Precision precision, support::DiagSink& diags);

}  // namespace qattn::tl
