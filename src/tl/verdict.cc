// require_finite: see verdict.h.
#include "tl/verdict.h"

#include <cmath>
#include <sstream>
#include <string>

namespace qattn::tl {

bool require_finite(RunResult& r, Precision precision, support::DiagSink& diags) {
  if (!r.ran || !r.passed) return r.passed;
  std::ostringstream bad;
  auto check = [&](const char* name, double x) {
    if (std::isfinite(x)) return;
    bad << (bad.tellp() > 0 ? ", " : "") << name << " " << x;
  };
  check("O max_abs_err", r.max_abs_err);
  check("O rel_err", r.rel_err);
  check("tolerance", r.tolerance);
  check("LSE max_abs_err", r.lse_max_abs_err);
  check("LSE tolerance", r.lse_tolerance);
  if (bad.tellp() == 0) return true;
  r.passed = false;
  const std::string what = std::string(precision == Precision::FP64 ? "fp64" : "storage-precision") +
                           " check: an error or tolerance that is not finite (" + bad.str() + ")";
  r.summary += (r.summary.empty() || r.summary.back() == '\n' ? "" : "\n") + ("FAIL: " + what);
  diags.error("TL0801", {}, "the " + what + " is not a verification",
              "an inf or NaN in the program's output or in the naive attention in the same precision: a value "
              "overflows its dtype (e.g. a score too large for fp32); the kernel would compute it too. Run "
              "`qattn tl run --precision fp64` to compare the algorithm alone");
  return false;
}

}  // namespace qattn::tl
