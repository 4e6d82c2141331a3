#include "build/nvcc.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "support/io.h"
#include "support/sha256.h"

namespace qattn::build {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a command through the shell, capturing stdout+stderr. Returns the exit status (-1 on failure
// to start).
int run_capture(const std::string& cmd, std::string& out) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string find_nvcc() {
  if (auto v = env("QATTN_NVCC"); !v.empty()) return fs::exists(v) ? v : std::string();
  std::string path = env("PATH");
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && fs::exists(fs::path(dir) / "nvcc")) return (fs::path(dir) / "nvcc").string();
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return {};
}

std::string find_cutlass() {
  auto ok = [](const fs::path& p) { return fs::exists(p / "cute" / "tensor.hpp"); };
  if (auto v = env("QATTN_CUTLASS_INCLUDE"); !v.empty()) return ok(v) ? v : std::string();
  std::string out;
  std::string py = env("PYTHON").empty() ? "python3" : env("PYTHON");
  if (run_capture(py + " -c \"import cutlass_library; print(cutlass_library.source_path + '/include')\"", out) == 0) {
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    auto nl = out.rfind('\n');
    if (nl != std::string::npos) out = out.substr(nl + 1);
    if (ok(out)) return out;
  }
  fs::path local = support::source_dir() / ".cutlass" / "include";
  if (ok(local)) return local.string();
  return {};
}

fs::path device_dir() {
  if (auto v = env("QATTN_DEVICE_DIR"); !v.empty()) return v;
  return support::source_dir() / "device";
}

// Hash of every device runtime header, so a runtime change invalidates cached kernels.
std::string runtime_digest(const fs::path& dir) {
  std::string all;
  std::error_code ec;
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
    if (it->is_regular_file()) files.push_back(it->path());
  std::sort(files.begin(), files.end());
  support::DiagSink ignore;
  for (const auto& f : files) {
    all += f.filename().string();
    if (auto t = support::read_file(f, ignore)) all += *t;
  }
  return support::sha256_hex(all);
}

}  // namespace

fs::path default_cache_dir() {
  if (auto v = env("QATTN_CACHE_DIR"); !v.empty()) return v;
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "qattn";
  if (auto v = env("HOME"); !v.empty()) return fs::path(v) / ".cache" / "qattn";
  return fs::temp_directory_path() / "qattn-cache";
}

std::optional<Toolchain> find_toolchain(support::DiagSink& diags) {
  Toolchain tc;
  tc.nvcc = find_nvcc();
  if (tc.nvcc.empty()) {
    diags.error("BUILD0101", {}, "nvcc (the CUDA compiler) was not found",
                "install the CUDA toolkit, put nvcc on PATH or set QATTN_NVCC; `qattn generate` still writes kernel.cu");
    return std::nullopt;
  }
  std::string ver;
  run_capture(shell_quote(tc.nvcc) + " --version", ver);
  auto pos = ver.rfind("Cuda compilation tools");
  tc.nvcc_version = pos == std::string::npos ? ver : ver.substr(pos, ver.find('\n', pos) - pos);
  std::string cutlass = find_cutlass();
  if (cutlass.empty()) {
    diags.error("BUILD0102", {}, "the CUTLASS/CuTe headers were not found",
                "run scripts/setup.sh (pip install nvidia-cutlass==4.2.0.0) or set QATTN_CUTLASS_INCLUDE");
    return std::nullopt;
  }
  fs::path dev = device_dir();
  if (!fs::exists(dev / "qattn")) {
    diags.error("BUILD0103", {}, "the qattn device runtime headers were not found in " + dev.string(),
                "set QATTN_DEVICE_DIR to the folder that holds qattn/*.cuh");
    return std::nullopt;
  }
  tc.include_dirs = {cutlass, dev.string(), (support::source_dir() / "include").string()};
  return tc;
}

std::vector<std::string> nvcc_command(const backend::Translation& t, const Toolchain& tc, const fs::path& source,
                                      const fs::path& output, int also_sm) {
  std::vector<std::string> cmd = {tc.nvcc, "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v"};
  for (const auto& f : t.nvcc_flags) cmd.push_back(f);
  const std::string target = t.arch.size() > 2 ? t.arch.substr(2) : t.arch;  // "sm80" -> "80"
  if (also_sm > 0 && std::to_string(also_sm) != target)
    cmd.push_back("-gencode=arch=compute_" + target + ",code=sm_" + std::to_string(also_sm));
  for (const auto& d : tc.include_dirs) cmd.push_back("-I" + d);
  cmd.push_back("-o");
  cmd.push_back(output.string());
  cmd.push_back(source.string());
  return cmd;
}

std::optional<BuildResult> build_library(const backend::Translation& t, const Toolchain& tc, support::DiagSink& diags,
                                         const BuildOptions& opts) {
  auto say = [&](const std::string& s) {
    if (opts.progress) opts.progress(s);
  };
  BuildResult r;
  std::string flags;
  for (const auto& f : t.nvcc_flags) flags += f + "\n";
  flags += "also_sm=" + std::to_string(opts.also_sm) + "\n";
  // The device runtime and include/ (qattn.h, and kinds.h that the runtime's mask.cuh includes) are
  // part of every kernel: include_dirs[1] and [2].
  std::string headers;
  for (size_t i = 1; i < tc.include_dirs.size(); ++i) headers += runtime_digest(tc.include_dirs[i]);
  r.key = support::sha256_hex(t.cuda_source + "\n--flags--\n" + flags + tc.nvcc_version + "\n" + headers + "\n" +
                              tc.include_dirs[0]);
  fs::path cache = opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir;
  r.entry = cache / r.key.substr(0, 2) / r.key;
  r.library = r.entry / "libqattn_kernel.so";
  std::error_code ec;
  if (opts.use_cache && fs::exists(r.library, ec)) {
    r.cache_hit = true;
    support::DiagSink ignore;
    r.log = support::read_file(r.entry / "build.log", ignore).value_or("");
    say("cache hit " + r.key.substr(0, 12) + " (" + r.entry.string() + ")");
    return r;
  }
  // Build in a fresh temporary folder next to the entry, then rename it into place.
  static std::mt19937_64 rng{std::random_device{}()};
  fs::path tmp = cache / r.key.substr(0, 2) / (".tmp-" + r.key.substr(0, 12) + "-" + std::to_string(rng() % 1000000));
  fs::create_directories(tmp, ec);
  if (ec) {
    diags.error("BUILD0202", {}, "cannot create the build cache folder " + tmp.string() + ": " + ec.message(),
                "set QATTN_CACHE_DIR to a writable folder");
    return std::nullopt;
  }
  if (!support::write_file_atomic(tmp / "kernel.cu", t.cuda_source, diags)) return std::nullopt;
  auto cmd = nvcc_command(t, tc, tmp / "kernel.cu", tmp / "libqattn_kernel.so", opts.also_sm);
  std::string line;
  for (const auto& a : cmd) line += shell_quote(a) + " ";
  say("nvcc " + t.arch + ": compiling " + t.kernel_name + " (this takes a minute)...");
  auto start = std::chrono::steady_clock::now();
  int rc = run_capture(line, r.log);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  support::write_file_atomic(tmp / "build.log", line + "\n\n" + r.log, diags);
  if (rc != 0) {
    std::string first;
    std::istringstream in(r.log);
    std::string l;
    int n = 0;
    while (std::getline(in, l) && n < 8)
      if (l.find("error") != std::string::npos) first += "\n    " + l, ++n;
    diags.error("BUILD0201", {}, "nvcc failed for " + t.kernel_name + " (exit " + std::to_string(rc) + ")" + first,
                "the full log is in " + (tmp / "build.log").string());
    return std::nullopt;
  }
  if (opts.use_cache) {
    fs::rename(tmp, r.entry, ec);
    if (ec && fs::exists(r.library)) {  // another process built the same key meanwhile
      fs::remove_all(tmp, ec);
    } else if (ec) {
      diags.error("BUILD0202", {}, "cannot move the build into the cache: " + ec.message(), "");
      return std::nullopt;
    }
  } else {
    r.entry = tmp;
    r.library = tmp / "libqattn_kernel.so";
  }
  say("nvcc done in " + std::to_string(static_cast<int>(r.seconds + 0.5)) + " s");
  return r;
}

}  // namespace qattn::build
