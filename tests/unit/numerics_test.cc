// Rounding to the storage dtypes (tl/numerics.h): known values, ties to even, subnormals,
// overflow, fp8 saturation; fp16 and bf16 cross-checked against bit-level conversions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "spec/reference.h"
#include "tl/numerics.h"

namespace qattn::tl {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
double p2(int e) { return std::ldexp(1.0, e); }

TEST(Numerics, Fp32) {
  EXPECT_EQ(round_to(DType::F32, 1.0 + p2(-24)), 1.0);                   // tie -> even
  EXPECT_EQ(round_to(DType::F32, 1.0 + 3 * p2(-24)), 1.0 + p2(-22));     // tie -> even (up)
  EXPECT_EQ(round_to(DType::F32, 1.0 / 3), double(1.0f / 3));
  EXPECT_EQ(round_to(DType::F32, 1e39), kInf);
  EXPECT_EQ(round_to(DType::F32, p2(-149)), p2(-149));                    // smallest subnormal
}

TEST(Numerics, Fp16KnownValues) {
  EXPECT_EQ(round_to(DType::F16, 1.0 + p2(-11)), 1.0);                    // tie -> even (down)
  EXPECT_EQ(round_to(DType::F16, 1.0 + 3 * p2(-11)), 1.0 + p2(-9));       // tie -> even (up)
  EXPECT_EQ(round_to(DType::F16, 1.0 + p2(-11) + p2(-20)), 1.0 + p2(-10));  // above the tie
  EXPECT_EQ(round_to(DType::F16, 65504), 65504);
  EXPECT_EQ(round_to(DType::F16, 65519.99), 65504);
  EXPECT_EQ(round_to(DType::F16, 65520), kInf);                           // tie at the top -> inf
  EXPECT_EQ(round_to(DType::F16, -1e6), -kInf);
  EXPECT_EQ(round_to(DType::F16, p2(-24)), p2(-24));                      // smallest subnormal
  EXPECT_EQ(round_to(DType::F16, p2(-25)), 0.0);                          // tie -> even (0)
  EXPECT_EQ(round_to(DType::F16, 1.5 * p2(-25)), p2(-24));
  EXPECT_EQ(round_to(DType::F16, 3 * p2(-25)), 2 * p2(-24));              // tie 1.5 quanta -> 2
  EXPECT_EQ(round_to(DType::F16, p2(-14) - p2(-25)), p2(-14));            // subnormal rounds up to normal
  EXPECT_EQ(round_to(DType::F16, 0.1), 0.0999755859375);
  EXPECT_TRUE(std::signbit(round_to(DType::F16, -p2(-30))));              // -0 keeps its sign
  EXPECT_TRUE(std::isnan(round_to(DType::F16, std::nan(""))));
  EXPECT_EQ(round_to(DType::F16, kInf), kInf);
}

TEST(Numerics, Bf16KnownValues) {
  EXPECT_EQ(round_to(DType::BF16, 1.0 / 3), 0.333984375);                 // 0x3EAB
  EXPECT_EQ(round_to(DType::BF16, 1.0 + p2(-8)), 1.0);                    // tie -> even
  EXPECT_EQ(round_to(DType::BF16, 1.0 + 3 * p2(-8)), 1.0 + p2(-6));
  EXPECT_EQ(round_to(DType::BF16, 3.39e38), std::ldexp(255.0, 120));       // max finite
  EXPECT_EQ(round_to(DType::BF16, 3.5e38), kInf);
  EXPECT_EQ(round_to(DType::BF16, p2(-133)), p2(-133));                   // smallest subnormal
}

TEST(Numerics, Fp8E4M3) {
  EXPECT_EQ(max_finite(DType::F8E4M3), 448);
  EXPECT_EQ(round_to(DType::F8E4M3, 448), 448);
  EXPECT_EQ(round_to(DType::F8E4M3, 464), 448);    // tie between 448 and (NaN) 480: saturates
  EXPECT_EQ(round_to(DType::F8E4M3, 1000), 448);   // satfinite
  EXPECT_EQ(round_to(DType::F8E4M3, -kInf), -448); // satfinite: inf saturates too
  EXPECT_TRUE(std::isnan(round_to(DType::F8E4M3, std::nan(""))));
  EXPECT_EQ(round_to(DType::F8E4M3, 1.0625), 1.0);    // tie -> even (1.000)
  EXPECT_EQ(round_to(DType::F8E4M3, 1.1875), 1.25);   // tie -> even (1.010)
  EXPECT_EQ(round_to(DType::F8E4M3, p2(-9)), p2(-9)); // smallest subnormal
  EXPECT_EQ(round_to(DType::F8E4M3, p2(-10)), 0.0);   // tie -> 0
  EXPECT_EQ(round_to(DType::F8E4M3, 0.3), 0.3125);
  EXPECT_EQ(round_to(DType::F8E4M3, 5 * p2(-10)), 2 * p2(-9));  // 2.5 quanta -> 2
}

TEST(Numerics, Fp8E5M2) {
  EXPECT_EQ(round_to(DType::F8E5M2, 57344), 57344);
  EXPECT_EQ(round_to(DType::F8E5M2, 61439), 57344);
  EXPECT_EQ(round_to(DType::F8E5M2, 61440), kInf);  // tie at the top -> inf (IEEE-like)
  EXPECT_EQ(round_to(DType::F8E5M2, 1.125), 1.0);   // tie -> even
  EXPECT_EQ(round_to(DType::F8E5M2, 1.375), 1.5);
  EXPECT_EQ(round_to(DType::F8E5M2, p2(-16)), p2(-16));  // smallest subnormal
  EXPECT_EQ(round_to(DType::F8E5M2, p2(-17)), 0.0);
}

TEST(Numerics, UnitRoundoff) {
  EXPECT_EQ(unit_roundoff(DType::F16), p2(-11));
  EXPECT_EQ(unit_roundoff(DType::BF16), p2(-8));
  EXPECT_EQ(unit_roundoff(DType::F8E4M3), p2(-4));
}

// bf16 by bit manipulation of the float: round-to-nearest-even on the top 16 bits.
double bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t lsb = (u >> 16) & 1;
  u += 0x7FFF + lsb;
  u &= 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

TEST(Numerics, Bf16MatchesBitLevelRounding) {
  auto xs = spec::random_normal(20000, 7);
  for (size_t i = 0; i < xs.size(); ++i) {
    float f = float(xs[i] * std::ldexp(1.0, int(i % 200) - 100));
    ASSERT_EQ(round_to(DType::BF16, f), bf16_bits(f)) << f;
  }
}

// round_to rounds the target's normal range on the double's bits: the same values as the exact
// scaling (scale the quantum to 1, round half to even, scale back) on doubles of every exponent,
// halfway cases and carries into the next binade included, for every storage format.
TEST(Numerics, BitRoundingEqualsExactScaling) {
  struct F {
    DType t;
    int mant, emin;
    double max;
    bool sat;
  };
  const F fs[] = {{DType::F16, 10, -14, 65504.0, false}, {DType::BF16, 7, -126, std::ldexp(255.0, 120), false},
                  {DType::F8E4M3, 3, -6, 448.0, true}, {DType::F8E5M2, 2, -14, 57344.0, false}};
  auto scaled = [](const F& f, double x) {
    const double a = std::fabs(x);
    int e = 0;
    std::frexp(a, &e);
    const int q = std::max(e - 1, f.emin) - f.mant;
    const double y = std::ldexp(a, -q), fl = std::floor(y), d = y - fl;
    double r = std::ldexp(d > 0.5 || (d == 0.5 && std::fmod(fl, 2.0) != 0) ? fl + 1 : fl, q);
    if (r > f.max) r = f.sat ? f.max : kInf;
    return std::copysign(r, x);
  };
  auto xs = spec::random_normal(40000, 3);
  for (const F& f : fs)
    for (size_t i = 0; i < xs.size(); ++i) {
      double x = xs[i] * std::ldexp(1.0, int(i % 90) - 45);
      if (i % 3 == 0) {  // a halfway case: a representable value plus half its quantum (odd or even below)
        double a = scaled(f, x);
        if (a == 0 || std::isinf(a) || std::fabs(a) >= f.max) continue;
        int e = 0;
        std::frexp(std::fabs(a), &e);
        x = a + std::copysign(std::ldexp(0.5, std::max(e - 1, f.emin) - f.mant), a);
      }
      ASSERT_EQ(round_to(f.t, x), scaled(f, x)) << "dtype " << int(f.t) << ", x = " << x;
    }
}

#if defined(__FLT16_MAX__)
TEST(Numerics, Fp16MatchesCompilerFloat16) {
  auto xs = spec::random_normal(20000, 11);
  for (size_t i = 0; i < xs.size(); ++i) {
    double x = xs[i] * std::ldexp(1.0, int(i % 44) - 28);  // normals, subnormals, overflow
    ASSERT_EQ(round_to(DType::F16, x), double(static_cast<_Float16>(x))) << x;
  }
}
#endif

}  // namespace
}  // namespace qattn::tl
