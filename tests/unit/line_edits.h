// Every one-line edit of a program text, for the hostile translation tests (emit_test.cc,
// emit_combine_test.cc): each line deleted, and each line swapped with the next.
#pragma once
#include <cstddef>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace qattn::testutil {

// fn(edited text, index of the line deleted or swapped with the next), deletion first.
inline void each_line_edit(const std::string& code, const std::function<void(const std::string&, size_t)>& fn) {
  std::vector<std::string> lines;
  std::istringstream in(code);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  auto join = [](const std::vector<std::string>& ls) {
    std::string t;
    for (const auto& l : ls) t += l + "\n";
    return t;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<std::string> del = lines, swp = lines;
    del.erase(del.begin() + long(i));
    if (i + 1 < lines.size()) std::swap(swp[i], swp[i + 1]);
    fn(join(del), i);
    fn(join(swp), i);
  }
}

}  // namespace qattn::testutil
