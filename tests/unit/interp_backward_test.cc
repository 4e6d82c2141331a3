// The TL interpreter on backward programs (docs/tl.md, "The backward pass"): tests/tl/backward.tl
// and backward_scores.tl with one planted edit each must fail with TL0801 (the D term, P, the
// softmax_scale factors, the LSE's base, the loop's first tile, the GQA accumulation, the staging of a
// transposed operand, a Score's derivative taken at the wrong scores), and the symbolic derivative of
// a Score against finite differences. The golden runs are interp_test.cc's corpus.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "interp_test_util.h"
#include "tl/interp.h"
#include "tl/printer.h"
#include "tl/parser.h"
#include "tl/variant.h"

namespace qattn::tl {
namespace {

using testutil::kCorpus;
using testutil::Outcome;
using testutil::run_text;
using testutil::slurp;

// ---- the backward pass (tests/tl/backward.tl with one edit) -----------------------------------

std::string backward_with(const std::string& from, const std::string& to) { return testutil::corpus_with("backward.tl", from, to); }

// GQA 4/2, several key tiles, ragged query tiles, both length orders.
RunConfig backward_dims(Precision prec, bool longer_keys) {
  RunConfig c;
  c.dims = {{"batch", 1}, {"heads_q", 4}, {"heads_kv", 2}, {"seqlen_q", longer_keys ? 45 : 100},
            {"seqlen_k", longer_keys ? 100 : 45}, {"d", 16}};
  c.precision = prec;
  c.seed = 11;
  return c;
}

void expect_wrong_gradients(const std::string& text, const char* what) {
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (bool longer_keys : {true, false}) {
      SCOPED_TRACE(std::string(what) + (prec == Precision::FP64 ? " (fp64" : " (storage") +
                   (longer_keys ? ", seqlen_k > seqlen_q)" : ", seqlen_q > seqlen_k)"));
      Outcome o = run_text(text, backward_dims(prec, longer_keys));
      EXPECT_TRUE(o.r.ran) << o.diags;
      EXPECT_FALSE(o.r.passed) << o.r.summary;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
}

TEST(Backward, UnmodifiedProgramPasses) {
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (bool longer_keys : {true, false}) {
      Outcome o = run_text(slurp(kCorpus / "backward.tl"), backward_dims(prec, longer_keys));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
      EXPECT_NE(o.r.summary.find(prec == Precision::FP64 ? "dK rel_err" : "dK max_abs_err"), std::string::npos) << o.r.summary;
    }
}
TEST(Backward, MissingDTerm) {
  // dS = P * dP: the rowsum(dO * O) term dropped.
  std::string text = backward_with("  Compute Subtract dP, Di and get dS\n", "  Compute Multiply dP, 1.0 and get dS\n");
  expect_wrong_gradients(text, "no D term");
}
TEST(Backward, DsWithoutP) {
  expect_wrong_gradients(backward_with("  Compute Multiply dS, P\n", ""), "dS = dP - D");
}
TEST(Backward, DkWithoutSoftmaxScale) {
  expect_wrong_gradients(backward_with("Compute Multiply dK, softmax_scale\n", ""), "dK unscaled");
}
TEST(Backward, DqWithoutSoftmaxScale) {
  expect_wrong_gradients(backward_with("  Compute Multiply dQ, softmax_scale\n", ""), "dQ unscaled");
}
TEST(Backward, PFromTheUnscaledLse) {
  // P = exp2(S * scale * log2e - LSE): the LSE left in natural-log units.
  expect_wrong_gradients(backward_with("  Compute Multiply LSE, log2e\n", ""), "LSE not in base 2");
}
TEST(Backward, QueryLoopStartsOneTileLate) {
  expect_wrong_gradients(backward_with("for i = max(0, (n_block * BN + seqlen_q - seqlen_k) / BM):",
                                       "for i = max(0, (n_block * BN + seqlen_q - seqlen_k) / BM + 1):"),
                         "first query tile skipped");
}
TEST(Backward, DvStoredInsteadOfAccumulatedUnderGqa) {
  // Two query heads share a kv head: a plain store keeps one head's share (the last block's).
  expect_wrong_gradients(backward_with("Copy dV (BN, d) in coordinate [n_block, 0] from register to global and accumulate",
                                       "Copy dV (BN, d) in coordinate [n_block, 0] from register to global"),
                         "dV overwritten per query head");
}
TEST(Backward, ScoreDerivativeAtTheWrongScores) {
  // the softcap's derivative taken at the raw scores (before ALiBi) instead of its own input
  std::string text = slurp(kCorpus / "backward_scores.tl");
  const std::string from = "Compute Derivative dS, S1 at [i, n_block] with softcap";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "Compute Derivative dS, S0 at [i, n_block] with softcap");
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    RunConfig cfg = backward_dims(prec, true);
    cfg.softcap = 2.0;
    Outcome o = run_text(text, cfg);
    EXPECT_TRUE(o.r.ran) << o.diags;
    EXPECT_FALSE(o.r.passed) << o.r.summary;
    EXPECT_TRUE(o.has("TL0801")) << o.diags;
  }
}
TEST(Backward, AuxGradientAtTheWrongTile) {
  // the bias table's gradient taken with the next query tile's coordinates (the elements' buckets
  // and distances shifted by BM rows): the checker cannot see it, the reference does
  std::string text = slurp(kCorpus / "backward_aux_grad.tl");
  const std::string g = "  Compute Gradient dS, S1 and accumulate drel_bias at [i, n_block] with relpos\n";
  ASSERT_NE(text.find(g), std::string::npos);
  text.replace(text.find(g), g.size(), "  Compute Gradient dS, S1 and accumulate drel_bias at [i + 1, n_block] with relpos\n");
  for (const bool bf16 : {false, true})
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      std::string t = text;
      for (size_t at; bf16 && (at = t.find(" fp16")) != std::string::npos;) t.replace(at, 5, " bf16");
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp16") + (prec == Precision::FP64 ? " fp64" : " storage"));
      RunConfig cfg = backward_dims(prec, true);
      cfg.softcap = 2.0;
      Outcome o = run_text(t, cfg);
      EXPECT_TRUE(o.r.ran) << o.diags;
      EXPECT_FALSE(o.r.passed) << o.r.summary;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
      EXPECT_NE(o.diags.find("drel_bias differs"), std::string::npos) << o.diags;
    }
}
TEST(Backward, AuxGradientsPassInBothPrecisionsAndDtypes) {
  // the golden program (interp_test.cc runs its expect-run lines) also in bf16, over several seeds
  for (const bool bf16 : {false, true})
    for (uint64_t seed : {2u, 3u, 4u}) {
      std::string t = slurp(kCorpus / "backward_aux_grad.tl");
      for (size_t at; bf16 && (at = t.find(" fp16")) != std::string::npos;) t.replace(at, 5, " bf16");
      RunConfig cfg = backward_dims(Precision::Storage, seed % 2 == 0);
      cfg.seed = seed;
      cfg.softcap = 2.0;
      Outcome o = run_text(t, cfg);
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_NE(o.r.summary.find("dalibi_slopes max_abs_err"), std::string::npos) << o.r.summary;
      EXPECT_NE(o.r.summary.find("drel_bias max_abs_err"), std::string::npos) << o.r.summary;
    }
}
TEST(Backward, DerivativeInAnAuxiliaryInputIsSymbolic) {
  support::DiagSink d;
  Program p = parse("Kernel k\nScore a = score - slopes[head] * abs(q_idx - kv_idx) + 2.0 * slopes[head] * slopes[head]\n"
                    "Score two = score + t[head, 0] * t[head, 1]\nScore self = score + t[head, t[head, 0]]\n"
                    "Score flat = score + abs(t[head, 0])\n", d, "t.tl");
  ASSERT_FALSE(d.has_errors()) << d.render();
  std::map<std::string, const Expr*> e;
  for (const auto& st : p.stmts)
    if (st.kind == Stmt::Kind::Variant) e[st.variant.name] = &st.variant.expr;
  std::string why;
  auto da = derive_aux(*e.at("a"), "slopes", why);
  ASSERT_TRUE(da) << why;
  ASSERT_EQ(da->index.size(), 1u);
  EXPECT_EQ(print_expr(da->index[0]), "head");
  // d/dx (s - x |q - k| + 2 x^2) = -|q - k| + 4 x (product rule on both terms)
  const std::string text = print_expr(da->derivative);
  EXPECT_NE(text.find("abs(q_idx - kv_idx)"), std::string::npos) << text;
  EXPECT_FALSE(derive_aux(*e.at("a"), "t", why)) << "not read";
  EXPECT_NE(why.find("does not read"), std::string::npos) << why;
  EXPECT_FALSE(derive_aux(*e.at("two"), "t", why));
  EXPECT_NE(why.find("two different indices"), std::string::npos) << why;
  EXPECT_FALSE(derive_aux(*e.at("self"), "t", why));
  EXPECT_NE(why.find("inside its own index"), std::string::npos) << why;
  EXPECT_FALSE(derive_aux(*e.at("flat"), "t", why));
  EXPECT_NE(why.find("abs"), std::string::npos) << why;
}
TEST(Backward, DerivativeOfAScoreIsSymbolic) {
  support::DiagSink d;
  Program p = parse("Kernel k\nScore s = 30.0 * tanh(score / 30.0) + exp2(score) - log(score) * q_idx\n", d, "t.tl");
  ASSERT_FALSE(d.has_errors()) << d.render();
  const Expr* e = nullptr;
  for (const auto& st : p.stmts)
    if (st.kind == Stmt::Kind::Variant) e = &st.variant.expr;
  ASSERT_NE(e, nullptr);
  std::string why;
  auto de = derive_score(*e, why);
  ASSERT_TRUE(de.has_value()) << why;
  Env env;
  env.scalars["ln2"] = 0.6931471805599453;
  for (double sc : {-3.0, 0.7, 12.0}) {
    auto at = [&](const Expr& x, double s) -> std::optional<double> {
      VariantEnv ve;
      ve.env = &env;
      ve.locals = VLocals{{"score", {s, false}}, {"q_idx", {5.0, true}}, {"kv_idx", {2.0, true}}};
      auto r = evaluate(x, ve, nullptr);
      if (!r) return std::nullopt;
      return r->v;
    };
    const double x = std::fabs(sc);  // log needs a positive score
    auto got = at(*de, x);
    auto up = at(*e, x + 1e-6), down = at(*e, x - 1e-6);
    ASSERT_TRUE(got && up && down);
    EXPECT_NEAR(*got, (*up - *down) / 2e-6, 1e-5 * (1 + std::fabs(*got))) << x;
  }
  Program q = parse("Kernel k\nScore s = min(score, 3.0)\n", d, "t.tl");
  for (const auto& st : q.stmts)
    if (st.kind == Stmt::Kind::Variant) {
      EXPECT_FALSE(derive_score(st.variant.expr, why).has_value());
    }
  EXPECT_NE(why.find("min"), std::string::npos) << why;
}
TEST(Backward, TransposedAOperandIsReadFromShared) {
  // Without the Copy to shared, P^T reads the shared buffer's unwritten (NaN) values, not the
  // register tile: the gradients are wrong (the checker reports the read, TL0305).
  expect_wrong_gradients(backward_with("  Copy Pc from register to shared\n", ""), "P^T never staged");
}

TEST(Backward, SkipHonoursTheMasksEmptyClause) {
  // tests/tl/backward_document.tl skips the query tiles of other documents (`{skip: document}`); a
  // clause that also calls a pair empty when the last query and the first key share a document (a
  // visible pair) drops gradient terms, and the interpreter, skipping what the kernel skips, says so.
  const std::string from = "seg_q[b, q_hi] < seg_k[b, kv_lo]";
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    RunConfig c;
    c.dims = {{"batch", 2}, {"heads_q", 2}, {"heads_kv", 1}, {"seqlen_q", 300}, {"seqlen_k", 545}};
    c.precision = prec;
    c.seed = 3;
    Outcome ok = run_text(slurp(kCorpus / "backward_document.tl"), c);
    EXPECT_TRUE(ok.r.passed) << ok.r.summary << ok.diags;
    Outcome bad = run_text(testutil::corpus_with("backward_document.tl", from, "seg_q[b, q_hi] <= seg_k[b, kv_lo]"), c);
    EXPECT_TRUE(bad.r.ran) << bad.diags;
    EXPECT_FALSE(bad.r.passed) << bad.r.summary;
    EXPECT_TRUE(bad.has("TL0801")) << bad.diags;
  }
}

TEST(Backward, TransposedFormChecksItsTransposes) {
  // tests/tl/backward_transposed.tl (S^T = K Q^T): the Mask, Modify and Derivative read `St^T`, LSE
  // and D are read by column (`LSE^T`, `Di^T`). A mask applied to St as if it were S, or at swapped
  // tile coordinates, hides the wrong pairs. (The softcap does not depend on the positions: its
  // Modify and Derivative give the same values transposed or not.)
  RunConfig c;
  c.dims = {{"batch", 1}, {"heads_q", 4}, {"heads_kv", 2}, {"seqlen_q", 150}, {"seqlen_k", 77}};
  c.seed = 5;
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    c.precision = prec;
    Outcome ok = run_text(slurp(kCorpus / "backward_transposed.tl"), c);
    EXPECT_TRUE(ok.r.passed) << ok.r.summary << ok.diags;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"Compute Mask St^T at [i, n_block] with causal", "Compute Mask St at [i, n_block] with causal"},
             {"Compute Mask St^T at [i, n_block] with causal", "Compute Mask St^T at [n_block, i] with causal"},
             {"Compute Mask St^T at [i, n_block] with query_rows", "Compute Mask St at [i, n_block] with query_rows"}}) {
      SCOPED_TRACE(to);
      Outcome bad = run_text(testutil::corpus_with("backward_transposed.tl", from, to), c);
      EXPECT_TRUE(bad.r.ran) << bad.diags;
      EXPECT_FALSE(bad.r.passed) << bad.r.summary;
      EXPECT_TRUE(bad.has("TL0801")) << bad.diags;
    }
  }
}

TEST(Backward, APhaseRunsBeforeTheGridAndItsWorkspaceIsChecked) {
  // tests/tl/backward_phase.tl: D = rowsum(dO * O) by `Phase dot_do_o` (its own Grid over the query
  // tiles) into the fp32 workspace D, which the main program reads like LSE. The interpreter runs
  // every block of the phase first; the workspace starts as NaN, so a row the phase does not write
  // (a grid one tile short, a store one tile off) poisons the gradients, and a D without the O factor
  // is wrong everywhere.
  RunConfig c;
  c.dims = {{"batch", 2}, {"heads_q", 2}, {"heads_kv", 1}, {"seqlen_q", 150}, {"seqlen_k", 77}};
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    c.precision = prec;
    Outcome ok = run_text(slurp(kCorpus / "backward_phase.tl"), c);
    EXPECT_TRUE(ok.r.passed) << ok.r.summary << ok.diags;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"Grid m = 0: cdiv(seqlen_q, BM), head", "Grid m = 0: cdiv(seqlen_q, BM) - 1, head"},
             {"Copy D (BM) in coordinate [m] from register", "Copy D (BM) in coordinate [m + 1] from register"},
             {"Copy D (BM) in coordinate [i] from global to shared", "Copy D (BM) in coordinate [i + 1] from global to shared"}}) {
      SCOPED_TRACE(to);
      Outcome bad = run_text(testutil::corpus_with("backward_phase.tl", from, to), c);
      EXPECT_FALSE(bad.r.passed) << bad.r.summary;
    }
  }
}

}  // namespace
}  // namespace qattn::tl
