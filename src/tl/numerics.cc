// Round-to-nearest-even to the small float formats, done exactly in double arithmetic: the value
// is scaled by a power of two so that the format's quantum becomes 1, rounded to an integer (ties
// to even), and scaled back. Every step is exact in double for the formats here.
#include "tl/numerics.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace qattn::tl {
namespace {

struct Format {
  int mant_bits;      // explicit mantissa bits
  int emin;           // exponent of the smallest normal number
  double min_normal;  // 2^emin
  double max_finite;  // largest finite magnitude
  bool saturate;      // overflow -> max_finite (true) or inf (false)
};

Format format_of(DType t) {
  switch (t) {
    case DType::F32: return {23, -126, 0x1p-126, FLT_MAX, false};
    case DType::F16: return {10, -14, 0x1p-14, 65504.0, false};
    case DType::BF16: return {7, -126, 0x1p-126, 0x1.fep127, false};  // (2 - 2^-7) * 2^127
    case DType::F8E4M3: return {3, -6, 0x1p-6, 448.0, true};
    case DType::F8E5M2: return {2, -14, 0x1p-14, 57344.0, false};
    case DType::I32: break;
  }
  return {52, -1022, DBL_MIN, DBL_MAX, false};
}

// Rounds a non-negative finite y to an integer, ties to even (independent of the FP environment).
double round_half_even(double y) {
  double f = std::floor(y);
  double diff = y - f;  // exact: y and f are within one binade or f is small
  if (diff > 0.5) return f + 1;
  if (diff < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

}  // namespace

double round_to(DType t, double x) {
  if (std::isnan(x)) return x;
  if (t == DType::F32) return static_cast<double>(static_cast<float>(x));  // correctly rounded
  const Format f = format_of(t);
  double a = std::fabs(x);
  double r;
  if (std::isinf(a)) {
    r = a;
  } else if (a == 0) {
    return x;
  } else if (a >= f.min_normal && f.mant_bits < 52) {
    // the target's normal range: round the double's mantissa to mant_bits bits, ties to even, on
    // its bits (a carry moves the exponent up as it should); the same value as the scaling below,
    // without libm calls (the interpreter rounds every element it stores)
    uint64_t b;
    std::memcpy(&b, &a, sizeof b);
    const int drop = 52 - f.mant_bits;
    b += ((uint64_t(1) << (drop - 1)) - 1) + ((b >> drop) & 1);
    b &= ~((uint64_t(1) << drop) - 1);
    std::memcpy(&r, &b, sizeof r);
  } else {
    int e = 0;
    std::frexp(a, &e);   // a = m * 2^e, m in [0.5, 1): the leading bit has exponent e - 1
    int exp = e - 1;
    if (exp < f.emin) exp = f.emin;  // subnormal range: fixed quantum
    int qexp = exp - f.mant_bits;    // quantum 2^qexp
    r = std::ldexp(round_half_even(std::ldexp(a, -qexp)), qexp);
  }
  if (r > f.max_finite) r = f.saturate ? f.max_finite : INFINITY;
  return std::copysign(r, x);
}

double max_finite(DType t) { return format_of(t).max_finite; }

double unit_roundoff(DType t) { return std::ldexp(1.0, -(format_of(t).mant_bits + 1)); }

}  // namespace qattn::tl
