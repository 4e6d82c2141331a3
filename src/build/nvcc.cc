#include "build/nvcc.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <thread>

#include "support/io.h"
#include "support/process.h"
#include "support/sha256.h"

namespace qattn::build {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// Runs argv (no shell), capturing stdout+stderr. Returns the exit status (-1 on failure to start).
int run_capture(const std::vector<std::string>& argv, std::string& out, double timeout_s = 120) {
  support::ProcessOptions po;
  po.capture = true;
  po.max_output = 4 << 20;
  po.limits.timeout_s = timeout_s;
  po.limits.no_core = true;
  const auto r = support::run_process(argv, po);
  out += r.output;
  return r.started && !r.timed_out ? r.status : -1;
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
  const std::string py = support::default_python();
  if (run_capture({py, "-c", "import cutlass_library; print(cutlass_library.source_path + '/include')"}, out, 60) == 0) {
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    auto nl = out.rfind('\n');
    if (nl != std::string::npos) out = out.substr(nl + 1);
    if (ok(out)) return out;
  }
  fs::path local = support::source_dir() / ".cutlass" / "include";
  if (ok(local)) return local.string();
  return {};
}

// The first of `names` found as an executable file in PATH ("" when none).
std::string find_on_path(const std::vector<std::string>& names) {
  const std::string path = env("PATH");
  for (const auto& name : names) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      std::error_code ec;
      const fs::path p = fs::path(dir) / name;
      if (!dir.empty() && fs::is_regular_file(p, ec)) return p.string();
    }
  }
  return {};
}

// The split build's pieces beside nvcc: the host compiler, and the toolkit's include folder and
// static runtime (the toolkit's root is nvcc's ../, the layout of /usr/local/cuda and of the
// nvidia-cuda-nvcc wheels; targets/<arch>/ as the runfile installs it).
void find_split_tools(Toolchain& tc) {
  if (env("QATTN_SPLIT_BUILD") == "0") return;
  if (auto v = env("QATTN_HOST_CXX"); !v.empty()) tc.host_cxx = fs::exists(v) ? v : std::string();
  else tc.host_cxx = find_on_path({"g++", "c++", "clang++"});
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::path(tc.nvcc), ec).parent_path().parent_path();
  for (const fs::path& dir : {root, root / "targets" / "x86_64-linux", root / "targets" / "sbsa-linux"}) {
    if (tc.cuda_include.empty() && fs::exists(dir / "include" / "cuda_runtime.h", ec)) tc.cuda_include = (dir / "include").string();
    for (const char* lib : {"lib64", "lib"})
      if (tc.cudart_static.empty() && fs::exists(dir / lib / "libcudart_static.a", ec))
        tc.cudart_static = (dir / lib / "libcudart_static.a").string();
  }
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


const char* const kManifest = "manifest.txt";

std::string manifest_text(const std::string& lib) {
  return "libqattn_kernel.so size " + std::to_string(lib.size()) + " sha256 " + support::sha256_hex(lib) + "\n";
}

// A cache entry is reused only when its manifest (written last) matches the library's size and hash.
bool entry_intact(const fs::path& entry, std::string& why) {
  support::DiagSink ignore;
  const auto m = support::read_file(entry / kManifest, ignore);
  if (!m) {
    why = "no manifest";
    return false;
  }
  std::error_code ec;
  const auto size = fs::file_size(entry / "libqattn_kernel.so", ec);
  if (ec) {
    why = "no library";
    return false;
  }
  std::istringstream in(*m);
  std::string name, w1, w2, hash;
  uint64_t want = 0;
  if (!(in >> name >> w1 >> want >> w2 >> hash) || name != "libqattn_kernel.so") {
    why = "unreadable manifest";
    return false;
  }
  if (size != want) {
    why = "library is " + std::to_string(size) + " bytes, the manifest says " + std::to_string(want);
    return false;
  }
  const auto lib = support::read_file(entry / "libqattn_kernel.so", ignore);
  if (!lib || support::sha256_hex(*lib) != hash) {
    why = "library's SHA-256 differs from the manifest";
    return false;
  }
  return true;
}

// Removes build folders (.tmp-*) of interrupted builds older than an hour.
void clean_abandoned(const fs::path& cache, const std::function<void(const std::string&)>& say) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  int removed = 0;
  for (auto top = fs::directory_iterator(cache, ec); !ec && top != fs::directory_iterator(); top.increment(ec)) {
    if (!top->is_directory(ec) || top->path().filename().string().size() != 2) continue;
    std::error_code ec2;
    for (auto it = fs::directory_iterator(top->path(), ec2); !ec2 && it != fs::directory_iterator(); it.increment(ec2)) {
      if (it->path().filename().string().rfind(".tmp-", 0) != 0) continue;
      std::error_code ec3;
      const auto t = fs::last_write_time(it->path(), ec3);
      if (!ec3 && now - t > std::chrono::hours(1)) {
        fs::remove_all(it->path(), ec3);
        if (!ec3) ++removed;
      }
    }
  }
  if (removed > 0) say("removed " + std::to_string(removed) + " abandoned build folder(s) (.tmp-*, older than 1 h) from the cache");
}

bool header_allowed(const std::string& name, std::string& why) {
  static const std::set<std::string> kStd = {
      // C
      "assert.h", "complex.h", "ctype.h", "errno.h", "fenv.h", "float.h", "inttypes.h", "iso646.h", "limits.h",
      "locale.h", "math.h", "setjmp.h", "signal.h", "stdalign.h", "stdarg.h", "stdbool.h", "stddef.h", "stdint.h",
      "stdio.h", "stdlib.h", "string.h", "time.h", "uchar.h", "wchar.h", "wctype.h",
      // C++
      "algorithm", "any", "array", "atomic", "bit", "bitset", "cassert", "cctype", "cerrno", "cfenv", "cfloat",
      "charconv", "chrono", "cinttypes", "climits", "clocale", "cmath", "complex", "condition_variable", "cstdarg",
      "cstddef", "cstdint", "cstdio", "cstdlib", "cstring", "ctime", "cwchar", "deque", "exception", "functional",
      "initializer_list", "iomanip", "ios", "iosfwd", "iostream", "istream", "iterator", "limits", "list", "map",
      "memory", "mutex", "new", "numeric", "optional", "ostream", "queue", "random", "ratio", "set", "sstream",
      "stack", "stdexcept", "string", "string_view", "system_error", "thread", "tuple", "type_traits", "typeinfo",
      "unordered_map", "unordered_set", "utility", "valarray", "variant", "vector",
      // CUDA headers without the cuda prefix
      "mma.h", "cooperative_groups.h", "sm_60_atomic_functions.h", "sm_61_intrinsics.h", "vector_types.h"};
  if (name.empty()) {
    why = "empty header name";
    return false;
  }
  if (name[0] == '/') {
    why = "absolute paths are not allowed";
    return false;
  }
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/')) {
      why = "unexpected character in the header name";
      return false;
    }
  std::istringstream parts(name);
  for (std::string part; std::getline(parts, part, '/');)
    if (part.empty() || part == "." || part == "..") {
      why = "'..', '.' and empty path components are not allowed";
      return false;
    }
  auto under = [&](const char* dir) { return name.rfind(std::string(dir) + "/", 0) == 0; };
  if (under("qattn") || under("cute") || under("cutlass") || under("cooperative_groups") || under("cub") ||
      name.rfind("cuda", 0) == 0 || kStd.count(name))
    return true;
  why = "not the device runtime, CUDA, CuTe/CUTLASS or a standard header";
  return false;
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
  run_capture({tc.nvcc, "--version"}, ver, 60);
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
  find_split_tools(tc);
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

bool builds_split(const backend::Translation& t, const Toolchain& tc) {
  return t.split && tc.split_ok() && env("QATTN_SPLIT_BUILD") != "0";
}

SplitCommands split_commands(const backend::Translation& t, const Toolchain& tc, int also_sm) {
  SplitCommands c;
  c.device = {tc.nvcc, "-fatbin", "-Xptxas", "-v"};
  for (const auto& f : t.nvcc_flags) c.device.push_back(f);
  const std::string target = t.arch.size() > 2 ? t.arch.substr(2) : t.arch;
  if (also_sm > 0 && std::to_string(also_sm) != target)
    c.device.push_back("-gencode=arch=compute_" + target + ",code=sm_" + std::to_string(also_sm));
  for (const auto& d : tc.include_dirs) c.device.push_back("-I" + d);
  for (const char* a : {"-o", "kernel.fatbin", "kernel.cu"}) c.device.push_back(a);
  c.host = {tc.host_cxx, "-x", "c++", "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-DNDEBUG", "-DQATTN_HOST_ONLY"};
  for (const auto& d : tc.include_dirs) c.host.push_back("-I" + d);
  c.host.push_back("-I" + tc.cuda_include);
  for (const char* a : {"-c", "kernel.cu", "-o", "launch.o"}) c.host.push_back(a);
  // only the C ABI is exported (exports.map, written beside): the fatbin's symbols and the static
  // runtime stay inside this library, and -Bsymbolic binds its references to its own definitions
  c.link = {tc.host_cxx, "-shared", "-o", "libqattn_kernel.so", "launch.o", "-Wl,--format=binary", "-Wl,kernel.fatbin",
            "-Wl,--format=default", "-Wl,-z,noexecstack", "-Wl,-Bsymbolic", "-Wl,--version-script=exports.map",
            tc.cudart_static, "-ldl", "-lpthread", "-lrt"};
  return c;
}

namespace {
const char kExportsMap[] = "{\n  global: qattn_*;\n  local: *;\n};\n";

// One compiler run in the build folder: its command line and output (for build.log) and outcome.
struct Step {
  std::string what;  // "nvcc", "nvcc -fatbin", "host compiler", "link"
  std::vector<std::string> argv;
  support::ProcessResult run;
  double seconds = 0;
  bool ok() const { return run.started && !run.timed_out && run.status == 0; }
  std::string log() const {
    std::string line;
    for (const auto& a : argv) line += a + " ";
    return line + "\n" + run.output + (run.started ? "" : run.error + "\n");
  }
};

void run_step(Step& st, const fs::path& dir, const BuildOptions& opts) {
  support::ProcessOptions po;
  po.capture = true;
  po.max_output = 4 << 20;
  po.cwd = dir.string();
  po.limits.timeout_s = opts.timeout_s;
  po.limits.address_space = opts.memory_bytes;
  po.limits.file_size = opts.file_size_bytes;
  po.limits.no_core = true;
  const auto start = std::chrono::steady_clock::now();
  st.run = support::run_process(st.argv, po);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

std::optional<BuildResult> build_library(const backend::Translation& t, const Toolchain& tc, support::DiagSink& diags,
                                         const BuildOptions& opts) {
  auto say = [&](const std::string& s) {
    if (opts.progress) opts.progress(s);
  };
  BuildResult r;
  std::string flags;
  for (const auto& f : t.nvcc_flags) flags += f + "\n";
  flags += "also_sm=" + std::to_string(opts.also_sm) + "\n";
  const bool split = builds_split(t, tc);
  if (split) flags += "split: " + tc.host_cxx + " " + tc.cudart_static + "\n";
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
  if (opts.use_cache) {
    clean_abandoned(cache, say);
    if (fs::exists(r.entry, ec)) {
      std::string why;
      if (entry_intact(r.entry, why)) {
        r.cache_hit = true;
        support::DiagSink ignore;
        r.log = support::read_file(r.entry / "build.log", ignore).value_or("");
        say("cache hit " + r.key.substr(0, 12) + " (" + r.entry.string() + ")");
        return r;
      }
      say("cache entry " + r.key.substr(0, 12) + " is damaged (" + why + "): removed, rebuilding");
      fs::remove_all(r.entry, ec);
    }
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
  std::vector<Step> steps;
  if (split) {
    if (!support::write_file_atomic(tmp / "exports.map", kExportsMap, diags)) return std::nullopt;
    const SplitCommands c = split_commands(t, tc, opts.also_sm);
    steps = {{"nvcc -fatbin", c.device, {}, 0}, {"the host compiler", c.host, {}, 0}, {"the link", c.link, {}, 0}};
    say("nvcc " + t.arch + ": compiling " + t.kernel_name + " (the kernel and its launch code at once)...");
  } else {
    steps = {{"nvcc", nvcc_command(t, tc, tmp / "kernel.cu", tmp / "libqattn_kernel.so", opts.also_sm), {}, 0}};
    say("nvcc " + t.arch + ": compiling " + t.kernel_name + " (this takes a minute)...");
  }
  auto start = std::chrono::steady_clock::now();
  if (split) {  // the kernel and the launch code at the same time, then the link
    std::thread host([&] { run_step(steps[1], tmp, opts); });
    run_step(steps[0], tmp, opts);
    host.join();
    if (steps[0].ok() && steps[1].ok()) run_step(steps[2], tmp, opts);
  } else {
    run_step(steps[0], tmp, opts);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& st : steps)
    if (!st.argv.empty() && (st.run.started || !st.run.error.empty())) r.log += (r.log.empty() ? "" : "\n") + st.log();
  support::write_file_atomic(tmp / "build.log", r.log, diags);
  for (const auto& st : steps) {
    if (st.ok()) continue;
    if (!st.run.started && st.run.error.empty()) continue;  // not run: an earlier step failed
    if (st.run.timed_out) {
      diags.error("BUILD0203", {}, st.what + " did not finish " + t.kernel_name + " within " +
                  std::to_string(static_cast<long>(opts.timeout_s)) + " s and was stopped",
                  "the full log is in " + (tmp / "build.log").string());
      return std::nullopt;
    }
    std::string first;
    std::istringstream in(st.run.output);
    std::string l;
    int n = 0;
    while (std::getline(in, l) && n < 8)
      if (l.find("error") != std::string::npos || l.find("memory") != std::string::npos) first += "\n    " + l, ++n;
    if (!st.run.started) first += "\n    " + st.run.error;
    diags.error("BUILD0201", {}, st.what + " failed for " + t.kernel_name + " (exit " + std::to_string(st.run.started ? st.run.status : -1) +
                ")" + first,
                "the full log is in " + (tmp / "build.log").string() + "; the compilers run with a memory limit of " +
                    std::to_string(opts.memory_bytes >> 30) + " GiB" +
                    (split ? " (QATTN_SPLIT_BUILD=0 builds the same file with nvcc -shared alone)" : ""));
    return std::nullopt;
  }
  // the manifest, written last: the library's size and SHA-256, checked before every reuse
  {
    support::DiagSink ignore;
    const auto lib = support::read_file(tmp / "libqattn_kernel.so", ignore);
    if (!lib) {
      diags.error("BUILD0201", {}, "nvcc reported success but wrote no library for " + t.kernel_name,
                  "the full log is in " + (tmp / "build.log").string());
      return std::nullopt;
    }
    if (!support::write_file_atomic(tmp / kManifest, manifest_text(*lib), diags)) return std::nullopt;
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

bool check_includes(const std::string& source, support::DiagSink& diags) {
  // Logical lines: backslash-newlines joined, as the preprocessor does first.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\\') {
      size_t j = i + 1;
      if (j < source.size() && source[j] == '\r') ++j;
      if (j < source.size() && source[j] == '\n') {
        i = j;
        continue;
      }
    }
    text += source[i];
  }
  bool ok = true;
  int line_no = 0;
  std::istringstream in(text);
  std::string line;
  auto reject = [&](const std::string& what, const std::string& why) {
    ok = false;
    diags.error("BUILD0301", {line_no, 1}, "#" + what + ": " + why,
                "include only \"qattn/...\" (the device runtime and qattn.h), <cute/...>, <cutlass/...>, <cuda...> "
                "and standard C/C++ headers by name; no absolute paths, no '..', no files of the build machine");
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find("incbin") != std::string::npos || line.find("INCBIN") != std::string::npos)
      reject("incbin", "assembler .incbin reads a file of the build machine into the kernel");
    // Every place a directive could start: the line's start and after each "*/" (a block comment
    // that began on an earlier line). Seeing more directives than the preprocessor is safe.
    std::vector<size_t> starts = {0};
    for (size_t p = line.find("*/"); p != std::string::npos; p = line.find("*/", p + 2)) starts.push_back(p + 2);
    for (size_t p0 : starts) {
      size_t p = p0;
      auto skip = [&] {
        while (p < line.size()) {
          if (line[p] == ' ' || line[p] == '\t' || line[p] == '\r' || line[p] == '\f' || line[p] == '\v') ++p;
          else if (line.compare(p, 2, "/*") == 0) {
            const size_t e = line.find("*/", p + 2);
            p = e == std::string::npos ? line.size() : e + 2;
          } else break;
        }
      };
      skip();
      if (p < line.size() && line[p] == '#') ++p;
      else if (line.compare(p, 2, "%:") == 0) p += 2;
      else continue;
      skip();
      size_t q = p;
      while (q < line.size() && (std::isalnum(static_cast<unsigned char>(line[q])) || line[q] == '_')) ++q;
      const std::string directive = line.substr(p, q - p);
      if (directive != "include" && directive != "include_next" && directive != "import" && directive != "embed") continue;
      p = q;
      skip();
      if (directive != "include") {
        reject(directive, "not allowed in LLM-written CUDA");
        continue;
      }
      if (p >= line.size() || (line[p] != '"' && line[p] != '<')) {
        reject(directive, "only a literal \"header\" or <header> may be included (no macros)");
        continue;
      }
      const char close = line[p] == '"' ? '"' : '>';
      const size_t e = line.find(close, p + 1);
      if (e == std::string::npos) {
        reject(directive, "unterminated header name");
        continue;
      }
      const std::string name = line.substr(p + 1, e - p - 1);
      std::string why;
      if (!header_allowed(name, why)) reject("include " + line.substr(p, e - p + 1), why);
    }
  }
  return ok;
}

}  // namespace qattn::build
