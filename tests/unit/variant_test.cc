// Attention variants in TL (src/tl/variant.h): declarations parse and print back, evaluate with
// TL's integer rules, derived tile clauses are sound (checked by brute force against the
// predicate), and the interpreter catches wrong clauses, a missing or reordered Modify and a
// missing Mask (planted bugs on tests/tl/variants.tl must fail with TL0801).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "tl/checker.h"
#include "tl/interp.h"
#include "tl/parser.h"
#include "tl/printer.h"
#include "tl/variant.h"

namespace qattn::tl {
namespace {

std::string slurp(const std::string& rel) {
  std::ifstream f(std::string(QATTN_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Expr parse_decl(const std::string& text) {
  support::DiagSink d;
  auto e = parse_variant_expr(text, d);
  EXPECT_TRUE(e.has_value()) << text << "\n" << d.render();
  return e.value_or(Expr::number(0, true));
}

double eval(const std::string& text, std::map<std::string, VValue> locals) {
  VariantEnv env;
  Env ints;
  ints.ints["NB"] = 32;
  env.env = &ints;
  env.locals = std::move(locals);
  env.aux = [](const std::string& n, const int64_t* i, size_t k) -> std::optional<double> {
    if (n != "t" || k != 1) return std::nullopt;
    return double(10 * std::clamp<int64_t>(i[0], 0, 3));  // t = [0, 10, 20, 30], clamped reads
  };
  support::DiagSink d;
  auto v = evaluate(parse_decl(text), env, &d);
  EXPECT_TRUE(v.has_value()) << text << "\n" << d.render();
  return v ? v->v : -12345;
}

TEST(VariantExpr, PrintsBackWhatItParsed) {
  for (const char* s : {"kv_idx <= q_idx + seqlen_k - seqlen_q or kv_idx < 64",
                        "not (q_idx < 3 and kv_idx > 2) or seg_q[b, q_idx] == seg_k[b, kv_idx]",
                        "20.0 * tanh(score / 20.0)", "score + rel_bias[head, clamp(kv_idx - q_idx, -(NB / 2), NB / 2 - 1) + NB / 2]",
                        "(q_idx < 3) == (kv_idx < 3)"}) {
    Expr e = parse_decl(s);
    EXPECT_EQ(print_expr(e), s);
  }
}

TEST(VariantExpr, EvaluatesWithTlIntegerRules) {
  EXPECT_EQ(eval("-7 / 2", {}), -4);  // floor division
  EXPECT_EQ(eval("-7 % 2", {}), 1);
  EXPECT_DOUBLE_EQ(eval("7.0 / 2", {}), 3.5);
  EXPECT_EQ(eval("clamp(q_idx - kv_idx, -(NB / 2), NB / 2 - 1)", {{"q_idx", {100, true}}, {"kv_idx", {0, true}}}), 15);
  EXPECT_EQ(eval("t[q_idx] + t[kv_idx]", {{"q_idx", {-5, true}}, {"kv_idx", {99, true}}}), 30);  // clamped to t[0], t[3]
  EXPECT_EQ(eval("q_idx < 3 and not kv_idx == 1", {{"q_idx", {2, true}}, {"kv_idx", {1, true}}}), 0);
  EXPECT_NEAR(eval("20.0 * tanh(score / 20.0)", {{"score", {10.0, false}}}), 20 * std::tanh(0.5), 1e-12);
}

// Derived clauses must be sound: `empty when` true => the predicate is false on the whole tile
// pair; `full when` true => true everywhere. Brute force over random tiles.
TEST(VariantClauses, DerivedClausesAreSound) {
  const char* preds[] = {"kv_idx <= q_idx + 37 or kv_idx < 40", "kv_idx >= q_idx - 50 and kv_idx <= q_idx + 3",
                         "abs(q_idx - kv_idx) <= 20", "not (kv_idx > q_idx)", "max(q_idx, 64) != kv_idx / 2",
                         "2 * kv_idx - q_idx > -10"};
  std::mt19937 rng(7);
  for (const char* p : preds) {
    Expr e = parse_decl(p);
    auto c = derive_clauses(e);
    ASSERT_TRUE(c.has_value()) << p;
    int empties = 0, fulls = 0;
    for (int trial = 0; trial < 400; ++trial) {
      int q0 = int(rng() % 200), k0 = int(rng() % 200), nq = 1 + int(rng() % 40), nk = 1 + int(rng() % 40);
      std::map<std::string, VValue> tile = {{"q_lo", {double(q0), true}}, {"q_hi", {double(q0 + nq - 1), true}},
                                            {"kv_lo", {double(k0), true}}, {"kv_hi", {double(k0 + nk - 1), true}}};
      VariantEnv env;
      Env ints;
      env.env = &ints;
      env.locals = tile;
      const bool empty = evaluate(c->empty_when, env)->v != 0, full = evaluate(c->full_when, env)->v != 0;
      empties += empty, fulls += full;
      for (int q = q0; q < q0 + nq; ++q)
        for (int k = k0; k < k0 + nk; ++k) {
          env.locals = {{"q_idx", {double(q), true}}, {"kv_idx", {double(k), true}}};
          const bool keep = evaluate(e, env)->v != 0;
          if (empty) {
            ASSERT_FALSE(keep) << p << " tile q " << q0 << "+" << nq << " k " << k0 << "+" << nk;
          }
          if (full) {
            ASSERT_TRUE(keep) << p << " tile q " << q0 << "+" << nq << " k " << k0 << "+" << nk;
          }
        }
    }
    EXPECT_GT(empties + fulls, 0) << p << ": the clauses never decide anything";
  }
  EXPECT_FALSE(derive_clauses(parse_decl("seg_q[b, q_idx] == seg_k[b, kv_idx]")).has_value());  // aux reads
  EXPECT_FALSE(derive_clauses(parse_decl("kv_idx % 256 < 16")).has_value());
}

struct Ran {
  RunResult r;
  std::string diags;
};
Ran run_text(const std::string& text, Precision prec) {
  support::DiagSink d;
  Program p = parse(text, d, "variants.tl");
  EXPECT_FALSE(d.has_errors()) << d.render();
  CheckInfo info;
  EXPECT_TRUE(check(p, d, {}, info)) << d.render();
  RunConfig c;
  c.dims = {{"batch", 2}, {"heads_q", 2}, {"heads_kv", 1}, {"seqlen_q", 100}, {"seqlen_k", 100}, {"d", 16}};
  c.precision = prec;
  Ran out;
  out.r = run(p, c, d);
  out.diags = d.render();
  return out;
}

std::string edited(const std::string& from, const std::string& to) {
  std::string t = slurp("tests/tl/variants.tl");
  size_t at = t.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) t.replace(at, from.size(), to);
  return t;
}

TEST(VariantPlantedBug, UnmodifiedProgramPasses) {
  for (Precision prec : {Precision::FP64, Precision::Storage}) EXPECT_TRUE(run_text(slurp("tests/tl/variants.tl"), prec).r.passed);
}

TEST(VariantPlantedBug, EachEditFailsVerification) {
  const std::pair<std::string, std::string> bugs[] = {
      {"empty when seg_q[b, q_hi] < seg_k[b, kv_lo]", "empty when seg_q[b, q_hi] <= seg_k[b, kv_lo]"},  // skips visible tiles
      {"full when seg_q[b, q_lo] == seg_k[b, kv_hi] and", "full when seg_q[b, q_lo] == seg_k[b, kv_hi] or"},  // unmasked tiles
      {"  Compute Modify S at [m_block, j] with softcap\n", ""},
      {"  Compute Modify S at [m_block, j] with alibi\n  Compute Modify S at [m_block, j] with softcap\n",
       "  Compute Modify S at [m_block, j] with softcap\n  Compute Modify S at [m_block, j] with alibi\n"},
  };
  // (Editing a declaration itself is not a bug here: in a TL-only run the declarations are the
  // variant's definition, so the reference changes with them. Specs' shorthands are checked
  // against independent formulas: src/spec/variants.cc, tests/unit/plan_test.cc.)
  std::vector<std::string> programs;
  for (const auto& [from, to] : bugs) programs.push_back(edited(from, to));
  // no document Mask (and so no skip by it: the checker would refuse the skip, TL0411)
  std::string no_mask = edited("  Compute Mask S at [m_block, j] with document\n", "");
  no_mask.replace(no_mask.find(" {skip: document}"), 17, "");
  programs.push_back(no_mask);
  for (const auto& text : programs) {
    SCOPED_TRACE(text);
    Ran o = run_text(text, Precision::FP64);
    EXPECT_TRUE(o.r.ran) << o.diags;
    EXPECT_FALSE(o.r.passed) << o.r.summary;
    EXPECT_NE(o.diags.find("TL0801"), std::string::npos) << o.diags;
  }
}

}  // namespace
}  // namespace qattn::tl
