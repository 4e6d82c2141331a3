// qattn device runtime: everything a generated kernel includes. One header per feature:
//   layout.cuh    shared-memory layouts, accumulator row view, the TL Reshape per architecture
//   globals.cuh   TL global views
//   copy.cuh      global -> shared (cp.async / vector loads), ldmatrix, fp8 V transpose
//   gemm.cuh      TL GEMM on mma.sync with streamed operand fragments
//   softmax.cuh   TL element-wise, row reductions, Rescale, Normalize, Convert
//   mask.cuh      TL Mask (bounds, causal, causal_top_left, window)
//   epilogue.cuh  stores of O and LSE
//   host.cuh      the shared host side of the C ABI
#pragma once
#include <cute/tensor.hpp>

#include "qattn/copy.cuh"
#include "qattn/epilogue.cuh"
#include "qattn/gemm.cuh"
#include "qattn/globals.cuh"
#include "qattn/host.cuh"
#include "qattn/layout.cuh"
#include "qattn/mask.cuh"
#include "qattn/softmax.cuh"
#include "qattn/variant.cuh"
