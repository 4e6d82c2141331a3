// Artifact folders written whole, and the checks on --out (see artifact_dir.h).
#include "support/artifact_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

namespace qattn::support {
namespace fs = std::filesystem;

namespace {

// The names qattn writes into an artifacts folder (a folder holding only these was written by an
// older qattn, before the marker existed, and may be replaced).
const std::set<std::string>& artifact_names() {
  static const std::set<std::string> names = {"spec.json", "sketch.tl",          "code.tl",   "plan.md", "kernel.cu",
                                              "kernel.kir", "libqattn_kernel.so", "build.log", "llm"};
  return names;
}
const std::set<std::string>& llm_names() {
  static const std::set<std::string> names = {"transcript.jsonl", "summary.json", "summary.md"};
  return names;
}

// Folders never to be replaced, whatever they hold (their lexical and resolved forms are compared).
const std::set<std::string>& system_folders() {
  static const std::set<std::string> dirs = {"/",     "/bin",  "/boot", "/dev",  "/etc",     "/home",    "/lib",
                                             "/lib32", "/lib64", "/media", "/mnt", "/opt",    "/proc",    "/root",
                                             "/run",  "/sbin", "/srv",  "/sys",  "/tmp",     "/usr",     "/var",
                                             "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin", "/usr/share", "/var/tmp"};
  return dirs;
}

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) return p.lexically_normal();
  fs::path c = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : c;
}

std::string no_trailing_slash(fs::path p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The root of the file system (mount) the current folder is on: the highest ancestor on the same device.
fs::path cwd_mount_root() {
  std::error_code ec;
  fs::path cur = fs::current_path(ec);
  if (ec) return {};
  cur = resolved(cur);
  struct stat st {};
  if (::stat(cur.c_str(), &st) != 0) return {};
  while (cur.has_parent_path() && cur.parent_path() != cur) {
    struct stat up {};
    if (::stat(cur.parent_path().c_str(), &up) != 0 || up.st_dev != st.st_dev) break;
    cur = cur.parent_path();
  }
  return cur;
}

bool old_temp_name(const std::string& n) {  // ".code.tl.tmp123": a temporary of the per-file writer
  if (n.size() < 2 || n[0] != '.') return false;
  const auto at = n.find(".tmp", 1);
  return at != std::string::npos && artifact_names().count(n.substr(1, at - 1));
}

// Whether every entry of the existing folder `dir` is something qattn writes.
bool only_artifacts(const fs::path& dir, std::string* first_foreign) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    bool ok = artifact_names().count(n) || old_temp_name(n);
    if (ok && n == "llm") {
      ok = it->is_directory(ec) && !it->is_symlink(ec);
      for (fs::directory_iterator in(it->path(), ec), e2; ok && !ec && in != e2; in.increment(ec))
        ok = llm_names().count(in->path().filename().string()) > 0;
    }
    if (!ok) {
      *first_foreign = n;
      return false;
    }
  }
  return !ec;
}

std::string random_suffix() {
  static std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  return std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000007);
}

bool write_one(const fs::path& path, const std::string& content, DiagSink& diags) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!ec && out) {
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (out) return true;
  }
  diags.error("OUT0104", {}, "cannot write '" + path.string() + "': " + (ec ? ec.message() : std::strerror(errno)),
              "check that the folder is writable and the disk has space");
  return false;
}

// Puts the folder `tmp` in the place of the existing folder `dest`; `tmp` then holds the old one.
bool exchange(const fs::path& tmp, const fs::path& dest, std::string* why) {
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dest.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) {
    *why = std::strerror(errno);
    return false;
  }
#endif
  // No atomic exchange on this file system: move the old folder aside, the new one in, and back on failure.
  const fs::path aside = dest.parent_path() / ("." + dest.filename().string() + ".old-" + random_suffix());
  std::error_code ec;
  fs::rename(dest, aside, ec);
  if (ec) {
    *why = ec.message();
    return false;
  }
  fs::rename(tmp, dest, ec);
  if (ec) {
    *why = ec.message();
    std::error_code back;
    fs::rename(aside, dest, back);
    return false;
  }
  fs::rename(aside, tmp, ec);
  return true;
}

}  // namespace

bool check_out_folder(const fs::path& out, DiagSink& diags) {
  const std::string hint_new = "pass a new or empty folder, e.g. --out artifacts/<name>-<gpu>";
  if (out.empty()) {
    diags.error("OUT0101", {}, "the output folder is empty", hint_new);
    return false;
  }
  std::error_code ec;
  const fs::path abs = fs::absolute(out, ec).lexically_normal();
  const fs::path real = resolved(out);
  std::string why;
  for (const auto& p : {no_trailing_slash(abs), no_trailing_slash(real)})
    if (system_folders().count(p)) why = "a system folder";
  const char* home = std::getenv("HOME");
  if (why.empty() && home && *home && no_trailing_slash(resolved(home)) == no_trailing_slash(real)) why = "your home folder ($HOME)";
  const fs::path mount = cwd_mount_root();
  if (why.empty() && !mount.empty() && no_trailing_slash(mount) == no_trailing_slash(real))
    why = "the root of the file system the current folder is on";
  if (!why.empty()) {
    diags.error("OUT0101", {}, "refusing to write artifacts into '" + out.string() + "': it is " + why +
                                   ", and qattn replaces its output folder whole",
                hint_new);
    return false;
  }
  const auto st = fs::status(real, ec);
  if (!fs::exists(st)) return true;
  if (!fs::is_directory(st)) {
    diags.error("OUT0102", {}, "the output folder '" + out.string() + "' exists and is not a folder",
                "remove it or pass another --out");
    return false;
  }
  if (fs::exists(real / kArtifactMarker, ec)) return true;
  std::string foreign;
  if (only_artifacts(real, &foreign)) return true;
  diags.error("OUT0103", {},
              "refusing to replace '" + out.string() + "': it holds '" + foreign +
                  "', which qattn did not write (qattn replaces its output folder whole; a folder it wrote holds " +
                  kArtifactMarker + ")",
              hint_new + "; or remove the folder's other files first");
  return false;
}

void ArtifactDir::stage(fs::path name, std::string content) {
  names_.push_back(std::move(name));
  contents_.push_back(std::move(content));
}

// Temporary siblings of `dest` (".<out>.tmp-*") that a run killed while writing left behind: those
// not touched for kStaleTemporaryAge are removed (a commit writes its folder in well under a
// second, so a younger one may belong to a run into the same --out going on now).
void remove_stale_temporaries(const fs::path& dest) {
  const std::string prefix = "." + dest.filename().string() + ".tmp-";
  std::error_code ec;
  fs::directory_iterator it(dest.parent_path(), ec), end;
  const auto now = fs::file_time_type::clock::now();
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (name.rfind(prefix, 0) != 0 || !it->is_directory(e2) || it->is_symlink(e2)) continue;
    const auto t = fs::last_write_time(it->path(), e2);
    if (!e2 && now - t > kStaleTemporaryAge) fs::remove_all(it->path(), e2);
  }
}

bool ArtifactDir::commit(const fs::path& out, DiagSink& diags) const {
  if (!check_out_folder(out, diags)) return false;
  for (const auto& n : names_) {
    bool inside = !n.empty() && n.is_relative();
    for (const auto& part : n) inside = inside && part != ".." && part != ".";
    if (!inside) {
      diags.error("OUT0104", {}, "artifact name '" + n.string() + "' is not a plain path inside the folder",
                  "this is a bug in qattn; please report it");
      return false;
    }
  }
  const fs::path dest = resolved(out);
  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  remove_stale_temporaries(dest);
  fs::path tmp = dest.parent_path() / ("." + dest.filename().string() + ".tmp-" + random_suffix());
  if (ec || !fs::create_directory(tmp, ec) || ec) {
    diags.error("OUT0104", {}, "cannot create '" + tmp.string() + "': " + (ec ? ec.message() : "it exists"),
                "check that the folder above --out is writable");
    return false;
  }
  auto fail = [&] {
    std::error_code e2;
    fs::remove_all(tmp, e2);
    return false;
  };
  for (size_t i = 0; i < names_.size(); ++i)
    if (!write_one(tmp / names_[i], contents_[i], diags)) return fail();
  if (!write_one(tmp / kArtifactMarker,
                 "This folder was written by qattn. The next run with the same --out replaces it whole.\n", diags))
    return fail();
  std::string why;
  const bool existed = fs::exists(dest, ec);
  bool moved = false;
  if (existed) {
    moved = exchange(tmp, dest, &why);
  } else {
    fs::rename(tmp, dest, ec);
    moved = !ec;
    if (ec) why = ec.message();
  }
  if (!moved) {
    diags.error("OUT0104", {}, "cannot move the new artifacts into '" + out.string() + "': " + why,
                "the folder was left as it was; check its permissions");
    return fail();
  }
  if (existed) fs::remove_all(tmp, ec);  // the previous run's folder
  return true;
}

}  // namespace qattn::support
