// AttentionSpec: JSON round trip of every preset, strict parsing (unknown keys, types, malformed
// JSON with line:col), every validation rule (code + message contents), presets, CLI flags.
#include <gtest/gtest.h>

#include "diag_test_util.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backend/kir.h"
#include "plan/plan.h"
#include "plan/problem.h"
#include "qattn/kinds.h"
#include "spec/reference.h"
#include "spec/spec.h"
#include "tl/ast.h"
#include "tl/parser.h"

using namespace qattn::spec;
using qattn::support::Diagnostic;

namespace {

using qattn::test::contains;
using qattn::test::find;

AttentionSpec base() {
  AttentionSpec s = *find_preset("llama3-8b");
  return s;
}

// Validate `s` and expect exactly one error with `code`; returns it (copy) for message checks.
Diagnostic expect_error(const AttentionSpec& s, const std::string& code) {
  DiagSink d;
  EXPECT_FALSE(validate(s, d)) << code;
  EXPECT_EQ(d.error_count(), 1) << d.render();
  const Diagnostic* x = find(d, code);
  EXPECT_NE(x, nullptr) << d.render();
  return x ? *x : Diagnostic{};
}

std::optional<AttentionSpec> parse(const std::string& text, DiagSink& d) { return parse_json(text, d); }

}  // namespace

// ---- presets ------------------------------------------------------------------------------
TEST(specPresets, AllValidAndRoundTrip) {
  ASSERT_GE(presets().size(), 8u);
  for (const auto& p : presets()) {
    DiagSink d;
    EXPECT_TRUE(validate(p.spec, d)) << p.spec.name << "\n" << d.render();
    EXPECT_FALSE(p.description.empty()) << p.spec.name;
    EXPECT_FALSE(p.source.empty()) << p.spec.name;
    std::string text = to_json(p.spec);
    DiagSink d2;
    auto back = parse_json(text, d2);
    ASSERT_TRUE(back) << text << d2.render();
    EXPECT_EQ(*back, p.spec) << text;
    EXPECT_EQ(to_json(*back), text);
  }
}

TEST(specPresets, RealModelShapes) {
  struct Row { const char* name; int hq, hkv, dqk, dv; const char* variant; };
  for (const Row& r : {Row{"llama2-7b", 32, 32, 128, 128, "MHA"}, Row{"llama3-8b", 32, 8, 128, 128, "GQA"},
                       Row{"qwen2.5-72b", 64, 8, 128, 128, "GQA"}, Row{"llama3.1-405b", 128, 8, 128, 128, "GQA"},
                       Row{"starcoder-15b", 48, 1, 128, 128, "MQA"},
                       Row{"deepseek-v3-mla-prefill", 128, 128, 192, 128, "MLA"},
                       Row{"llama3.2-1b", 32, 8, 64, 64, "GQA"}, Row{"gemma-7b", 16, 16, 256, 256, "MHA"},
                       Row{"bert-large", 16, 16, 64, 64, "MHA"}, Row{"phi3-mini", 32, 32, 96, 96, "MHA"}}) {
    const AttentionSpec* s = find_preset(r.name);
    ASSERT_NE(s, nullptr) << r.name;
    EXPECT_EQ(s->heads_q, r.hq) << r.name;
    EXPECT_EQ(s->heads_kv, r.hkv) << r.name;
    EXPECT_EQ(s->head_dim_qk, r.dqk) << r.name;
    EXPECT_EQ(s->head_dim_v, r.dv) << r.name;
    EXPECT_EQ(variant_name(*s), r.variant) << r.name;
    EXPECT_EQ(s->dtype, DType::BF16) << r.name;
  }
  EXPECT_EQ(find_preset("llama3-8b")->mask.kind, MaskKind::Causal);
  EXPECT_EQ(find_preset("bert-large")->mask.kind, MaskKind::None);
  const AttentionSpec* mistral = find_preset("mistral-7b");
  ASSERT_NE(mistral, nullptr);
  EXPECT_EQ(mistral->mask.kind, MaskKind::Window);
  EXPECT_EQ(mistral->mask.window_right, 0);
  const AttentionSpec* ds = find_preset("deepseek-v3-mla-prefill");
  ASSERT_TRUE(ds->softmax_scale);
  EXPECT_NEAR(*ds->softmax_scale, 0.1352, 1e-4);
}

TEST(specPresets, CaseInsensitiveAndUnknown) {
  EXPECT_EQ(find_preset("LLAMA3-8B"), find_preset("llama3-8b"));
  EXPECT_EQ(find_preset("Llama3_8b"), find_preset("llama3-8b"));
  EXPECT_EQ(find_preset("llama4-8b"), nullptr);
  DiagSink d;
  EXPECT_EQ(find_preset("llama3-7b", d), nullptr);
  const Diagnostic* x = find(d, "SPEC0110");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(contains(x->message, "llama3-7b"));
  EXPECT_TRUE(contains(x->hint, "llama3-8b"));
  EXPECT_TRUE(contains(x->hint, "gemma-7b"));  // the full list
}

// ---- validation ---------------------------------------------------------------------------
TEST(specValidate, HeadsNotMultiple) {
  AttentionSpec s = base();
  s.heads_kv = 5;  // 32 % 5 != 0
  Diagnostic x = expect_error(s, "SPEC0202");
  EXPECT_TRUE(contains(x.message, "heads_q = 32")) << x.message;
  EXPECT_TRUE(contains(x.message, "heads_kv = 5")) << x.message;
  EXPECT_TRUE(contains(x.hint, "heads_kv = 4")) << x.hint;  // nearest divisor
  s.heads_kv = 7;
  EXPECT_TRUE(contains(expect_error(s, "SPEC0202").hint, "heads_kv = 8"));
  s.heads_kv = 6;  // a tie
  EXPECT_TRUE(contains(expect_error(s, "SPEC0202").hint, "heads_kv = 4 or 8"));
  s.heads_kv = 64;  // more KV heads than Q heads
  EXPECT_TRUE(contains(expect_error(s, "SPEC0202").hint, "heads_kv = 32"));
}

TEST(specValidate, HeadsPositive) {
  AttentionSpec s = base();
  s.heads_q = 0;
  expect_error(s, "SPEC0201");
  s = base();
  s.heads_kv = -1;
  expect_error(s, "SPEC0201");
}

TEST(specValidate, HeadDims) {
  AttentionSpec s = base();
  s.head_dim_qk = s.head_dim_v = 80;
  DiagSink d;
  EXPECT_FALSE(validate(s, d));
  const Diagnostic* x = find(d, "SPEC0203");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(contains(x->message, "80"));
  EXPECT_TRUE(contains(x->message, "32, 64, 96, 128, 192, 256")) << x->message;
  EXPECT_TRUE(contains(x->hint, "96")) << x->hint;
  // Untuned multiples of 32 up to 512 pass with a warning (the planner decides what fits).
  s.head_dim_qk = s.head_dim_v = 512;
  DiagSink w;
  EXPECT_TRUE(validate(s, w)) << w.render();
  EXPECT_NE(find(w, "SPEC0211"), nullptr);
  s.head_dim_qk = s.head_dim_v = 544;
  EXPECT_FALSE(validate(s, d));
  // MLA: d_qk > d_v is fine, and so is d_v > d_qk (SPEC0204 retired); not with V read from K's columns.
  s = base();
  s.head_dim_qk = 192;
  s.head_dim_v = 128;
  DiagSink ok;
  EXPECT_TRUE(validate(s, ok)) << ok.render();
  EXPECT_EQ(variant_name(s), "MLA");
  std::swap(s.head_dim_qk, s.head_dim_v);
  DiagSink wide;
  EXPECT_TRUE(validate(s, wide)) << wide.render();
  EXPECT_NE(variant_name(s), "MLA");
  s.v_from_k = true;
  expect_error(s, "SPEC0236");
}

TEST(specValidate, Window) {
  AttentionSpec s = base();
  s.mask = Mask{MaskKind::Window, 256, 0};
  DiagSink ok;
  EXPECT_TRUE(validate(s, ok));
  s.mask.window_left = -1;  // unbounded on the left (kernels take the window at launch)
  DiagSink unbounded;
  EXPECT_TRUE(validate(s, unbounded)) << unbounded.render();
  s.mask.window_left = -2;
  Diagnostic x = expect_error(s, "SPEC0205");
  EXPECT_TRUE(contains(x.message, "left = -2"));
  // A window aligned top-left cannot be written in a Mask (one MaskKind): the JSON reader refuses it.
  DiagSink d("w.json");
  EXPECT_FALSE(parse_json(R"({"heads_q": 8, "head_dim": 64, "mask": {"kind": "window", "align": "top_left", "left": 4, "right": 0}})", d));
  ASSERT_EQ(d.error_count(), 1) << d.render();
  const Diagnostic* y = find(d, "SPEC0206");
  ASSERT_NE(y, nullptr) << d.render();
  EXPECT_EQ(y->message, "window masks are always bottom-right aligned; align \"top_left\" is only for causal");
  EXPECT_EQ(y->loc.line, 1);
  DiagSink ok2;
  auto br = parse_json(R"({"heads_q": 8, "head_dim": 64, "mask": {"kind": "window", "align": "bottom_right", "left": 4, "right": 0}})", ok2);
  ASSERT_TRUE(br) << ok2.render();
  EXPECT_EQ(br->mask, (Mask{MaskKind::Window, 4, 0}));
}

TEST(specValidate, SoftmaxScale) {
  AttentionSpec s = base();
  EXPECT_DOUBLE_EQ(effective_softmax_scale(s), 1.0 / std::sqrt(128.0));
  for (double bad : {0.0, -0.5, std::nan(""), double(INFINITY)}) {
    s.softmax_scale = bad;
    expect_error(s, "SPEC0207");
  }
  s.softmax_scale = 0.1;
  EXPECT_DOUBLE_EQ(effective_softmax_scale(s), 0.1);
}

TEST(specValidate, Fp8DescaleNeedsFp8) {
  AttentionSpec s = base();
  s.fp8.descale_q = true;
  Diagnostic x = expect_error(s, "SPEC0208");
  EXPECT_TRUE(contains(x.message, "bf16"));
  s.dtype = DType::F8E4M3;
  DiagSink ok;
  EXPECT_TRUE(validate(s, ok));
}

TEST(specValidate, ProblemSizes) {
  AttentionSpec s = base();
  s.problem = ProblemSize{0, 4096, 4096};
  expect_error(s, "SPEC0209");
  s.problem = ProblemSize{2, 4096, 1024};  // bottom-right causal: 3072 rows see nothing
  DiagSink d;
  EXPECT_TRUE(validate(s, d));  // a warning, not an error
  const Diagnostic* w = find(d, "SPEC0210");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->severity, qattn::support::Severity::Warning);
  EXPECT_TRUE(contains(w->message, "3072"));
  s.mask.kind = MaskKind::CausalTopLeft;
  DiagSink d2;
  EXPECT_TRUE(validate(s, d2));
  EXPECT_EQ(find(d2, "SPEC0210"), nullptr);
}

// ---- JSON ---------------------------------------------------------------------------------
TEST(specJson, FullRoundTrip) {
  AttentionSpec s;
  s.name = "everything";
  s.heads_q = 64;
  s.heads_kv = 8;
  s.head_dim_qk = 192;
  s.head_dim_v = 128;
  s.dtype = DType::F8E4M3;
  s.fp8 = Fp8Scales{true, false, true};
  s.mask = Mask{MaskKind::Window, 1024, 16};
  s.softmax_scale = 0.1234567890123;
  s.layout = Layout::BHSD;
  s.return_lse = true;
  s.deterministic = true;
  s.gpu = "h100";
  s.problem = ProblemSize{3, 1000, 3000};
  DiagSink d;
  EXPECT_TRUE(validate(s, d)) << d.render();
  EXPECT_NE(to_json(s).find("\"deterministic\": true"), std::string::npos) << to_json(s);
  auto back = parse_json(to_json(s), d);
  ASSERT_TRUE(back) << d.render();
  EXPECT_EQ(*back, s) << to_json(s);
  s.mask = Mask{MaskKind::CausalTopLeft};
  back = parse_json(to_json(s), d);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, s);
}

TEST(specJson, MinimalAndShorthands) {
  DiagSink d;
  auto s = parse(R"({"heads_q": 16, "head_dim": 64})", d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->heads_kv, 16);
  EXPECT_EQ(s->head_dim_v, 64);
  EXPECT_EQ(s->dtype, DType::BF16);
  EXPECT_EQ(s->mask.kind, MaskKind::None);
  EXPECT_EQ(s->layout, Layout::BSHD);
  s = parse(R"({
    // comments are allowed
    "heads_q": 32, "heads_kv": 4, "head_dim": 128, "mask": "causal_top_left",
    "problem": {"batch": 2, "seqlen": 8192}, "softmax_scale": null })",
            d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->mask, (Mask{MaskKind::CausalTopLeft}));
  EXPECT_EQ(s->problem, (ProblemSize{2, 8192, 8192}));
  EXPECT_FALSE(s->softmax_scale);
}

TEST(specJson, PresetBase) {
  DiagSink d;
  auto s = parse(R"({"preset": "Llama3-8B", "dtype": "fp16", "gpu": "a100"})", d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->name, "llama3-8b");
  EXPECT_EQ(s->heads_kv, 8);
  EXPECT_EQ(s->dtype, DType::F16);
  EXPECT_EQ(s->gpu, "a100");
  DiagSink d2;
  EXPECT_FALSE(parse(R"({"preset": "llama9"})", d2));
  const Diagnostic* x = find(d2, "SPEC0110");
  ASSERT_NE(x, nullptr) << d2.render();
  EXPECT_TRUE(contains(x->message, "/preset"));
}

TEST(specJson, UnknownKeyWithPointerLocationAndHint) {
  DiagSink d("my.json");
  std::string text = "{\n  \"heads_q\": 32,\n  \"head_dims\": 128,\n  \"mask\": {\"kind\": \"causal\", \"allign\": \"top_left\"}\n}";
  EXPECT_FALSE(parse(text, d));
  const Diagnostic* x = find(d, "SPEC0104");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_EQ(x->file, "my.json");
  EXPECT_EQ(x->loc.line, 3);
  EXPECT_EQ(x->loc.col, 3);
  EXPECT_TRUE(contains(x->message, "/head_dims")) << x->message;
  EXPECT_TRUE(contains(x->hint, "did you mean \"head_dim\"")) << x->hint;
  EXPECT_TRUE(contains(x->hint, "heads_kv")) << x->hint;  // the list of valid keys
  // The nested one is reported too, with its own pointer.
  bool nested = false;
  for (const auto& y : d.all())
    if (y.code == "SPEC0104" && contains(y.message, "/mask/allign")) {
      nested = true;
      EXPECT_EQ(y.loc.line, 4);
      EXPECT_TRUE(contains(y.hint, "align"));
    }
  EXPECT_TRUE(nested) << d.render();
}

TEST(specJson, WrongTypes) {
  struct Case { const char* text; const char* code; const char* ptr; };
  for (const Case& c : {Case{R"({"heads_q": "32", "head_dim": 128})", "SPEC0105", "/heads_q"},
                        Case{R"({"heads_q": 32.5, "head_dim": 128})", "SPEC0105", "/heads_q"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "return_lse": 1})", "SPEC0105", "/return_lse"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "deterministic": "yes"})", "SPEC0105", "/deterministic"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "split_keys": "yes"})", "SPEC0105", "/split_keys"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "v_from_k": "`id` ; true"})", "SPEC0105", "/v_from_k"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "v_from_k": [true]})", "SPEC0105", "/v_from_k"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "aux_grad": "yes; rm -rf /"})", "SPEC0105", "/aux_grad"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "mask": 3})", "SPEC0105", "/mask"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "softmax_scale": "x"})", "SPEC0105", "/softmax_scale"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "problem": {"batch": [1]}})", "SPEC0105", "/problem/batch"},
                        Case{R"([1, 2])", "SPEC0103", "/"},
                        Case{R"({"head_dim": 128})", "SPEC0106", "heads_q"},
                        Case{R"({"heads_q": 32})", "SPEC0106", "head_dim"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "mask": {"kind": "window", "left": 8}})", "SPEC0106", "right"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "dtype": "fp32"})", "SPEC0107", "/dtype"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "layout": "sbhd"})", "SPEC0107", "/layout"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "mask": "window"})", "SPEC0107", "/mask"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "head_dim_qk": 128})", "SPEC0108", "/head_dim"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "problem": {"seqlen": 1, "seqlen_q": 2}})", "SPEC0108", "/problem/seqlen"},
                        Case{R"({"heads_q": 99999999999, "head_dim": 128})", "SPEC0109", "/heads_q"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "heads_q": 16})", "SPEC0111", "/heads_q"},
                        Case{R"({"heads_q": 32, "head_dim": 128, "mask": {"kind": "causal", "left": 3}})", "SPEC0104", "/mask/left"}}) {
    DiagSink d;
    EXPECT_FALSE(parse(c.text, d)) << c.text;
    const Diagnostic* x = find(d, c.code);
    ASSERT_NE(x, nullptr) << c.text << "\n" << d.render();
    EXPECT_TRUE(contains(x->message, c.ptr)) << x->message;
  }
  DiagSink d;
  parse(R"({"heads_q": 32, "head_dim": 128, "dtype": "bf61"})", d);
  ASSERT_NE(find(d, "SPEC0107"), nullptr);
  EXPECT_TRUE(contains(find(d, "SPEC0107")->hint, "fp16, bf16, fp8_e4m3"));
}

TEST(specJson, MalformedHasLineAndColumn) {
  DiagSink d("bad.json");
  EXPECT_FALSE(parse("{\n  \"heads_q\": 32,\n  \"head_dim\": 12x\n}", d));
  const Diagnostic* x = find(d, "SPEC0102");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_EQ(x->loc.line, 3);
  EXPECT_EQ(x->loc.col, 17);  // the 'x' of 12x
  EXPECT_FALSE(contains(x->message, "json.exception")) << x->message;
  DiagSink d2;
  EXPECT_FALSE(parse("{\n  \"heads_q\": 32,\n}", d2));  // trailing comma
  ASSERT_NE(find(d2, "SPEC0102"), nullptr);
  EXPECT_EQ(find(d2, "SPEC0102")->loc.line, 3) << d2.render();
  DiagSink d3;
  EXPECT_FALSE(parse("", d3));
  EXPECT_NE(find(d3, "SPEC0102"), nullptr);
}

TEST(specJson, NeverCrashesOnTruncationsOrDeepNesting) {
  std::string text = to_json(*find_preset("deepseek-v3-mla-prefill"));
  for (size_t n = 0; n < text.size(); ++n) {
    DiagSink d;
    auto s = parse(text.substr(0, n), d);
    EXPECT_TRUE(s || d.has_errors());
  }
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  DiagSink d;
  EXPECT_FALSE(parse(deep, d));
  EXPECT_NE(find(d, "SPEC0103"), nullptr) << d.render();
  DiagSink d2;
  EXPECT_FALSE(parse("{\"mask\": " + deep + ", \"heads_q\": 1}", d2));
  EXPECT_TRUE(d2.has_errors());
}

TEST(specJson, LoadFile) {
  DiagSink d;
  EXPECT_FALSE(load_json_file("/nonexistent/spec.json", d));
  ASSERT_NE(find(d, "SPEC0101"), nullptr);
  EXPECT_EQ(d.all()[0].file, "/nonexistent/spec.json");
  std::string path = testing::TempDir() + "qattn_spec_test.json";
  {
    std::ofstream out(path);
    out << "{\n  \"preset\": \"gemma-7b\",\n  \"heads_kv\": 3\n}\n";
  }
  DiagSink d2;
  SourceMap where;
  auto s = load_json_file(path, d2, &where);
  ASSERT_TRUE(s) << d2.render();
  EXPECT_FALSE(validate(*s, d2, &where));
  const Diagnostic* x = find(d2, "SPEC0202");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->file, path);
  EXPECT_EQ(x->loc.line, 3);  // located at the "heads_kv" key
  std::remove(path.c_str());
}

// ---- CLI flags ----------------------------------------------------------------------------
TEST(specFlags, Apply) {
  AttentionSpec s = base();
  DiagSink d;
  EXPECT_TRUE(apply_flags(s,
                          {{"--heads", "64/8"}, {"head-dim", "192/128"}, {"window", "256,0"}, {"dtype", "fp8"},
                           {"layout", "BHSD"}, {"lse", ""}, {"gpu", "h100"}, {"seqlen", "1024/4096"},
                           {"batch", "2"}, {"softmax-scale", "0.125"}, {"descale", "q,k"}},
                          d))
      << d.render();
  EXPECT_EQ(s.heads_q, 64);
  EXPECT_EQ(s.heads_kv, 8);
  EXPECT_EQ(s.head_dim_qk, 192);
  EXPECT_EQ(s.head_dim_v, 128);
  EXPECT_EQ(s.mask, (Mask{MaskKind::Window, 256, 0}));
  EXPECT_EQ(s.dtype, DType::F8E4M3);
  EXPECT_EQ(s.layout, Layout::BHSD);
  EXPECT_TRUE(s.return_lse);
  EXPECT_EQ(s.gpu, "h100");
  EXPECT_EQ(s.problem, (ProblemSize{2, 1024, 4096}));
  EXPECT_EQ(s.softmax_scale, 0.125);
  EXPECT_EQ(s.fp8, (Fp8Scales{true, true, false}));
  EXPECT_TRUE(apply_flags(s, {{"mask", "causal"}}, d));
  EXPECT_EQ(s.mask, (Mask{MaskKind::Causal}));
  EXPECT_TRUE(apply_flags(s, {{"heads", "16"}}, d));
  EXPECT_EQ(s.heads_kv, 16);
}

TEST(specFlags, Errors) {
  AttentionSpec s = base();
  DiagSink d;
  EXPECT_FALSE(apply_flags(s, {{"dtype", "fp32"}}, d));
  EXPECT_NE(find(d, "SPEC0120"), nullptr);
  DiagSink d2;
  EXPECT_FALSE(apply_flags(s, {{"heads", "32/x"}}, d2));
  EXPECT_NE(find(d2, "SPEC0120"), nullptr);
  DiagSink d3;
  EXPECT_FALSE(apply_flags(s, {{"mask", "window"}}, d3));  // no sizes
  EXPECT_NE(find(d3, "SPEC0120"), nullptr);
  DiagSink d5;
  EXPECT_FALSE(apply_flags(s, {{"deterministic", "sometimes; rm -rf /"}}, d5));  // a bool, or a diagnostic
  EXPECT_NE(find(d5, "SPEC0120"), nullptr);
  EXPECT_FALSE(s.deterministic);
  DiagSink d6;
  EXPECT_FALSE(apply_flags(s, {{"split-keys", "$(reboot)"}}, d6));  // a bool, or a diagnostic
  EXPECT_NE(find(d6, "SPEC0120"), nullptr);
  EXPECT_FALSE(s.split_keys);
  DiagSink d4;
  EXPECT_FALSE(apply_flags(s, {{"head-dims", "64"}}, d4));
  const Diagnostic* x = find(d4, "SPEC0121");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(contains(x->hint, "--head-dim")) << x->hint;
}

TEST(specFlags, SpecFromCli) {
  DiagSink d;
  auto s = spec_from_cli("qwen2.5-72b", "", {{"dtype", "fp16"}}, d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->heads_q, 64);
  EXPECT_EQ(s->dtype, DType::F16);
  DiagSink d2;
  EXPECT_FALSE(spec_from_cli("llama3-8b", "x.json", {}, d2));
  EXPECT_NE(find(d2, "SPEC0122"), nullptr);
  DiagSink d3;
  EXPECT_FALSE(spec_from_cli("", "", {}, d3));
  EXPECT_NE(find(d3, "SPEC0122"), nullptr);
  DiagSink d4;
  s = spec_from_cli("", "", {{"heads", "32/8"}, {"head-dim", "128"}, {"mask", "causal"}}, d4);
  ASSERT_TRUE(s) << d4.render();
  EXPECT_EQ(variant_name(*s), "GQA");
  DiagSink d5;
  EXPECT_FALSE(spec_from_cli("llama3-8b", "", {{"heads", "32/5"}}, d5));  // validated
  EXPECT_NE(find(d5, "SPEC0202"), nullptr);
}

TEST(specSummary, ReadsWell) {
  EXPECT_EQ(summary(*find_preset("llama3-8b")), "llama3-8b: GQA 32/8 heads, d 128, bf16, causal, bshd");
  EXPECT_EQ(describe(find_preset("mistral-7b")->mask), "window(4096,0)");
}

// ---- one vocabulary: include/qattn/kinds.h ------------------------------------------------
// The spec, its reference, the TL, the planner and the kernel IR spell a mask kind and a dtype
// with the same two types (the device runtime's mask.cuh includes the same header).
static_assert(std::is_same_v<decltype(Mask::kind), qattn::MaskKind>);
static_assert(std::is_same_v<MaskKind, qattn::MaskKind>);  // spec::MaskKind (reference.h)
static_assert(std::is_same_v<qattn::tl::MaskSpec::Kind, qattn::MaskKind>);
static_assert(std::is_same_v<decltype(qattn::plan::Problem::mask), qattn::MaskKind>);
static_assert(std::is_same_v<qattn::backend::kir::MaskKind, qattn::MaskKind>);
static_assert(std::is_same_v<DType, qattn::DType>);
static_assert(std::is_same_v<qattn::tl::DType, qattn::DType>);
static_assert(std::is_same_v<decltype(qattn::backend::kir::Kernel::elem), qattn::DType>);
static_assert(std::string_view(qattn::to_string(qattn::MaskKind::CausalTopLeft)) == "causal_top_left");  // constexpr

TEST(specKinds, ToStringRoundTrips) {
  using K = qattn::MaskKind;
  const std::pair<K, const char*> masks[] = {{K::None, "none"},     {K::Bounds, "bounds"}, {K::Causal, "causal"},
                                             {K::CausalTopLeft, "causal_top_left"}, {K::Window, "window"},
                                             {K::Named, "named"}};
  for (const auto& [k, text] : masks) {
    EXPECT_STREQ(qattn::to_string(k), text);
    // Every namespace's to_string is the same one.
    EXPECT_EQ(qattn::spec::to_string(k), qattn::to_string(k));
    EXPECT_EQ(qattn::tl::to_string(k), qattn::to_string(k));
    EXPECT_EQ(qattn::backend::kir::to_string(k), qattn::to_string(k));
    if (k == K::Named) continue;  // a declaration's name, not a TL keyword
    // The TL reads the word back (a window takes its sizes).
    const std::string header = std::string("Kernel k with mask ") + text + (k == K::Window ? "(8, 0)" : "");
    DiagSink d;
    qattn::tl::Program p = qattn::tl::parse(header, d, "k.tl");
    ASSERT_FALSE(d.has_errors()) << header << "\n" << d.render();
    ASSERT_EQ(p.stmts.size(), 1u) << header;
    EXPECT_EQ(p.stmts[0].kernel.mask.kind, k) << header;
  }
  // The spec reads back the words of its own masks (the string shorthand).
  for (K k : {K::None, K::Causal, K::CausalTopLeft}) {
    DiagSink d;
    auto s = parse(std::string(R"({"heads_q": 8, "head_dim": 64, "mask": ")") + qattn::to_string(k) + "\"}", d);
    ASSERT_TRUE(s) << d.render();
    EXPECT_EQ(s->mask.kind, k);
  }
  using T = qattn::DType;
  const std::pair<T, const char*> dtypes[] = {{T::F32, "fp32"},         {T::F16, "fp16"},         {T::BF16, "bf16"},
                                              {T::F8E4M3, "fp8_e4m3"}, {T::F8E5M2, "fp8_e5m2"}, {T::I32, "int32"}};
  for (const auto& [t, text] : dtypes) {
    EXPECT_STREQ(qattn::to_string(t), text);
    EXPECT_EQ(qattn::spec::to_string(t), qattn::to_string(t));
    EXPECT_EQ(qattn::tl::to_string(t), qattn::to_string(t));
    EXPECT_EQ(qattn::tl::parse_dtype(text), t) << text;
    // The spec accepts fp16, bf16 and fp8_e4m3 only.
    const bool spec_dtype = t == T::F16 || t == T::BF16 || t == T::F8E4M3;
    EXPECT_EQ(parse_dtype(text).has_value(), spec_dtype) << text;
    if (spec_dtype) {
      EXPECT_EQ(parse_dtype(text), t) << text;
    }
  }
}

TEST(specKinds, CausalTopLeftIsOneKind) {
  // "causal" + top-left alignment in JSON, the shorthand and the CLI flag: MaskKind::CausalTopLeft.
  DiagSink d;
  auto s = parse(R"({"name": "ctl", "heads_q": 32, "heads_kv": 8, "head_dim": 128, "mask": {"kind": "causal", "align": "top_left"}})", d);
  ASSERT_TRUE(s) << d.render();
  EXPECT_EQ(s->mask.kind, MaskKind::CausalTopLeft);
  EXPECT_EQ(s->mask, (Mask{MaskKind::CausalTopLeft}));
  EXPECT_EQ(describe(s->mask), "causal (top-left)");
  EXPECT_TRUE(validate(*s, d)) << d.render();
  // Printed back exactly as before the one vocabulary: kind "causal" with its align.
  const char* kJson = R"({
  "name": "ctl",
  "heads_q": 32,
  "heads_kv": 8,
  "head_dim_qk": 128,
  "head_dim_v": 128,
  "dtype": "bf16",
  "mask": {
    "kind": "causal",
    "align": "top_left"
  },
  "layout": "bshd",
  "return_lse": false,
  "gpu": ""
}
)";
  EXPECT_EQ(to_json(*s), kJson);
  auto shorthand = parse(R"({"name": "ctl", "heads_q": 32, "heads_kv": 8, "head_dim": 128, "mask": "causal_top_left"})", d);
  ASSERT_TRUE(shorthand) << d.render();
  EXPECT_EQ(*shorthand, *s);
  AttentionSpec f = *find_preset("llama3-8b");
  ASSERT_TRUE(apply_flags(f, {{"mask", "causal_top_left"}}, d)) << d.render();
  EXPECT_EQ(f.mask, (Mask{MaskKind::CausalTopLeft}));
  EXPECT_EQ(summary(f), "llama3-8b: GQA 32/8 heads, d 128, bf16, causal (top-left), bshd");
  // Bottom-right causal keeps its explicit align, as before.
  auto br = parse(R"({"heads_q": 8, "head_dim": 64, "mask": "causal"})", d);
  ASSERT_TRUE(br) << d.render();
  EXPECT_EQ(br->mask.kind, MaskKind::Causal);
  EXPECT_NE(to_json(*br).find("\"kind\": \"causal\",\n    \"align\": \"bottom_right\""), std::string::npos) << to_json(*br);
  // Kinds the spec does not have are refused by validate() (they cannot come from JSON or flags).
  AttentionSpec bad = *s;
  bad.mask.kind = MaskKind::Bounds;
  EXPECT_TRUE(contains(expect_error(bad, "SPEC0107").hint, "none, causal, causal_top_left, window"));
  bad = *s;
  bad.dtype = DType::F32;
  EXPECT_TRUE(contains(expect_error(bad, "SPEC0107").hint, "fp16, bf16, fp8_e4m3"));
}

// ---- the spec's name (issue 18) -----------------------------------------------------------
// tests/hostile/names/name_*.json: a path, a line break that would add TL statements, a shell
// quote, a leading '.', 129 characters. Each is SPEC0217 at the "name" key (line 3), saying which
// characters are allowed; the presets' names pass; safe_name makes any name safe.
// aux_grad (docs/spec.md): round-trips through JSON and the flag; SPEC0234 without an fp32 auxiliary
// input to differentiate; with ALiBi or a bias table it validates.
TEST(specValidate, AuxGrad) {
  AttentionSpec s;
  s.name = "ag";
  s.heads_q = 32;
  s.heads_kv = 8;
  s.head_dim_qk = s.head_dim_v = 128;
  s.aux_grad = true;
  DiagSink d;
  EXPECT_FALSE(validate(s, d));
  const Diagnostic* x = find(d, "SPEC0234");
  ASSERT_NE(x, nullptr) << d.render();
  EXPECT_NE(x->hint.find("relative_bias"), std::string::npos);
  s.variants.alibi = true;
  DiagSink d2;
  EXPECT_TRUE(validate(s, d2)) << d2.render();
  EXPECT_NE(to_json(s).find("\"aux_grad\": true"), std::string::npos) << to_json(s);
  DiagSink d3;
  auto back = parse_json(to_json(s), d3);
  ASSERT_TRUE(back) << d3.render();
  EXPECT_EQ(*back, s);
  AttentionSpec f = s;
  f.aux_grad = false;
  DiagSink d4;
  EXPECT_TRUE(apply_flags(f, {{"aux-grad", "true"}}, d4)) << d4.render();
  EXPECT_TRUE(f.aux_grad);
  DiagSink d5;
  EXPECT_FALSE(apply_flags(f, {{"aux-grad", "maybe"}}, d5));
  // with deterministic: the table's and the slopes' sums are atomic, in no fixed order
  AttentionSpec det = s;
  det.deterministic = true;
  DiagSink d6;
  EXPECT_FALSE(validate(det, d6));
  ASSERT_NE(find(d6, "SPEC0235"), nullptr) << d6.render();
}

// split_keys (docs/spec.md): round-trips through JSON and the flag; with varlen over a KV cache (ragged
// queries over the cache) and SPEC0219 with varlen without one; a mask and a variant split too (each
// part applies them to its own key tiles).
TEST(specValidate, SplitKeys) {
  AttentionSpec s;
  s.name = "split";
  s.heads_q = 32;
  s.heads_kv = 8;
  s.head_dim_qk = s.head_dim_v = 128;
  s.kv_cache = KvCache::Paged;
  s.split_keys = true;
  DiagSink d;
  EXPECT_TRUE(validate(s, d)) << d.render();
  EXPECT_NE(to_json(s).find("\"split_keys\": true"), std::string::npos) << to_json(s);
  auto back = parse_json(to_json(s), d);
  ASSERT_TRUE(back) << d.render();
  EXPECT_EQ(*back, s);
  AttentionSpec f = s;
  f.split_keys = false;
  DiagSink df;
  EXPECT_TRUE(apply_flags(f, {{"split-keys", "true"}}, df)) << df.render();
  EXPECT_TRUE(f.split_keys);
  AttentionSpec cached = s;  // ragged queries over the paged cache, and over per-sequence lengths
  cached.varlen = true;
  for (KvCache kc : {KvCache::Paged, KvCache::Lengths}) {
    cached.kv_cache = kc;
    DiagSink dc;
    EXPECT_TRUE(validate(cached, dc)) << to_string(kc) << dc.render();
  }
  AttentionSpec bad = s;
  bad.varlen = true;
  bad.kv_cache = KvCache::None;  // packed ragged keys
  DiagSink db;
  EXPECT_FALSE(validate(bad, db));
  const Diagnostic* x = find(db, "SPEC0219");
  ASSERT_NE(x, nullptr) << db.render();
  EXPECT_FALSE(x->hint.empty());
  AttentionSpec masked = s;
  masked.mask = Mask{MaskKind::Causal};
  masked.variants.softcap = 30.0;
  DiagSink dm;
  EXPECT_TRUE(validate(masked, dm)) << dm.render();
}

TEST(specValidate, NameIsASafeIdentifier) {
  const std::string dir = std::string(QATTN_SOURCE_DIR) + "/tests/hostile/names/";
  const std::pair<const char*, const char*> files[] = {
      {"name_dotdot.json", "does not start with a letter or a digit"},
      {"name_newline.json", "contains the byte 0x0a"},
      {"name_quote.json", "contains '''"},
      {"name_slash.json", "contains '/'"},
      {"name_leading_dot.json", "does not start with a letter or a digit"},
      {"name_too_long.json", "is 129 characters long (at most 128)"},
  };
  for (const auto& [file, why] : files) {
    DiagSink d;
    SourceMap where;
    auto s = load_json_file(dir + file, d, &where);
    ASSERT_TRUE(s) << file << d.render();
    EXPECT_FALSE(validate(*s, d, &where)) << file;
    const Diagnostic* x = find(d, "SPEC0217");
    ASSERT_NE(x, nullptr) << file << d.render();
    EXPECT_EQ(d.error_count(), 1) << file << d.render();
    EXPECT_EQ(x->loc.line, 3) << file;
    EXPECT_TRUE(contains(x->message, why)) << file << ": " << x->message;
    EXPECT_TRUE(contains(x->message, "A-Z a-z 0-9 . _ -")) << x->message;
    EXPECT_EQ(x->message.find('\n'), std::string::npos) << "the name is shown escaped: " << x->message;
    EXPECT_TRUE(is_safe_name(s->name) == false && is_safe_name(safe_name(s->name))) << file;
  }
  // Through the CLI flag too.
  DiagSink d;
  EXPECT_FALSE(spec_from_cli("llama3-8b", "", {{"name", "a/../../b"}}, d));
  EXPECT_NE(find(d, "SPEC0217"), nullptr) << d.render();
  AttentionSpec dots = base();
  dots.name = "a..b";
  EXPECT_TRUE(contains(expect_error(dots, "SPEC0217").message, "contains \"..\""));
  // What passes: every preset, the binding's kernel names, the longest name, no name.
  for (const auto& p : presets()) EXPECT_TRUE(is_safe_name(p.spec.name)) << p.spec.name;
  for (const char* ok : {"py_bf16_d128_causal_lse", "llama3.1-405b", "A", "9x", "my-kernel_v2.1"}) EXPECT_TRUE(is_safe_name(ok)) << ok;
  EXPECT_TRUE(is_safe_name(std::string(128, 'a')));
  AttentionSpec unnamed = base();
  unnamed.name.clear();
  DiagSink d2;
  EXPECT_TRUE(validate(unnamed, d2)) << d2.render();
  // safe_name: identity on safe names, and safe for anything.
  EXPECT_EQ(safe_name("llama3.1-405b"), "llama3.1-405b");
  EXPECT_EQ(safe_name("../x"), "n.__x");
  EXPECT_EQ(safe_name("a\nb c"), "a_b_c");
  EXPECT_EQ(safe_name(""), "");
  EXPECT_EQ(safe_name(std::string(300, 'z')).size(), kMaxNameLength);
  for (const char* bad : {"..", "/", "\n", "a..b", "-x", "x/y", "\x01", "\xff\xfe", "..."}) EXPECT_TRUE(is_safe_name(safe_name(bad))) << bad;
}

// A spec built in code skips validate(): the plan still sees a safe name, so a line break in it
// adds no TL statement and the kernel name stays one identifier.
TEST(specValidate, AnUnvalidatedNameCannotInjectTl) {
  AttentionSpec s = base();
  s.name = "x\nCompute Multiply O, 0 and get O\n# ";
  const auto p = qattn::plan::make_problem(s);
  EXPECT_TRUE(is_safe_name(p.name)) << p.name;
  EXPECT_EQ(p.name.find('\n'), std::string::npos);
}
