// Helpers shared by the unit tests that look for diagnostics in a DiagSink.
#pragma once
#include <string>

#include "support/diag.h"

namespace qattn::test {

// The first diagnostic with `code`, or nullptr.
inline const support::Diagnostic* find(const support::DiagSink& d, const std::string& code) {
  for (const auto& x : d.all())
    if (x.code == code) return &x;
  return nullptr;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace qattn::test
