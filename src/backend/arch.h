// Per-architecture lowering choices: what the TL does not state and the translator picks from the
// target and the operand dtype (MMA atom, ldmatrix atoms, the G2S copy, the Reshape function, nvcc
// flags). One table row per (architecture, dtype); see docs/translation.md.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plan/problem.h"
#include "support/diag.h"
#include "tl/ast.h"

namespace qattn::backend {

struct ArchSpec {
  std::string name;          // "sm80", "sm75", "sm89"
  int sm = 0;                // the architecture lowered for (80 for sm86/sm90 targets)
  std::string element;       // CuTe type of Q/K/V: "cute::bfloat16_t"
  std::string mma_atom;      // "SM80_16x8x16_F32BF16BF16F32_TN"
  std::string mma_instr;     // PTX it becomes: "mma.sync.aligned.m16n8k16"
  int mma_k = 16;            // K of the atom (elements)
  int tile_k = 16;           // K of the tiled MMA permutation (ldmatrix.x4 covers 16 x 16 B*2)
  std::string ldsm_n;        // ldmatrix atom for K-major operands: "SM75_U32x4_LDSM_N"
  std::string ldsm_t;        // ldmatrix.trans atom for B operands stored (K, N) ("" when none)
  std::string reshape_fn;    // "qattn::acc_to_a_m16n8k16"
  bool cp_async = false;     // G2S by cp.async (else ld.global + st.shared)
  bool fp8 = false;          // 8-bit operands: V^T is transposed in shared memory, descales apply
  int elem_bytes = 2;
  std::vector<std::string> gencode;  // -gencode flags for the target
};

// Picks the lowering for `target` and operand dtype `dt`. Reports XL0101/XL0102 at `where`.
// `wgmma`: the program is in the sm90 form (GEMM operands in shared memory) and the target is sm90.
std::optional<ArchSpec> choose_arch(const plan::Target& target, tl::DType dt, support::DiagSink& diags,
                                    support::SrcLoc where, bool wgmma = false);

const char* cute_type(tl::DType t);  // "cute::half_t", "cute::bfloat16_t", "cute::float_e4m3_t", "float"
const char* cuda_type(tl::DType t);  // the CUDA headers' types: "__half", "__nv_bfloat16", "__nv_fp8_e4m3", "float"

// The Hopper warpgroup MMA of N columns over 16-bit operands of dtype `t` (device/qattn/sm90/wgmma_atoms.cuh):
// "qattn::sm90::Wgmma<N, __nv_bfloat16, qattn::sm90::Major::K, qattn::sm90::Major::MN>"; a_mn / b_mn: the
// operand is MN-major in shared memory. wgmma_atom_n: the N of such a spelling, 0 for anything else.
std::string wgmma_atom(int n, tl::DType t, bool a_mn, bool b_mn);
int wgmma_atom_n(const std::string& atom);
int dtype_bytes(tl::DType t);
// Threads per row of a global -> shared copy of 16 bytes a thread that every tile of `cols` columns
// of `bytes`-byte elements splits into whole passes (8, 4, 2 or 1: its 16-byte chunks a multiple of it).
// A copy shared by several tiles takes the smallest over them (not that of the narrowest tile: a
// 160-column tile beside 128-column ones takes 4, where 8 would leave half a pass on every row).
int copy_threads_per_row(int cols, int bytes);

}  // namespace qattn::backend
