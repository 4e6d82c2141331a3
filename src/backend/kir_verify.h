// The kernel IR verifier: the invariants a lowering bug could break, checked on the finished
// kir::Kernel before it is emitted. Shared memory fits the target and its tiles neither overlap nor
// lose the 1024-byte alignment of the 128-byte swizzle; the roles fit the SM's register file; every
// GEMM is a legal wgmma (M 64 per warpgroup, N 8..256 by 8, K by 16) on operands of matching shapes,
// and no block ends with a GEMM in flight; every ring wait has a producer load and every ring slot
// is waited for, read and released once per load, in that order (so the producer never refills a
// slot in use and never waits forever). A violation is XL0901 (a translator bug), never emitted.
#pragma once
#include "backend/kir.h"
#include "support/diag.h"

namespace qattn::backend::kir {

bool verify(const Kernel& k, support::DiagSink& diags);

}  // namespace qattn::backend::kir
