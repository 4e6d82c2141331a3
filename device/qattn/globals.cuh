// qattn device runtime: the TL global views. `Allocate X in global (rows, cols) DTYPE with offset
// [b, h]` is this block's (b, h) matrix of the kernel argument X: a (rows, COLS) row-major view with
// a runtime row stride (BSHD and BHSD are both strided views; the last dimension is contiguous).
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>

namespace qattn {
using namespace cute;

// TL integer arithmetic: `/` and `%` floor, cdiv(a, b) = ceil(a / b).
CUTE_HOST_DEVICE constexpr int floordiv(int a, int b) {
  const int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
CUTE_HOST_DEVICE constexpr int floormod(int a, int b) { return a - floordiv(a, b) * b; }
CUTE_HOST_DEVICE constexpr int cdiv(int a, int b) { return -floordiv(-a, b); }
CUTE_HOST_DEVICE constexpr int imin(int a, int b) { return a < b ? a : b; }
CUTE_HOST_DEVICE constexpr int imax(int a, int b) { return a > b ? a : b; }

constexpr float kLog2e = 1.4426950408889634f;  // TL builtin log2e
constexpr float kLn2 = 0.6931471805599453f;    // TL builtin ln2

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
