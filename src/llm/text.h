// Small text helpers of the LLM stages' sources (one definition, used by several files).
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace qattn::llm::text {

// The environment variable's value, "" when unset.
inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// s without leading and trailing blanks and tabs.
inline std::string trim(std::string_view s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t");
  return a == std::string_view::npos ? std::string() : std::string(s.substr(a, b - a + 1));
}

// JSON text; invalid UTF-8 in strings is replaced, never thrown on (replies are hostile).
inline std::string dump(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace qattn::llm::text
