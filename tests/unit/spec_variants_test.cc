// Attention variants in the spec (spec.h `Variants`, spec/variants.h): JSON round trip and strict
// reading, CLI flags (boolean flags without a value, prefix-LM replacing causal), validation codes
// SPEC0212-0216, the summary text, the auxiliary inputs, and the reference formulas of every
// shorthand on tiny hand-checked problems.
#include <gtest/gtest.h>

#include "diag_test_util.h"

#include <algorithm>
#include <cmath>

#include "spec/reference.h"
#include "spec/spec.h"
#include "spec/variants.h"

using namespace qattn::spec;
using qattn::support::Diagnostic;

namespace {

using qattn::test::contains;
using qattn::test::find;

AttentionSpec base() { return *find_preset("llama3-8b"); }

Diagnostic expect_error(const AttentionSpec& s, const std::string& code) {
  DiagSink d;
  EXPECT_FALSE(validate(s, d)) << code;
  EXPECT_EQ(d.error_count(), 1) << d.render();
  const Diagnostic* x = find(d, code);
  EXPECT_NE(x, nullptr) << d.render();
  return x ? *x : Diagnostic{};
}

// ---- JSON ---------------------------------------------------------------------------------
TEST(specVariants, JsonRoundTripOfEveryField) {
  AttentionSpec s = base();
  s.mask = Mask{};
  s.variants.softcap = 30.5;
  s.variants.alibi = true;
  s.variants.prefix_lm = 64;
  s.variants.document = true;
  s.variants.relative_bias = 32;
  s.variants.score_mod = "score + 0.1 * (kv_idx - q_idx)";
  s.variants.mask_mod = "kv_idx % 2 == 0 or kv_idx < 4";
  DiagSink d;
  EXPECT_TRUE(validate(s, d)) << d.render();
  std::string text = to_json(s);
  EXPECT_TRUE(contains(text, "\"variants\"")) << text;
  auto back = parse_json(text, d);
  ASSERT_TRUE(back) << d.render() << text;
  EXPECT_EQ(*back, s) << text;
  EXPECT_EQ(to_json(*back), text);
  // No variants: no "variants" key (the canonical JSON of existing specs is unchanged).
  EXPECT_FALSE(contains(to_json(base()), "variants"));
}

TEST(specVariants, JsonReadsTheDocumentedForm) {
  DiagSink d;
  auto s = parse_json(R"({"preset": "gemma-7b", "variants": {"softcap": 50, "document": true,
                          "relative_bias": 64, "alibi": false, "prefix_lm": null}})",
                      d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->variants.softcap, 50.0);
  EXPECT_TRUE(s->variants.document);
  EXPECT_FALSE(s->variants.alibi);
  EXPECT_EQ(s->variants.relative_bias, 64);
  EXPECT_FALSE(s->variants.prefix_lm);
  EXPECT_TRUE(validate(*s, d)) << d.render();
}

TEST(specVariants, JsonIsStrictAndLocated) {
  struct Case { const char* text; const char* code; const char* ptr; };
  for (const Case& c : {Case{R"({"heads_q": 8, "head_dim": 64, "variants": {"softcapp": 30}})", "SPEC0104", "/variants/softcapp"},
                        Case{R"({"heads_q": 8, "head_dim": 64, "variants": {"softcap": "30"}})", "SPEC0105", "/variants/softcap"},
                        Case{R"({"heads_q": 8, "head_dim": 64, "variants": {"alibi": 1}})", "SPEC0105", "/variants/alibi"},
                        Case{R"({"heads_q": 8, "head_dim": 64, "variants": {"prefix_lm": 6.5}})", "SPEC0105", "/variants/prefix_lm"},
                        Case{R"({"heads_q": 8, "head_dim": 64, "variants": {"relative_bias": 1e12}})", "SPEC0105", "/variants/relative_bias"},
                        Case{R"({"heads_q": 8, "head_dim": 64, "variants": {"score_mod": 3}})", "SPEC0105", "/variants/score_mod"},
                        Case{R"({"heads_q": 8, "head_dim": 64, "variants": true})", "SPEC0105", "/variants"}}) {
    DiagSink d;
    EXPECT_FALSE(parse_json(c.text, d)) << c.text;
    const Diagnostic* x = find(d, c.code);
    ASSERT_NE(x, nullptr) << c.text << "\n" << d.render();
    EXPECT_TRUE(contains(x->message, c.ptr)) << x->message;
  }
  DiagSink d;
  EXPECT_FALSE(parse_json("{\n  \"heads_q\": 8, \"head_dim\": 64,\n  \"variants\": {\n    \"documnet\": true\n  }\n}", d));
  const Diagnostic* x = find(d, "SPEC0104");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_EQ(x->loc.line, 4);
  EXPECT_EQ(x->loc.col, 5);
  EXPECT_TRUE(contains(x->hint, "did you mean \"document\"")) << x->hint;
}

TEST(specVariants, ValidationFromAFileIsLocated) {
  DiagSink d("v.json");
  SourceMap where;
  auto s = parse_json("{\n  \"heads_q\": 8, \"head_dim\": 64,\n  \"variants\": {\"alibi\": true,\n    \"relative_bias\": 33}\n}",
                      d, &where);
  ASSERT_TRUE(s) << d.render();
  EXPECT_FALSE(validate(*s, d, &where));
  const Diagnostic* x = find(d, "SPEC0214");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_EQ(x->loc.line, 4);
}

// ---- validation ---------------------------------------------------------------------------
TEST(specVariants, Validation) {
  AttentionSpec s = base();
  for (double bad : {0.0, -1.0, std::nan(""), double(INFINITY)}) {
    s.variants = Variants{};
    s.variants.softcap = bad;
    EXPECT_TRUE(contains(expect_error(s, "SPEC0212").message, "softcap"));
  }
  s = base();  // causal
  s.variants.prefix_lm = 64;
  Diagnostic x = expect_error(s, "SPEC0213");
  EXPECT_TRUE(contains(x.message, "causal")) << x.message;
  EXPECT_TRUE(contains(x.hint, "none")) << x.hint;
  s.mask = Mask{};
  DiagSink ok;
  EXPECT_TRUE(validate(s, ok)) << ok.render();
  s.variants.prefix_lm = -1;
  expect_error(s, "SPEC0213");
  s = base();
  for (int nb : {0, 1, 3, 31, 4098, -2}) {
    s.variants.relative_bias = nb;
    expect_error(s, "SPEC0214");
  }
  for (int nb : {2, 32, 4096}) {
    s.variants.relative_bias = nb;
    DiagSink d;
    EXPECT_TRUE(validate(s, d)) << nb << d.render();
  }
  s = base();
  s.variants.score_mod = "score +\n 1";
  EXPECT_TRUE(contains(expect_error(s, "SPEC0215").message, "score_mod"));
  s.variants.score_mod = "score # comment";
  expect_error(s, "SPEC0215");
  s.variants.score_mod = std::string(3000, 's');
  expect_error(s, "SPEC0215");
  s = base();
  s.variants.mask_mod = "kv_idx < 3 {skip: x}";
  EXPECT_TRUE(contains(expect_error(s, "SPEC0215").message, "mask_mod"));
  // fp8 and variants: accepted (the sm89 fp8 lowering applies them after the descale factors).
  s = base();
  s.dtype = DType::F8E4M3;
  s.variants.softcap = 30;
  DiagSink d;
  EXPECT_TRUE(validate(s, d)) << d.render();
}

TEST(specVariants, SummaryAndDescribe) {
  AttentionSpec s = base();
  s.variants.softcap = 50;
  s.variants.document = true;
  EXPECT_EQ(describe(s.variants), "softcap 50, document");
  EXPECT_EQ(summary(s), "llama3-8b: GQA 32/8 heads, d 128, bf16, causal, softcap 50, document, bshd");
  s.variants = Variants{};
  s.variants.alibi = true;
  s.variants.relative_bias = 32;
  s.variants.prefix_lm = 7;
  s.variants.softcap = 2.5;
  EXPECT_EQ(describe(s.variants), "alibi, relative bias 32 buckets, softcap 2.5, prefix-LM 7");
  EXPECT_EQ(describe(Variants{}), "");
}

// ---- CLI flags ----------------------------------------------------------------------------
TEST(specVariants, Flags) {
  AttentionSpec s = base();
  DiagSink d;
  EXPECT_TRUE(apply_flags(s,
                          {{"--softcap", "30"}, {"alibi", ""}, {"document", "true"}, {"relative-bias", "32"},
                           {"score-mod", "score * 0.5"}, {"mask-mod", "kv_idx < 100"}},
                          d))
      << d.render();
  EXPECT_EQ(s.variants.softcap, 30.0);
  EXPECT_TRUE(s.variants.alibi);  // no value: true
  EXPECT_TRUE(s.variants.document);
  EXPECT_EQ(s.variants.relative_bias, 32);
  EXPECT_EQ(s.variants.score_mod, "score * 0.5");
  EXPECT_EQ(s.variants.mask_mod, "kv_idx < 100");
  EXPECT_EQ(s.mask.kind, MaskKind::Causal);  // untouched
  EXPECT_TRUE(apply_flags(s, {{"softcap", "none"}, {"alibi", "false"}, {"relative-bias", "none"}, {"score-mod", ""}}, d));
  EXPECT_FALSE(s.variants.softcap);
  EXPECT_FALSE(s.variants.alibi);
  EXPECT_FALSE(s.variants.relative_bias);
  EXPECT_TRUE(s.variants.score_mod.empty());
  for (const char* f : {"lse", "alibi", "document", "--alibi"}) EXPECT_TRUE(flag_is_boolean(f)) << f;
  for (const char* f : {"softcap", "prefix-lm", "mask", "score-mod"}) EXPECT_FALSE(flag_is_boolean(f)) << f;
  for (const char* f : {"softcap", "alibi", "prefix-lm", "document", "relative-bias", "score-mod", "mask-mod"})
    EXPECT_NE(std::find(flag_names().begin(), flag_names().end(), f), flag_names().end()) << f;
}

TEST(specVariants, FlagErrors) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"softcap", "thirty"}, {"alibi", "maybe"}, {"prefix-lm", "6.5"}, {"relative-bias", "x"}}) {
    AttentionSpec s = base();
    DiagSink d;
    EXPECT_FALSE(apply_flags(s, {{flag, value}}, d)) << flag;
    EXPECT_NE(find(d, "SPEC0120"), nullptr) << flag << d.render();
  }
  AttentionSpec s = base();
  DiagSink d;
  EXPECT_FALSE(apply_flags(s, {{"soft-capp", "3"}}, d));
  ASSERT_NE(find(d, "SPEC0121"), nullptr);
  EXPECT_TRUE(contains(find(d, "SPEC0121")->hint, "--softcap")) << find(d, "SPEC0121")->hint;
}

TEST(specVariants, PrefixLmFlagReplacesACausalMask) {
  DiagSink d;
  auto s = spec_from_cli("llama3-8b", "", {{"prefix-lm", "64"}}, d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->mask.kind, MaskKind::None);
  EXPECT_EQ(s->variants.prefix_lm, 64);
  // An explicit mask stays, and is refused.
  DiagSink d2;
  EXPECT_FALSE(spec_from_cli("llama3-8b", "", {{"prefix-lm", "64"}, {"mask", "causal"}}, d2));
  EXPECT_NE(find(d2, "SPEC0213"), nullptr) << d2.render();
  DiagSink d3;
  EXPECT_FALSE(spec_from_cli("mistral-7b", "", {{"prefix-lm", "64"}}, d3));  // a window is not replaced
  EXPECT_NE(find(d3, "SPEC0213"), nullptr) << d3.render();
}

// ---- auxiliary inputs and order -------------------------------------------------------------
TEST(specVariants, AuxInputsAndOrder) {
  Variants v;
  EXPECT_TRUE(aux_inputs(v).empty());
  v.alibi = v.document = true;
  v.relative_bias = 8;
  v.softcap = 30;
  v.prefix_lm = 3;
  v.score_mod = "score";
  v.mask_mod = "kv_idx >= 0";
  auto aux = aux_inputs(v);
  ASSERT_EQ(aux.size(), 4u);  // the C ABI's aux[4]
  EXPECT_EQ(aux[0].name, "alibi_slopes");
  EXPECT_EQ(aux[0].shape, (std::vector<std::string>{"heads_q"}));
  EXPECT_FALSE(aux[0].is_int);
  EXPECT_EQ(aux[1].name, "seg_q");
  EXPECT_EQ(aux[1].shape, (std::vector<std::string>{"batch", "seqlen_q"}));
  EXPECT_TRUE(aux[1].is_int);
  EXPECT_EQ(aux[2].name, "seg_k");
  EXPECT_EQ(aux[2].shape, (std::vector<std::string>{"batch", "seqlen_k"}));
  EXPECT_EQ(aux[3].name, "rel_bias");
  EXPECT_EQ(aux[3].shape, (std::vector<std::string>{"heads_q", "NB"}));
  EXPECT_EQ(score_order(v), (std::vector<std::string>{"alibi", "relpos", "score_mod", "softcap"}));
  EXPECT_EQ(mask_order(v), (std::vector<std::string>{"prefix_lm", "document", "mask_mod"}));
}

// ---- reference formulas ---------------------------------------------------------------------
AttentionProblem problem(int64_t sq, int64_t sk) {
  AttentionProblem p;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  return p;
}

TEST(specVariantsReference, NoneEmptyAndCustomIsNullopt) {
  auto none = reference_variant(Variants{}, problem(4, 4), {});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  Variants v;
  v.softcap = 30;
  v.score_mod = "score";
  EXPECT_FALSE(reference_variant(v, problem(4, 4), {}));  // custom: the TL is its own reference
  v.score_mod.clear();
  v.mask_mod = "kv_idx < 3";
  EXPECT_FALSE(reference_variant(v, problem(4, 4), {}));
  Variants a;
  a.alibi = true;
  EXPECT_FALSE(reference_variant(a, problem(4, 4), {}));  // its slopes are missing
}

TEST(specVariantsReference, SoftcapByHand) {
  Variants v;
  v.softcap = 30;
  auto r = reference_variant(v, problem(1, 2), {});
  ASSERT_TRUE(r && r->score && !r->keep);
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 0, 45.0), 30.0 * std::tanh(1.5));
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 1, -3.0), 30.0 * std::tanh(-0.1));
  EXPECT_NEAR(r->score(0, 0, 0, 0, 1e-3), 1e-3, 1e-9);  // identity near 0
  EXPECT_LT(r->score(0, 0, 0, 0, 1e6), 30.0 + 1e-12);    // capped
  // Through the reference: one query, two keys with scores 45 and -3 (scale 1, d 1).
  AttentionProblem p = problem(1, 2);
  p.d_qk = p.d_v = 1;
  auto out = reference_attention(p, {1.0}, {45.0, -3.0}, {1.0, 0.0}, &*r);
  double a = std::exp(30 * std::tanh(1.5)), b = std::exp(30 * std::tanh(-0.1));
  EXPECT_NEAR(out.o[0], a / (a + b), 1e-12);
}

TEST(specVariantsReference, AlibiUsesTheSlopeOfTheQueryHeadAndBottomRightDistance) {
  Variants v;
  v.alibi = true;
  AuxMap aux;
  aux["alibi_slopes"] = AuxTensor{{2}, {0.5, 0.25}, false};
  auto r = reference_variant(v, problem(2, 5), aux);  // off = 3
  ASSERT_TRUE(r && r->score);
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 3, 1.0), 1.0);          // the diagonal: distance 0
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 0, 1.0), 1.0 - 1.5);    // 3 keys back
  EXPECT_DOUBLE_EQ(r->score(0, 1, 1, 0, 1.0), 1.0 - 1.0);    // head 1: slope 0.25, 4 keys back
  EXPECT_DOUBLE_EQ(r->score(0, 1, 0, 4, 0.0), -0.25);        // |q + off - k| also ahead
  EXPECT_DOUBLE_EQ(r->score(1, 7, 0, 4, 0.0), -0.25);        // head past the table: clamped
}

TEST(specVariantsReference, RelativeBiasBuckets) {
  Variants v;
  v.relative_bias = 4;  // relative positions -2 .. 1 -> columns 0 .. 3
  AuxMap aux;
  aux["rel_bias"] = AuxTensor{{2, 4}, {10, 11, 12, 13, 20, 21, 22, 23}, false};
  auto r = reference_variant(v, problem(3, 3), aux);  // off = 0
  ASSERT_TRUE(r && r->score);
  EXPECT_DOUBLE_EQ(r->score(0, 0, 2, 2, 0.0), 12);  // k - q = 0 -> column 2
  EXPECT_DOUBLE_EQ(r->score(0, 0, 2, 1, 0.0), 11);  // -1
  EXPECT_DOUBLE_EQ(r->score(0, 0, 2, 0, 0.0), 10);  // -2
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 1, 0.0), 13);  // +1
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 2, 0.0), 13);  // +2 clamps to +1
  EXPECT_DOUBLE_EQ(r->score(0, 1, 1, 1, 1.5), 23.5);  // head 1
  auto br = reference_variant(v, problem(2, 4), aux);  // off = 2: query 0 is aligned with key 2
  EXPECT_DOUBLE_EQ(br->score(0, 0, 0, 2, 0.0), 12);
}

TEST(specVariantsReference, OrderIsAlibiRelativeBiasThenSoftcap) {
  Variants v;
  v.alibi = true;
  v.relative_bias = 2;
  v.softcap = 2;
  AuxMap aux;
  aux["alibi_slopes"] = AuxTensor{{1}, {1.0}, false};
  aux["rel_bias"] = AuxTensor{{1, 2}, {0.5, 0.25}, false};
  auto r = reference_variant(v, problem(1, 4), aux);  // off = 3
  ASSERT_TRUE(r && r->score);
  // s = 3, key 1: alibi 3 - 2 = 1; bias bucket clamp(-2, -1, 0) + 1 = 0 -> +0.5; softcap 2 tanh(1.5 / 2).
  EXPECT_DOUBLE_EQ(r->score(0, 0, 0, 1, 3.0), 2 * std::tanh(0.75));
}

TEST(specVariantsReference, PrefixLmVisibilityTable) {
  Variants v;
  v.prefix_lm = 2;
  auto r = reference_variant(v, problem(4, 4), {});
  ASSERT_TRUE(r && r->keep && !r->score);
  // rows: queries 0..3, columns: keys 0..3; 1 = visible (bidirectional over keys 0, 1; causal after)
  const int want[4][4] = {{1, 1, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}};
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(r->keep(0, 0, q, k), bool(want[q][k])) << q << "," << k;
  // Bottom-right: with 2 queries and 4 keys, query 0 sits at key 2.
  auto br = reference_variant(v, problem(2, 4), {});
  EXPECT_TRUE(br->keep(0, 0, 0, 2));
  EXPECT_FALSE(br->keep(0, 0, 0, 3));
  EXPECT_TRUE(br->keep(0, 0, 1, 3));
  // Prefix 0 is causal.
  v.prefix_lm = 0;
  auto c = reference_variant(v, problem(3, 3), {});
  for (int q = 0; q < 3; ++q)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(c->keep(0, 0, q, k), k <= q);
}

TEST(specVariantsReference, DocumentMaskIsBlockDiagonal) {
  Variants v;
  v.document = true;
  AuxMap aux;
  aux["seg_q"] = AuxTensor{{2, 5}, {0, 0, 1, 1, 1, 0, 1, 2, 2, 2}, true};
  aux["seg_k"] = aux["seg_q"];
  auto r = reference_variant(v, problem(5, 5), aux);
  ASSERT_TRUE(r && r->keep && !r->score);
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 5; ++q)
      for (int k = 0; k < 5; ++k) {
        double sq = aux["seg_q"].at({b, q}), sk = aux["seg_k"].at({b, k});
        EXPECT_EQ(r->keep(b, 3, q, k), sq == sk) << b << "," << q << "," << k;
      }
  EXPECT_TRUE(r->keep(0, 0, 0, 1));
  EXPECT_FALSE(r->keep(0, 0, 0, 2));  // another document
  EXPECT_TRUE(r->keep(1, 0, 2, 4));
  // Through the reference with random inputs: equals running each document on its own.
  AttentionProblem p = problem(5, 5);
  p.batch = 2;
  p.d_qk = 3;
  p.d_v = 2;
  auto in = random_inputs(p, 4);
  auto out = reference_attention(p, in.q, in.k, in.v, &*r);
  // Batch 1, document 2 = positions 2..4: a sub-problem of 3 queries and 3 keys.
  AttentionProblem sub = problem(3, 3);
  sub.d_qk = 3;
  sub.d_v = 2;
  std::vector<double> q(in.q.begin() + (5 + 2) * 3, in.q.begin() + (5 + 5) * 3);
  std::vector<double> k(in.k.begin() + (5 + 2) * 3, in.k.begin() + (5 + 5) * 3);
  std::vector<double> vv(in.v.begin() + (5 + 2) * 2, in.v.begin() + (5 + 5) * 2);
  auto want = reference_attention(sub, q, k, vv);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out.o[(5 + 2) * 2 + i], want.o[i], 1e-12) << i;
}

TEST(specVariantsReference, DocumentAndPrefixCombine) {
  Variants v;
  v.document = true;
  v.prefix_lm = 1;
  AuxMap aux;
  aux["seg_q"] = AuxTensor{{1, 4}, {0, 0, 1, 1}, true};
  aux["seg_k"] = aux["seg_q"];
  auto r = reference_variant(v, problem(4, 4), aux);
  ASSERT_TRUE(r && r->keep);
  EXPECT_TRUE(r->keep(0, 0, 0, 0));
  EXPECT_TRUE(r->keep(0, 0, 1, 0));
  EXPECT_FALSE(r->keep(0, 0, 2, 0));  // prefix but another document
  EXPECT_FALSE(r->keep(0, 0, 2, 3));  // same document but in the future
  EXPECT_TRUE(r->keep(0, 0, 3, 2));
}

}  // namespace
