// qattn device runtime: the TL global views. `Allocate X in global (rows, cols) DTYPE with offset
// [b, h]` is this block's (b, h) matrix of the kernel argument X: a (rows, COLS) row-major view with
// a runtime row stride (BSHD and BHSD are both strided views; the last dimension is contiguous).
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>

#include "qattn/intmath.cuh"

namespace qattn {
using namespace cute;

// The row stride is 32-bit inside a (batch, head) matrix (the host checks rows * row_stride < 2^31):
// tile addresses then cost one register each instead of two.
template <class T, int COLS>
__device__ __forceinline__ auto global_matrix(const void* base, int64_t offset, int rows, int64_t row_stride) {
  return make_tensor(make_gmem_ptr(reinterpret_cast<T const*>(base) + offset), make_shape(rows, Int<COLS>{}),
                     make_stride(int(row_stride), _1{}));  // (rows, COLS)
}
template <class T, int COLS>
__device__ __forceinline__ auto global_matrix_out(void* base, int64_t offset, int rows, int64_t row_stride) {
  return make_tensor(make_gmem_ptr(reinterpret_cast<T*>(base) + offset), make_shape(rows, Int<COLS>{}),
                     make_stride(int(row_stride), _1{}));  // (rows, COLS)
}
template <class T>
__device__ __forceinline__ auto global_vector_out(T* base, int64_t offset, int rows) {
  return make_tensor(make_gmem_ptr(base + offset), make_shape(rows));  // (rows)
}

}  // namespace qattn
