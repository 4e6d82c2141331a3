#include "support/diag.h"

namespace qattn::support {

void DiagSink::add(Diagnostic d) {
  if (d.file.empty()) d.file = file_;
  if (d.severity == Severity::Error) ++errors_;
  diags_.push_back(std::move(d));
}

void DiagSink::error(std::string code, SrcLoc loc, std::string message, std::string hint) {
  add(Diagnostic{Severity::Error, std::move(code), file_, loc, std::move(message), std::move(hint)});
}

void DiagSink::warning(std::string code, SrcLoc loc, std::string message, std::string hint) {
  add(Diagnostic{Severity::Warning, std::move(code), file_, loc, std::move(message), std::move(hint)});
}

std::string render(const Diagnostic& d) {
  std::string out;
  out += d.file.empty() ? std::string("qattn") : d.file;
  if (d.loc.line > 0) {
    out += ":" + std::to_string(d.loc.line);
    if (d.loc.col > 0) out += ":" + std::to_string(d.loc.col);
  }
  out += ": ";
  out += d.severity == Severity::Error ? "error" : d.severity == Severity::Warning ? "warning" : "note";
  out += " " + d.code + ": " + d.message + "\n";
  if (!d.hint.empty()) out += "  hint: " + d.hint + "\n";
  return out;
}

std::string DiagSink::render() const {
  std::string out;
  for (const auto& d : diags_) out += support::render(d);
  return out;
}

}  // namespace qattn::support
