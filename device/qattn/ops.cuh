// qattn device runtime: the TL scalar operations as functors, one definition for every kernel
// family (the mma.sync runtime's softmax.cuh and the Hopper tile.cuh). TL semantics: -inf is
// absorbing in Add and on the left of Subtract (a masked score stays masked); Exp/Log use the fast
// hardware approximations (--use_fast_math builds).
#pragma once
#include <cmath>

namespace qattn::op {
struct Add { __device__ __forceinline__ float operator()(float a, float b) const { return (a == -INFINITY || b == -INFINITY) ? -INFINITY : a + b; } };
struct Sub { __device__ __forceinline__ float operator()(float a, float b) const { return a == -INFINITY ? -INFINITY : a - b; } };
struct Mul { __device__ __forceinline__ float operator()(float a, float b) const { return a * b; } };
struct Div { __device__ __forceinline__ float operator()(float a, float b) const { return a / b; } };
struct Max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct Exp { __device__ __forceinline__ float operator()(float a) const { return __expf(a); } };
struct Exp2 { __device__ __forceinline__ float operator()(float a) const { return exp2f(a); } };
struct Log { __device__ __forceinline__ float operator()(float a) const { return __logf(a); } };
struct Log2 { __device__ __forceinline__ float operator()(float a) const { return __log2f(a); } };
}  // namespace qattn::op
