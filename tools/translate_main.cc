// qattn_translate: stage 2 alone, for tests and for looking at what the translator decided.
//   qattn_translate code.tl --gpu a100 [-o k.cu] [--flags] [--info] [--kir] [--build LIB.so]
// Reads TL code (a file, or - for stdin), translates it for the GPU (a name or alias of
// data/gpus.json: a100, h100, t4, l40s, ...) and writes the .cu to -o or stdout. --flags prints the
// nvcc flags (one line) instead; --info prints qattn_kernel_info()'s JSON; --kir prints the kernel
// IR (kernel.kir, docs/translation.md); --build also builds the library as `qattn generate` does
// (src/build: the split build of sm90 kernels, the kernel cache), copies it to LIB.so and prints the
// compilers' log (ptxas's registers and spills) to stderr. Diagnostics go to stderr; the exit status is 1 when the program cannot
// be translated or built, 2 on a usage error.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "backend/translate.h"
#include "build/nvcc.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "support/io.h"

int main(int argc, char** argv) {
  std::string in, out, gpu = "a100", lib;
  bool flags = false, info = false, kir = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--gpu" && i + 1 < argc) gpu = argv[++i];
    else if (a == "-o" && i + 1 < argc) out = argv[++i];
    else if (a == "--flags") flags = true;
    else if (a == "--info") info = true;
    else if (a == "--kir") kir = true;
    else if (a == "--build" && i + 1 < argc) lib = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::puts("usage: qattn_translate CODE.tl|- [--gpu NAME] [-o OUT.cu] [--flags] [--info] [--kir] [--build LIB.so]");
      return 0;
    } else if (in.empty()) in = a;
    else {
      std::fprintf(stderr, "qattn_translate: unexpected argument %s\n", a.c_str());
      return 2;
    }
  }
  if (in.empty()) {
    std::fprintf(stderr, "usage: qattn_translate CODE.tl|- [--gpu NAME] [-o OUT.cu] [--flags] [--info] [--kir] [--build LIB.so]\n");
    return 2;
  }
  qattn::support::DiagSink diags(in == "-" ? "<stdin>" : in);
  std::string text;
  if (in == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    auto t = qattn::support::read_file(in, diags);
    if (!t) {
      std::fputs(diags.render().c_str(), stderr);
      return 1;
    }
    text = *t;
  }
  const qattn::hw::GpuFacts* g = qattn::hw::find_gpu(gpu, diags);
  if (!g) {
    std::fputs(diags.render().c_str(), stderr);
    return 1;
  }
  auto tr = qattn::backend::translate_text(text, qattn::plan::make_target(*g), diags, in);
  std::fputs(diags.render().c_str(), stderr);
  if (!tr) return 1;
  if (kir) {
    std::fputs(tr->kir.c_str(), stdout);
    return 0;
  }
  if (flags || info) {
    if (flags) {
      std::string f;
      for (const auto& x : tr->nvcc_flags) f += (f.empty() ? "" : " ") + x;
      std::puts(f.c_str());
    }
    if (info) std::puts(tr->info_json.c_str());
    return 0;
  }
  if (!lib.empty()) {
    auto tc = qattn::build::find_toolchain(diags);
    auto built = tc ? qattn::build::build_library(*tr, *tc, diags) : std::nullopt;
    std::string so;
    if (built) {
      if (auto bytes = qattn::support::read_file(built->library, diags)) so = *bytes;
    }
    if (built) std::fputs(built->log.c_str(), stderr);
    if (!built || so.empty() || !qattn::support::write_file_atomic(lib, so, diags)) {
      std::fputs(diags.render().c_str(), stderr);
      return 1;
    }
    if (out.empty()) return 0;
  }
  if (out.empty()) {
    std::fputs(tr->cuda_source.c_str(), stdout);
    return 0;
  }
  return qattn::support::write_file_atomic(out, tr->cuda_source, diags) ? 0 : (std::fputs(diags.render().c_str(), stderr), 1);
}
