// Stage 2 for combine programs (`Kernel NAME combine`, docs/tl.md "Combining partial results"):
// the TL statements lowered one by one, in TL order, to the row-distributed device primitives of
// device/qattn/rowwise.cuh and the element-wise Computes of softmax.cuh, each block under its
// `// TL n:` comment; the C ABI is qattn_combine (include/qattn/qattn.h). Every architecture the
// project targets (sm75 ... sm90): the kernel has no MMA.
//
// What the TL states: the rows per block (the 2-D register tiles' rows, a Const), the warps
// (`Const WARPS`, default min(rows, 4)), the Grid (axes x, y, z in order), the loop over the parts,
// the order of the Computes. What is chosen here: a row's d_v columns dealt to the 32 lanes of its
// warp in runs of up to 4 consecutive columns (vector loads), the rows of the tile to the warps.
//
// Diagnostics: XL0201 (d_v or a tile extent not a compile-time constant), XL0202 (a tile the
// row tiling cannot deal: rows not a multiple of WARPS, d_v not a multiple of 32, more than 16 warps),
// XL0301 (a statement the combine lowering has no form for: shared buffers, Reshape, Convert,
// attributes, a Dim the C ABI does not pass, a tile at a column other than 0), XL0302 (nested loops).
#pragma once
#include <optional>

#include "backend/translate.h"
#include "tl/checker.h"

namespace qattn::backend::combine {

std::optional<Translation> translate(const tl::Program& code, const tl::CheckInfo& info, const plan::Target& target,
                                     support::DiagSink& diags);

}  // namespace qattn::backend::combine
