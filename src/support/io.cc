#include "support/io.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

namespace qattn::support {
namespace fs = std::filesystem;

std::optional<std::ifstream> open_input(const fs::path& path, DiagSink& diags) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    diags.error("IO0001", {}, "cannot read '" + path.string() + "': it is a directory", "pass a file");
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error("IO0001", {}, "cannot read '" + path.string() + "': " + std::strerror(errno),
                "check the path and its permissions");
    return std::nullopt;
  }
  return in;
}

std::optional<std::string> read_file(const fs::path& path, DiagSink& diags) {
  auto in = open_input(path, diags);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in->rdbuf();
  return ss.str();
}

namespace {

fs::path temp_name(const fs::path& path) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string name = ".";
  name += path.filename().string();
  name += ".tmp";
  name += std::to_string(rng() % 1000000007);
  return path.parent_path() / name;
}

bool write_raw(const fs::path& path, const std::string& content, DiagSink& diags) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    diags.error("IO0002", {}, "cannot write '" + path.string() + "': " + std::strerror(errno),
                "check that the folder is writable");
    return false;
  }
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) {
    diags.error("IO0002", {}, "writing '" + path.string() + "' failed", "check free disk space");
    return false;
  }
  return true;
}

}  // namespace

bool write_file_atomic(const fs::path& path, const std::string& content, DiagSink& diags) {
  ArtifactSet set;
  set.stage(path, content);
  return set.commit(diags);
}

void ArtifactSet::stage(fs::path path, std::string content) {
  paths_.push_back(std::move(path));
  contents_.push_back(std::move(content));
}

bool ArtifactSet::commit(DiagSink& diags) {
  std::vector<fs::path> temps;
  auto cleanup = [&] {
    std::error_code ec;
    for (const auto& t : temps) fs::remove(t, ec);
  };
  for (size_t i = 0; i < paths_.size(); ++i) {
    std::error_code ec;
    const auto parent = paths_[i].parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) {
      diags.error("IO0002", {}, "cannot create folder '" + parent.string() + "': " + ec.message(),
                  "check that the output path is writable");
      cleanup();
      return false;
    }
    auto tmp = temp_name(paths_[i]);
    temps.push_back(tmp);
    if (!write_raw(tmp, contents_[i], diags)) {
      cleanup();
      return false;
    }
  }
  for (size_t i = 0; i < paths_.size(); ++i) {
    std::error_code ec;
    fs::rename(temps[i], paths_[i], ec);
    if (ec) {
      diags.error("IO0002", {}, "cannot move '" + paths_[i].string() + "' into place: " + ec.message(), "");
      cleanup();
      return false;
    }
  }
  return true;
}

}  // namespace qattn::support

namespace qattn::support {
namespace {
bool has_runtime(const std::filesystem::path& dir) {
  std::error_code ec;
  return !dir.empty() && std::filesystem::is_regular_file(dir / "include" / "qattn" / "qattn.h", ec);
}
}  // namespace

std::filesystem::path installed_data_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return {};
  const auto dir = exe.parent_path().parent_path() / "share" / "qattn";
  return has_runtime(dir) ? dir : std::filesystem::path();
}
std::filesystem::path source_dir() {
  if (const char* v = std::getenv("QATTN_HOME"); v && *v) return v;
  static const std::filesystem::path installed = installed_data_dir();
  if (!installed.empty()) return installed;
  return QATTN_SOURCE_DIR;
}
std::filesystem::path python_dir() {
  if (const char* v = std::getenv("QATTN_PYTHON_DIR"); v && *v) return v;
  std::error_code ec;
  const auto dir = source_dir() / "python";
  return std::filesystem::is_directory(dir / "qattn", ec) ? dir : std::filesystem::path();
}
std::pair<std::string, std::string> python_path_env() {
  std::string path = python_dir().string();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += (path.empty() ? "" : ":") + std::string(old);
  return {"PYTHONPATH", path};
}
std::string default_python() {
  if (const char* v = std::getenv("PYTHON"); v && *v) return v;
#ifdef QATTN_DEFAULT_PYTHON
  std::error_code ec;
  if (std::filesystem::exists(QATTN_DEFAULT_PYTHON, ec)) return QATTN_DEFAULT_PYTHON;
#endif
  return "python3";
}
}  // namespace qattn::support
