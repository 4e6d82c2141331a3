// libFuzzer target for the spec reader. Input: arbitrary bytes as a spec JSON file.
// spec::parse_json, then spec::validate on what it accepts, must never crash or throw; a spec that
// parses and validates must print (spec::to_json) to text that parses back to the same spec
// (docs/spec.md: parse_json(to_json(s)) == s), else __builtin_trap().
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qattn;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  support::DiagSink d1("fuzz.json");
  spec::SourceMap where;
  auto s = spec::parse_json(text, d1, &where);
  if (s) {
    support::DiagSink d2("fuzz.json");
    if (spec::validate(*s, d2, &where)) {
      const std::string canon = spec::to_json(*s);
      support::DiagSink d3;
      auto back = spec::parse_json(canon, d3);
      if (!back || spec::to_json(*back) != canon) __builtin_trap();
    }
    (void)d2.render();
  }
  (void)d1.render();
  return 0;
}
