// Rounding of fp64 values to the storage dtypes of TL buffers (fp32, fp16, bf16, fp8 e4m3/e5m2).
// Used by the interpreter's Storage precision mode. Bit-exact round-to-nearest-even; written
// here (no library conversions other than double -> float for fp32).
#pragma once
#include "tl/ast.h"

namespace qattn::tl {

// Rounds x to the nearest value representable in t (ties to even) and returns it as a double.
//   fp32, fp16, bf16, fp8_e5m2: IEEE behaviour: subnormals kept, overflow -> +-inf, NaN -> NaN.
//   fp8_e4m3 (OCP e4m3fn: bias 7, no inf, max 448): NVIDIA __nv_cvt_float_to_fp8 with
//     __NV_SATFINITE: a result above 448 in magnitude (including +-inf) saturates to +-448;
//     NaN stays NaN.
// Signed zeros are kept.
double round_to(DType t, double x);

// The largest finite value of t (fp32: FLT_MAX, fp16: 65504, bf16: ~3.39e38, e4m3: 448,
// e5m2: 57344).
double max_finite(DType t);

// Unit roundoff of t: 2^-(mantissa bits + 1) (fp32 2^-24, fp16 2^-11, bf16 2^-8, e4m3 2^-4,
// e5m2 2^-3).
double unit_roundoff(DType t);

}  // namespace qattn::tl
