// libFuzzer target for the TL front end. Input: arbitrary bytes as a TL file.
// parse -> print -> parse -> print: the parser and printer must never crash, and for an input that
// parses without errors the second print must equal the first (and parse without errors), else
// __builtin_trap(). A clean program then goes through the checker, which must not crash either.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tl/parser.h"
#include "tl/printer.h"
#if __has_include("tl/checker.h") && defined(QATTN_FUZZ_CHECKER)
#include "tl/checker.h"
#define QATTN_HAVE_CHECKER 1
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qattn;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  support::DiagSink d1;
  tl::Program p1 = tl::parse(text, d1, "fuzz.tl");
  std::string first = tl::print(p1);
  support::DiagSink d2;
  tl::Program p2 = tl::parse(first, d2, "fuzz.tl");
  std::string second = tl::print(p2);
  if (!d1.has_errors()) {
    if (d2.has_errors() || first != second) __builtin_trap();
#ifdef QATTN_HAVE_CHECKER
    support::DiagSink d3;
    tl::check(p1, d3);
#endif
  } else if (d2.has_errors() || first != second) {
    // What the parser kept from a broken file is itself a valid program and prints the same.
    __builtin_trap();
  }
  (void)d1.render();  // rendering any message must be safe too
  return 0;
}
