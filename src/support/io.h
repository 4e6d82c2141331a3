// File input/output for the CLI and the pipeline. Reads report a diagnostic instead of throwing;
// writes are atomic (a temporary file renamed into place), so an interrupted or failed run never
// leaves a half-written artifact behind.
#pragma once
#include <filesystem>
#include <fstream>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include "support/diag.h"

namespace qattn::support {

// Reads a whole file. On failure reports IO0001 (with the OS reason) and returns nullopt.
std::optional<std::string> read_file(const std::filesystem::path& path, DiagSink& diags);
// The file opened for reading, or IO0001 (a folder, missing, unreadable) and nullopt; read_file
// and read_file_capped (bounded_io.h) both open through it.
std::optional<std::ifstream> open_input(const std::filesystem::path& path, DiagSink& diags);

// Writes `content` to `path` atomically (creating parent folders). Reports IO0002 on failure.
bool write_file_atomic(const std::filesystem::path& path, const std::string& content, DiagSink& diags);

// A set of files written all-or-nothing: stage() collects, commit() writes every file to a
// temporary name first and renames them into place only when all writes succeeded; on failure
// the temporaries are removed and nothing in the destination changes.
class ArtifactSet {
 public:
  void stage(std::filesystem::path path, std::string content);
  bool commit(DiagSink& diags);
  const std::vector<std::filesystem::path>& paths() const { return paths_; }

 private:
  std::vector<std::filesystem::path> paths_;
  std::vector<std::string> contents_;
};

}  // namespace qattn::support

namespace qattn::support {
// Where the files the compiler reads at run time live (device/ runtime headers, include/, prompts/
// and the files the prompts include): $QATTN_HOME when set; else, for an installed binary
// (`pip install .`: <prefix>/bin/qattn), <prefix>/share/qattn beside it; else the source tree it
// was built from.
std::filesystem::path source_dir();
// The installed data folder of this executable (<exe>/../share/qattn), or empty when it has none.
std::filesystem::path installed_data_dir();
// The Python package's folder (holds qattn/): $QATTN_PYTHON_DIR, else <source_dir>/python, else
// empty (an installed package: importable without PYTHONPATH).
std::filesystem::path python_dir();
// PYTHONPATH for a helper Python process that imports the package: python_dir() (when there is
// one), then the current PYTHONPATH.
std::pair<std::string, std::string> python_path_env();
// The Python interpreter for helper processes: $PYTHON, else the one that installed this binary
// (`pip install .`), else python3.
std::string default_python();
}  // namespace qattn::support
