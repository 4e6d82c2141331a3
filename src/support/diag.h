// Diagnostics: every user-reachable failure in qattn is a Diagnostic with a stable code,
// a location (file:line:col), a message, and a hint. Nothing throws across module boundaries.
#pragma once
#include <string>
#include <vector>

namespace qattn::support {

struct SrcLoc {
  int line = 0;  // 1-based; 0 means "no location"
  int col = 0;   // 1-based
};

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  std::string code;     // stable, e.g. "TL0301"
  std::string file;     // may be empty
  SrcLoc loc;
  std::string message;  // one line, no trailing period needed
  std::string hint;     // how to fix it; may be empty
};

// Collects diagnostics. Passes take a DiagSink& and report into it.
class DiagSink {
 public:
  explicit DiagSink(std::string file = {}) : file_(std::move(file)) {}
  void error(std::string code, SrcLoc loc, std::string message, std::string hint = {});
  void warning(std::string code, SrcLoc loc, std::string message, std::string hint = {});
  void add(Diagnostic d);
  bool has_errors() const { return errors_ > 0; }
  int error_count() const { return errors_; }
  const std::vector<Diagnostic>& all() const { return diags_; }
  const std::string& file() const { return file_; }
  void set_file(std::string f) { file_ = std::move(f); }
  // Render all diagnostics, one per block: "file:line:col: error TL0301: msg\n  hint: ...\n".
  std::string render() const;

 private:
  std::string file_;
  std::vector<Diagnostic> diags_;
  int errors_ = 0;
};

std::string render(const Diagnostic& d);

}  // namespace qattn::support
