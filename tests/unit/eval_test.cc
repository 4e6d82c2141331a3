// TL expression evaluation (tl/eval.h): floor division, cdiv/min/max, unbound names and overflow
// are diagnostics (TL0603), never undefined behaviour.
#include <gtest/gtest.h>

#include "tl/eval.h"
#include "tl/parser.h"

namespace qattn::tl {
namespace {

std::optional<int64_t> ev(const std::string& text, const Env& env, support::DiagSink& d) {
  auto e = parse_expr(text, d);
  if (!e || d.has_errors()) return std::nullopt;
  return eval_int(*e, env, &d);
}

TEST(evalInt, Arithmetic) {
  Env env;
  env.ints = {{"seqlen_q", 100}, {"BM", 64}, {"BN", 48}, {"seqlen_k", 70}};
  support::DiagSink d;
  EXPECT_EQ(ev("cdiv(seqlen_q, BM)", env, d), 2);
  EXPECT_EQ(ev("(0 * BM + seqlen_k - seqlen_q - 10) / BN", env, d), -1);  // floor, not truncation
  EXPECT_EQ(ev("-7 % 3", env, d), 2);
  EXPECT_EQ(ev("min(cdiv(seqlen_k, BN), cdiv((1 + 1) * BM + seqlen_k - seqlen_q, BN))", env, d), 2);
  EXPECT_EQ(ev("max(0, -3, 2)", env, d), 2);
  EXPECT_FALSE(d.has_errors()) << d.render();
}

TEST(evalInt, ErrorsAreDiagnostics) {
  Env env;
  for (const char* bad : {"unknown_dim + 1", "4 / 0", "cdiv(3, 0)", "9000000000000000 * 9000000000000000",
                          "0 - 9000000000000000 * 1000 - 9000000000000000 * 1000", "foo(1)", "1.5"}) {
    support::DiagSink d;
    EXPECT_FALSE(ev(bad, env, d).has_value()) << bad;
    ASSERT_TRUE(d.has_errors()) << bad;
    EXPECT_EQ(d.all().back().code, "TL0603") << bad << "\n" << d.render();
  }
}

TEST(evalScalar, Builtins) {
  Env env;
  env.scalars["softmax_scale"] = 0.125;
  support::DiagSink d;
  auto e = parse_expr("softmax_scale * log2e", d);
  ASSERT_TRUE(e.has_value()) << d.render();
  auto v = eval_scalar(*e, env, &d);
  ASSERT_TRUE(v.has_value()) << d.render();
  EXPECT_NEAR(*v, 0.125 * 1.4426950408889634, 1e-15);
}

}  // namespace
}  // namespace qattn::tl
