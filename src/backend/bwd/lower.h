// Stage 2 for backward programs (`Kernel NAME backward`, docs/tl.md "The backward pass") on
// mma.sync (sm80 form: Ampere, Ada, and Hopper running the sm80 lowering) or, for an sm90 target
// whose every GEMM has a wgmma form, on warpgroup MMA (wgmma.cc, docs/translation.md "The backward
// on Hopper"): the TL statements lowered one by one, in TL order, to the device runtime's primitives
// (device/qattn/*.cuh, backward.cuh, sm90/backward.cuh), each block under its `// TL n:` comment;
// the C ABI is qattn_bwd (include/qattn/qattn.h).
//
// What the TL does not state and is chosen here: the tiled MMA (m16n8k16, WARPS warps along M: every
// 2-D register tile is an accumulator of it, so a tile's rows must be a multiple of 16 * WARPS), the
// ldmatrix atoms (a transposed view reads with ldmatrix.trans), the swizzled shared layouts, cp.async
// for global -> shared tiles, and the barriers: a __syncthreads (after waiting for the cp.async groups
// in flight) before a shared buffer written since the last barrier is read, and before a shared
// buffer is written when reads happened since the last barrier.
//
// A register tile filled by `Copy X from shared to register` and never changed afterwards is read
// by GEMMs straight from shared memory (ldmatrix inside the GEMM); element-wise Computes read it as
// an accumulator-layout tile loaded from shared (load_acc). A computed register tile is a GEMM A
// operand only after its Reshape (MMA_A); a transposed A operand reads the shared buffer.
//
// Diagnostics: XL0101 / XL0102 (architecture, dtype), XL0201 (head dims not fixed), XL0202 (a tile the
// MMA tiling or shared memory cannot hold), XL0301 (a statement form not lowered: Score / Mask
// declarations, Roles and Hopper attributes, packed views, 1-D tiles other than fp32 row vectors, ...),
// XL0302 (nested loops), XL0303 (an operand the MMA cannot read).
#pragma once
#include <optional>

#include "backend/translate.h"
#include "tl/checker.h"

namespace qattn::backend::bwd {

std::optional<Translation> translate(const tl::Program& code, const tl::CheckInfo& info, const plan::Target& target,
                                     support::DiagSink& diags);

}  // namespace qattn::backend::bwd
