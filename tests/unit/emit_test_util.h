// Helpers of the translator's text tests (emit_test.cc: the forward; emit_backward_test.cc: the
// backward pass): the target of a GPU name, the planner's TL for a preset, a translation, and an edit
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

}  // namespace qattn::backend::emit_test
