// Helpers of the translator's text tests (emit_test.cc: the forward; emit_backward_test.cc and
// emit_backward_wgmma_test.cc: the backward pass): the target of a GPU name, the planner's TL for a preset, a translation, and an edit
// of a program that the translation must refuse with given diagnostics.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/translate.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "tl/parser.h"


namespace qattn::backend::emit_test {

inline plan::Target target(const std::string& gpu) {
  const hw::GpuFacts* g = hw::find_gpu(gpu);
  EXPECT_NE(g, nullptr) << gpu;
  return g ? plan::make_target(*g) : plan::Target{};
}

inline std::string join_flags(const Translation& t) {
  std::string s;
  for (const auto& f : t.nvcc_flags) s += f + " ";
  return s;
}

inline bool has(const support::DiagSink& d, const std::string& code) {
  for (const auto& x : d.all())
    if (x.code == code) return true;
  return false;
}

// The planner's TL code for a preset on a GPU, with optional spec overrides.
inline std::string plan_code(const std::string& preset, const std::string& gpu, std::map<std::string, std::string> flags = {}) {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset(preset);
  flags["gpu"] = gpu;
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  auto p = plan::make_plan(s, *hw::find_gpu(gpu), d);
  EXPECT_TRUE(p.has_value()) << preset << " on " << gpu << "\n" << d.render();
  return p ? p->code : std::string();
}

inline std::optional<Translation> xlate(const std::string& code, const std::string& gpu, support::DiagSink& d) {
  return translate_text(code, target(gpu), d, "test.tl");
}

// `code` with its first `from` replaced by `to` is refused for `gpu`, with every one of `needles` in
// the diagnostics.
inline void expect_refused(const std::string& code, const std::string& from, const std::string& to, const std::string& gpu,
                    std::initializer_list<const char*> needles) {
  const size_t at = code.find(from);
  ASSERT_NE(at, std::string::npos) << "no `" << from << "` in\n" << code;
  std::string edited = code;
  edited.replace(at, from.size(), to);
  support::DiagSink d;
  EXPECT_FALSE(xlate(edited, gpu, d).has_value()) << "`" << to << "` translated";
  EXPECT_TRUE(d.has_errors());
  for (const char* n : needles) EXPECT_NE(d.render().find(n), std::string::npos) << n << "\n" << d.render();
}

// ---- the backward pass (emit_backward_test.cc, emit_backward_wgmma_test.cc) ----

// The rules engine's backward plan of a preset on a GPU (nullopt: refused, the reason in d).
inline std::optional<plan::Plan> try_plan_backward(const std::string& preset, const std::string& gpu,
                                                   std::map<std::string, std::string> flags, plan::PlanOptions o,
                                                   support::DiagSink& d) {
  spec::AttentionSpec s = *spec::find_preset(preset);
  flags["gpu"] = gpu;
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  o.backward = true;
  return plan::make_plan(s, *hw::find_gpu(gpu), d, o);
}

inline std::string plan_backward(const std::string& preset, const std::string& gpu, std::map<std::string, std::string> flags = {},
                                 plan::PlanOptions o = {}) {
  support::DiagSink d;
  auto p = try_plan_backward(preset, gpu, std::move(flags), o, d);
  EXPECT_TRUE(p.has_value()) << preset << " on " << gpu << "\n" << d.render();
  return p ? p->code : std::string();
}

// How many times `needle` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(needle, at)) != std::string::npos; at += needle.size()) ++n;
  return n;
}

// The natural form (S = Q K^T; `--bwd-form natural`): on mma.sync, except at d192 / d256 / MLA on sm90 (wgmma).
inline plan::PlanOptions natural_form() {
  plan::PlanOptions o;
  o.bwd_form = 1;
  return o;
}

// The natural form on mma.sync's layouts (`--bwd-form natural-mma`): the d256 form before the wgmma one.
inline plan::PlanOptions natural_mma() {
  plan::PlanOptions o;
  o.bwd_form = 3;
  return o;
}

}  // namespace qattn::backend::emit_test
