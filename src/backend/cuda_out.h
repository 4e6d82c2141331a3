// Indented C++ text, as the statement-by-statement lowerings write it (src/backend/bwd,
// src/backend/combine).
#pragma once
#include <sstream>
#include <string>

namespace qattn::backend {

class CudaOut {
 public:
  void line(const std::string& s = {}) { os_ << (s.empty() ? "" : std::string(indent_ * 2, ' ') + s) << "\n"; }
  void open(const std::string& s) { line(s); ++indent_; }
  void close(const std::string& s = "}") { --indent_; line(s); }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
  int indent_ = 0;
};

}  // namespace qattn::backend
