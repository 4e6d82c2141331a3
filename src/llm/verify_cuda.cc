// verify_cuda (stage 2 by the LLM, and the vanilla baseline) and gpu_numerics: see verify.h.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "llm/verify.h"
#include "support/io.h"
#include "support/process.h"

namespace qattn::llm {
namespace fs = std::filesystem;

std::optional<backend::Translation> verify_cuda(const std::string& source, const backend::Translation& meta,
                                                const CudaCheck& check, support::DiagSink& diags) {
  support::DiagSink local("kernel.cu");
  // The C ABI of include/qattn/qattn.h, before spending a minute in nvcc.
  for (const char* fn : {"qattn_fwd", "qattn_last_error", "qattn_kernel_info"})
    if (source.find(fn) == std::string::npos)
      local.error("LLM0305", {}, std::string("the CUDA source does not define ") + fn + "() of the C ABI",
                  "implement every function of include/qattn/qattn.h with extern \"C\" linkage");
  if (source.find("extern \"C\"") == std::string::npos && !local.has_errors())
    local.error("LLM0305", {}, "the C ABI functions are not declared extern \"C\"",
                "#include \"qattn/qattn.h\" (it declares them extern \"C\") or wrap the definitions in extern \"C\" { }");
  // #include restricted to the device runtime, CUDA, CuTe/CUTLASS and standard headers (BUILD0301),
  // before nvcc opens anything
  build::check_includes(source, local);
  if (!check.toolchain)
    local.error("BUILD0101", {}, "no CUDA toolchain to compile the LLM's CUDA with", "install nvcc (scripts/setup.sh)");
  if (local.has_errors()) {
    for (const auto& d : local.all()) diags.add(d);
    return std::nullopt;
  }
  backend::Translation t = meta;
  t.cuda_source = source;
  auto built = build::build_library(t, *check.toolchain, local, check.build);
  if (built && check.numerics && !check.numerics(*built, local) && !local.has_errors())
    local.error("LLM0304", {}, "the kernel compiles but its results differ from the reference", "check the algorithm");
  for (const auto& d : local.all()) diags.add(d);
  if (!built || local.has_errors()) return std::nullopt;
  return t;
}

support::ProcessOptions untrusted_process(const fs::path& scratch, double timeout_s, bool forbid_exec) {
  support::ProcessOptions po;
  po.env = {support::python_path_env(),   {"HOME", scratch.string()},          {"TMPDIR", scratch.string()},
            {"XDG_CACHE_HOME", scratch.string()}, {"CUDA_CACHE_PATH", (scratch / ".nv").string()},
            {"TRITON_CACHE_DIR", (scratch / ".triton").string()}, {"PYTHONDONTWRITEBYTECODE", "1"}};
  po.cwd = scratch.string();
  po.capture = true;
  po.limits.timeout_s = timeout_s;
  po.limits.file_size = 1ull << 30;
  po.limits.no_core = true;
  po.sandbox.enabled = true;
  po.sandbox.scratch = scratch.string();
  po.sandbox.forbid_exec = forbid_exec;
  po.sandbox.required = true;
  // the CUDA driver creates its IPC files there (tmpfs, cleared at boot)
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) po.sandbox.also_writable.push_back("/dev/shm");
  return po;
}

NumericsCheck gpu_numerics(const std::string& python) {
  return [python](const build::BuildResult& built, support::DiagSink& diags) {
    std::error_code ec;
    static std::mt19937_64 rng{std::random_device{}()};
    fs::path dir = fs::temp_directory_path(ec) / ("qattn-llm-verify-" + std::to_string(rng() % 1000000007));
    fs::create_directories(dir, ec);
    fs::copy_file(built.library, dir / "llm_kernel.so", fs::copy_options::overwrite_existing, ec);
    if (ec) {
      diags.error("LLM0304", {}, "cannot stage the kernel for the numerics check: " + ec.message(), "check $TMPDIR");
      return false;
    }
    // the package's numerics check (python/qattn/verify.py), no shell, in the sandbox: the library's
    // host code is the LLM's and runs when it is loaded (support/process.h)
    const auto run = support::run_process({python, "-m", "qattn.verify", dir.string()}, untrusted_process(dir, 600, false));
    fs::remove_all(dir, ec);
    std::string applied;
    for (const auto& p : run.protections) applied += (applied.empty() ? "" : "; ") + p;
    std::fprintf(stderr, "      sandbox of the numerics check: %s\n", applied.empty() ? "none" : applied.c_str());
    for (const auto& m : run.missing) std::fprintf(stderr, "      sandbox: not available here: %s\n", m.c_str());
    if (run.started && run.status == 0) return true;
    const std::string out = run.started && !run.timed_out ? run.output : run.error + "\n" + run.output;
    // The failing rows of qattn.verify's table are what the LLM needs to see.
    std::string fails;
    size_t pos = 0;
    int n = 0;
    while (pos < out.size() && n < 12) {
      size_t nl = out.find('\n', pos);
      std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? out.size() : nl + 1;
      if (line.find("FAIL") != std::string::npos || line.find("Error") != std::string::npos ||
          line.find("time limit") != std::string::npos)
        fails += "\n    " + line, ++n;
    }
    diags.error("LLM0304", {}, "the kernel compiles but fails the GPU numerics check (python -m qattn.verify)" + fails,
                "compare with the reference: softmax scale, masking, the online-softmax rescale, the GQA head mapping");
    return false;
  };
}

support::ProcessResult run_sandboxed_python(const std::string& python, const std::string& module, const fs::path& artifacts) {
  std::error_code ec;
  const fs::path out = fs::absolute(artifacts, ec);
  const fs::path home = out / ".sandbox-home";
  fs::create_directories(home, ec);
  auto po = untrusted_process(out, 1200, false);
  for (auto& [k, v] : po.env)
    if (k == "HOME" || k == "TMPDIR" || k == "XDG_CACHE_HOME") v = home.string();
  po.capture = false;  // its table goes to this process's stdout / stderr
  auto r = support::run_process({python, "-m", module, out.string()}, po);
  fs::remove_all(home, ec);
  std::string applied;
  for (const auto& p : r.protections) applied += (applied.empty() ? "" : "; ") + p;
  std::fprintf(stderr, "      sandbox of %s: %s\n", module.c_str(), applied.empty() ? "none" : applied.c_str());
  for (const auto& m : r.missing) std::fprintf(stderr, "      sandbox: not available here: %s\n", m.c_str());
  return r;
}

}  // namespace qattn::llm
