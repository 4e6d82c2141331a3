// Stage 2: TL code + GPU target -> CUDA C++ on CuTe (sm80, sm75, sm89 fp8), one kernel plus the C
// ABI of include/qattn/qattn.h, for nvcc to build into a shared library.
//
// Input: a TL program (it is checked here with tl::check; a program that fails the checker is
// reported with its TL diagnostics plus XL0001) and the target GPU. Output: the .cu source, the
// kernel name, the architecture lowered for and the nvcc flags. The TL is the single source of
// truth: every statement lowers to its own block of CuTe code, commented `// TL <line>: <stmt>`;
// what TL does not state (MMA atom, swizzles, copy atoms, the copy/compute overlap) is chosen
// here per architecture. docs/translation.md has the lowering table.
//
// Diagnostics (never throws, never emits code it cannot stand behind):
//   XL0001  the TL program does not pass tl::check
//   XL0101  target architecture not lowered (before sm75; sm90 programs in the wgmma form)
//   XL0102  dtype not lowered on this target (bf16 on sm75, fp8 before sm89, mixed operand dtypes,
//           an output dtype other than fp16/bf16)
//   XL0201  a problem dimension the C ABI cannot bind (head dims must be fixed: `Dim d = 128`)
//   XL0202  a shape the MMA tiling cannot cover (rows not BM, BM not a multiple of 16 * WARPS,
//           columns not a multiple of the MMA/copy granularity, shared memory over the target's)
//   XL0203  a Grid with more than 3 axes, or a Grid extent the launch cannot express
//   XL0301  a statement form the lowering does not support (message names it; hint says what is)
//   XL0302  loop structure not supported (nested loops, more than one loop)
//   XL0303  an operand in a memory level or layout the MMA cannot read (GEMM from shared memory
//           with no register copy on sm90-style programs, A transposed, B in registers)
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/problem.h"
#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::backend {

struct Translation {
  std::string cuda_source;               // the .cu file
  std::string kernel_name;               // __global__ function name, e.g. flash_fwd_llama2_7b_sm80
  std::string arch;                      // "sm80", "sm75", "sm89"
  std::vector<std::string> nvcc_flags;   // -gencode=... and the flags the source needs
  int threads = 0;                       // block size
  int smem_bytes = 0;                    // dynamic shared memory per block
  std::string info_json;                 // what qattn_kernel_info() returns
  std::string kir;                       // the kernel IR as text (kernel.kir; see kir.h)
  // The source builds in two parts at the same time (src/build/nvcc.h, "split build"): the kernel
  // alone by `nvcc -fatbin`, the launch code alone by the host compiler (-DQATTN_HOST_ONLY), the
  // fatbin linked into the library. The sm90 forward emitter's sources (sm90/emit.cc).
  bool split = false;
};

std::optional<Translation> translate(const tl::Program& code, const plan::Target& target, support::DiagSink& diags);

// Parse + translate (TL parse errors are reported as they are, plus XL0001).
std::optional<Translation> translate_text(std::string_view tl_text, const plan::Target& target,
                                          support::DiagSink& diags, const std::string& file = {});

// The nvcc flags every generated source needs besides -gencode (language, optimisation).
std::vector<std::string> common_nvcc_flags();

}  // namespace qattn::backend
