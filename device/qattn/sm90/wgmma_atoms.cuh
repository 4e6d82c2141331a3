// qattn device runtime, Hopper (sm90a): the warpgroup MMA instruction as a C++ atom, written from
// the PTX ISA (no CuTe):
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}  D(64 x N, fp32) (+)= A(64 x 16) B(16 x N)
// for every N the instruction has with 16-bit inputs (8 .. 256 in steps of 8; hw/sm90_policy.h
// wgmma_n_ok). `Wgmma<N, Element, A, B>` (Element __nv_bfloat16 or __half; A and B the operands'
// majorness in shared memory: Major::K when K runs along a shared row, Major::MN when M / N does):
//   ss(da, db, acc, accumulate)   A and B from shared-memory descriptors (wgmma.cuh operand_desc)
//   rs(a, db, acc, accumulate)    A from 4 registers of this thread (16-bit pairs: the accumulator
//                                 layout of a previous product, converted), B from a descriptor
// accumulate false: acc = A B (the instruction's scale-d predicate off), true: acc += A B.
// acc is the thread's N / 2 fp32 registers in the accumulator layout documented in wgmma.cuh.
//
// Inline PTX needs its operands numbered in the text: the macros below write, for each N, the
// N / 2 accumulator operands ("+f") and their placeholders in groups of four (QATTN_WGMMA_D<c>,
// QATTN_WGMMA_R<c>: c = N / 8 groups), then the numbers of the operands that follow them.
#pragma once
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace qattn::sm90 {

enum class Major { K = 0, MN = 1 };

namespace detail {

#define QATTN_WGMMA_Q(i) "+f"(d[4 * (i)]), "+f"(d[4 * (i) + 1]), "+f"(d[4 * (i) + 2]), "+f"(d[4 * (i) + 3])
#define QATTN_WGMMA_D1 QATTN_WGMMA_Q(0)
#define QATTN_WGMMA_D2 QATTN_WGMMA_D1, QATTN_WGMMA_Q(1)
#define QATTN_WGMMA_D3 QATTN_WGMMA_D2, QATTN_WGMMA_Q(2)
#define QATTN_WGMMA_D4 QATTN_WGMMA_D3, QATTN_WGMMA_Q(3)
#define QATTN_WGMMA_D5 QATTN_WGMMA_D4, QATTN_WGMMA_Q(4)
#define QATTN_WGMMA_D6 QATTN_WGMMA_D5, QATTN_WGMMA_Q(5)
#define QATTN_WGMMA_D7 QATTN_WGMMA_D6, QATTN_WGMMA_Q(6)
#define QATTN_WGMMA_D8 QATTN_WGMMA_D7, QATTN_WGMMA_Q(7)
#define QATTN_WGMMA_D9 QATTN_WGMMA_D8, QATTN_WGMMA_Q(8)
#define QATTN_WGMMA_D10 QATTN_WGMMA_D9, QATTN_WGMMA_Q(9)
#define QATTN_WGMMA_D11 QATTN_WGMMA_D10, QATTN_WGMMA_Q(10)
#define QATTN_WGMMA_D12 QATTN_WGMMA_D11, QATTN_WGMMA_Q(11)
#define QATTN_WGMMA_D13 QATTN_WGMMA_D12, QATTN_WGMMA_Q(12)
#define QATTN_WGMMA_D14 QATTN_WGMMA_D13, QATTN_WGMMA_Q(13)
#define QATTN_WGMMA_D15 QATTN_WGMMA_D14, QATTN_WGMMA_Q(14)
#define QATTN_WGMMA_D16 QATTN_WGMMA_D15, QATTN_WGMMA_Q(15)
#define QATTN_WGMMA_D17 QATTN_WGMMA_D16, QATTN_WGMMA_Q(16)
#define QATTN_WGMMA_D18 QATTN_WGMMA_D17, QATTN_WGMMA_Q(17)
#define QATTN_WGMMA_D19 QATTN_WGMMA_D18, QATTN_WGMMA_Q(18)
#define QATTN_WGMMA_D20 QATTN_WGMMA_D19, QATTN_WGMMA_Q(19)
#define QATTN_WGMMA_D21 QATTN_WGMMA_D20, QATTN_WGMMA_Q(20)
#define QATTN_WGMMA_D22 QATTN_WGMMA_D21, QATTN_WGMMA_Q(21)
#define QATTN_WGMMA_D23 QATTN_WGMMA_D22, QATTN_WGMMA_Q(22)
#define QATTN_WGMMA_D24 QATTN_WGMMA_D23, QATTN_WGMMA_Q(23)
#define QATTN_WGMMA_D25 QATTN_WGMMA_D24, QATTN_WGMMA_Q(24)
#define QATTN_WGMMA_D26 QATTN_WGMMA_D25, QATTN_WGMMA_Q(25)
#define QATTN_WGMMA_D27 QATTN_WGMMA_D26, QATTN_WGMMA_Q(26)
#define QATTN_WGMMA_D28 QATTN_WGMMA_D27, QATTN_WGMMA_Q(27)
#define QATTN_WGMMA_D29 QATTN_WGMMA_D28, QATTN_WGMMA_Q(28)
#define QATTN_WGMMA_D30 QATTN_WGMMA_D29, QATTN_WGMMA_Q(29)
#define QATTN_WGMMA_D31 QATTN_WGMMA_D30, QATTN_WGMMA_Q(30)
#define QATTN_WGMMA_D32 QATTN_WGMMA_D31, QATTN_WGMMA_Q(31)
#define QATTN_WGMMA_R1 "%0, %1, %2, %3"
#define QATTN_WGMMA_R2 QATTN_WGMMA_R1 ", " "%4, %5, %6, %7"
#define QATTN_WGMMA_R3 QATTN_WGMMA_R2 ", " "%8, %9, %10, %11"
#define QATTN_WGMMA_R4 QATTN_WGMMA_R3 ", " "%12, %13, %14, %15"
#define QATTN_WGMMA_R5 QATTN_WGMMA_R4 ", " "%16, %17, %18, %19"
#define QATTN_WGMMA_R6 QATTN_WGMMA_R5 ", " "%20, %21, %22, %23"
#define QATTN_WGMMA_R7 QATTN_WGMMA_R6 ", " "%24, %25, %26, %27"
#define QATTN_WGMMA_R8 QATTN_WGMMA_R7 ", " "%28, %29, %30, %31"
#define QATTN_WGMMA_R9 QATTN_WGMMA_R8 ", " "%32, %33, %34, %35"
#define QATTN_WGMMA_R10 QATTN_WGMMA_R9 ", " "%36, %37, %38, %39"
#define QATTN_WGMMA_R11 QATTN_WGMMA_R10 ", " "%40, %41, %42, %43"
#define QATTN_WGMMA_R12 QATTN_WGMMA_R11 ", " "%44, %45, %46, %47"
#define QATTN_WGMMA_R13 QATTN_WGMMA_R12 ", " "%48, %49, %50, %51"
#define QATTN_WGMMA_R14 QATTN_WGMMA_R13 ", " "%52, %53, %54, %55"
#define QATTN_WGMMA_R15 QATTN_WGMMA_R14 ", " "%56, %57, %58, %59"
#define QATTN_WGMMA_R16 QATTN_WGMMA_R15 ", " "%60, %61, %62, %63"
#define QATTN_WGMMA_R17 QATTN_WGMMA_R16 ", " "%64, %65, %66, %67"
#define QATTN_WGMMA_R18 QATTN_WGMMA_R17 ", " "%68, %69, %70, %71"
#define QATTN_WGMMA_R19 QATTN_WGMMA_R18 ", " "%72, %73, %74, %75"
#define QATTN_WGMMA_R20 QATTN_WGMMA_R19 ", " "%76, %77, %78, %79"
#define QATTN_WGMMA_R21 QATTN_WGMMA_R20 ", " "%80, %81, %82, %83"
#define QATTN_WGMMA_R22 QATTN_WGMMA_R21 ", " "%84, %85, %86, %87"
#define QATTN_WGMMA_R23 QATTN_WGMMA_R22 ", " "%88, %89, %90, %91"
#define QATTN_WGMMA_R24 QATTN_WGMMA_R23 ", " "%92, %93, %94, %95"
#define QATTN_WGMMA_R25 QATTN_WGMMA_R24 ", " "%96, %97, %98, %99"
#define QATTN_WGMMA_R26 QATTN_WGMMA_R25 ", " "%100, %101, %102, %103"
#define QATTN_WGMMA_R27 QATTN_WGMMA_R26 ", " "%104, %105, %106, %107"
#define QATTN_WGMMA_R28 QATTN_WGMMA_R27 ", " "%108, %109, %110, %111"
#define QATTN_WGMMA_R29 QATTN_WGMMA_R28 ", " "%112, %113, %114, %115"
#define QATTN_WGMMA_R30 QATTN_WGMMA_R29 ", " "%116, %117, %118, %119"
#define QATTN_WGMMA_R31 QATTN_WGMMA_R30 ", " "%120, %121, %122, %123"
#define QATTN_WGMMA_R32 QATTN_WGMMA_R31 ", " "%124, %125, %126, %127"

#define QATTN_WGMMA_OP(N, T) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " "
// SS operands after the accumulators: da %p0, db %p1, scale-d %p2, transpose A %p3, transpose B %p4.
#define QATTN_WGMMA_SS(N, C, T, p0, p1, p2, p3, p4)                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #p2 ", 0;\n" QATTN_WGMMA_OP(N, T) "{" QATTN_WGMMA_R##C   \
               "}, %" #p0 ", %" #p1 ", p, 1, 1, %" #p3 ", %" #p4 ";\n}\n"                                    \
               : QATTN_WGMMA_D##C                                                                          \
               : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB))
// RS operands after the accumulators: a0..a3 %p0..%p3, db %p4, scale-d %p5, transpose B %p6.
#define QATTN_WGMMA_RS(N, C, T, p0, p1, p2, p3, p4, p5, p6)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #p5 ", 0;\n" QATTN_WGMMA_OP(N, T) "{" QATTN_WGMMA_R##C   \
               "}, {%" #p0 ", %" #p1 ", %" #p2 ", %" #p3 "}, %" #p4 ", p, 1, 1, %" #p6 ";\n}\n"              \
               : QATTN_WGMMA_D##C                                                                          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB))

template <int N>
struct WgmmaN;

#define QATTN_WGMMA_N(N, C, p0, p1, p2, p3, p4, p5, p6)                                                      \
  template <>                                                                                               \
  struct WgmmaN<N> {                                                                                        \
    template <bool kBf16, int TA, int TB>                                                                   \
    __device__ __forceinline__ static void ss(uint64_t da, uint64_t db, float (&d)[4 * C], int scale_d) {   \
      if constexpr (kBf16) QATTN_WGMMA_SS(N, C, "bf16", p0, p1, p2, p3, p4);                                \
      else QATTN_WGMMA_SS(N, C, "f16", p0, p1, p2, p3, p4);                                                 \
    }                                                                                                       \
    template <bool kBf16, int TB>                                                                           \
    __device__ __forceinline__ static void rs(const uint32_t* a, uint64_t db, float (&d)[4 * C], int scale_d) { \
      if constexpr (kBf16) QATTN_WGMMA_RS(N, C, "bf16", p0, p1, p2, p3, p4, p5, p6);                        \
      else QATTN_WGMMA_RS(N, C, "f16", p0, p1, p2, p3, p4, p5, p6);                                         \
    }                                                                                                       \
  };

QATTN_WGMMA_N(8, 1, 4, 5, 6, 7, 8, 9, 10)
QATTN_WGMMA_N(16, 2, 8, 9, 10, 11, 12, 13, 14)
QATTN_WGMMA_N(24, 3, 12, 13, 14, 15, 16, 17, 18)
QATTN_WGMMA_N(32, 4, 16, 17, 18, 19, 20, 21, 22)
QATTN_WGMMA_N(40, 5, 20, 21, 22, 23, 24, 25, 26)
QATTN_WGMMA_N(48, 6, 24, 25, 26, 27, 28, 29, 30)
QATTN_WGMMA_N(56, 7, 28, 29, 30, 31, 32, 33, 34)
QATTN_WGMMA_N(64, 8, 32, 33, 34, 35, 36, 37, 38)
QATTN_WGMMA_N(72, 9, 36, 37, 38, 39, 40, 41, 42)
QATTN_WGMMA_N(80, 10, 40, 41, 42, 43, 44, 45, 46)
QATTN_WGMMA_N(88, 11, 44, 45, 46, 47, 48, 49, 50)
QATTN_WGMMA_N(96, 12, 48, 49, 50, 51, 52, 53, 54)
QATTN_WGMMA_N(104, 13, 52, 53, 54, 55, 56, 57, 58)
QATTN_WGMMA_N(112, 14, 56, 57, 58, 59, 60, 61, 62)
QATTN_WGMMA_N(120, 15, 60, 61, 62, 63, 64, 65, 66)
QATTN_WGMMA_N(128, 16, 64, 65, 66, 67, 68, 69, 70)
QATTN_WGMMA_N(136, 17, 68, 69, 70, 71, 72, 73, 74)
QATTN_WGMMA_N(144, 18, 72, 73, 74, 75, 76, 77, 78)
QATTN_WGMMA_N(152, 19, 76, 77, 78, 79, 80, 81, 82)
QATTN_WGMMA_N(160, 20, 80, 81, 82, 83, 84, 85, 86)
QATTN_WGMMA_N(168, 21, 84, 85, 86, 87, 88, 89, 90)
QATTN_WGMMA_N(176, 22, 88, 89, 90, 91, 92, 93, 94)
QATTN_WGMMA_N(184, 23, 92, 93, 94, 95, 96, 97, 98)
QATTN_WGMMA_N(192, 24, 96, 97, 98, 99, 100, 101, 102)
QATTN_WGMMA_N(200, 25, 100, 101, 102, 103, 104, 105, 106)
QATTN_WGMMA_N(208, 26, 104, 105, 106, 107, 108, 109, 110)
QATTN_WGMMA_N(216, 27, 108, 109, 110, 111, 112, 113, 114)
QATTN_WGMMA_N(224, 28, 112, 113, 114, 115, 116, 117, 118)
QATTN_WGMMA_N(232, 29, 116, 117, 118, 119, 120, 121, 122)
QATTN_WGMMA_N(240, 30, 120, 121, 122, 123, 124, 125, 126)
QATTN_WGMMA_N(248, 31, 124, 125, 126, 127, 128, 129, 130)
QATTN_WGMMA_N(256, 32, 128, 129, 130, 131, 132, 133, 134)

#undef QATTN_WGMMA_N
#undef QATTN_WGMMA_RS
#undef QATTN_WGMMA_SS
#undef QATTN_WGMMA_OP
#undef QATTN_WGMMA_D1
#undef QATTN_WGMMA_R1
#undef QATTN_WGMMA_D2
#undef QATTN_WGMMA_R2
#undef QATTN_WGMMA_D3
#undef QATTN_WGMMA_R3
#undef QATTN_WGMMA_D4
#undef QATTN_WGMMA_R4
#undef QATTN_WGMMA_D5
#undef QATTN_WGMMA_R5
#undef QATTN_WGMMA_D6
#undef QATTN_WGMMA_R6
#undef QATTN_WGMMA_D7
#undef QATTN_WGMMA_R7
#undef QATTN_WGMMA_D8
#undef QATTN_WGMMA_R8
#undef QATTN_WGMMA_D9
#undef QATTN_WGMMA_R9
#undef QATTN_WGMMA_D10
#undef QATTN_WGMMA_R10
#undef QATTN_WGMMA_D11
#undef QATTN_WGMMA_R11
#undef QATTN_WGMMA_D12
#undef QATTN_WGMMA_R12
#undef QATTN_WGMMA_D13
#undef QATTN_WGMMA_R13
#undef QATTN_WGMMA_D14
#undef QATTN_WGMMA_R14
#undef QATTN_WGMMA_D15
#undef QATTN_WGMMA_R15
#undef QATTN_WGMMA_D16
#undef QATTN_WGMMA_R16
#undef QATTN_WGMMA_D17
#undef QATTN_WGMMA_R17
#undef QATTN_WGMMA_D18
#undef QATTN_WGMMA_R18
#undef QATTN_WGMMA_D19
#undef QATTN_WGMMA_R19
#undef QATTN_WGMMA_D20
#undef QATTN_WGMMA_R20
#undef QATTN_WGMMA_D21
#undef QATTN_WGMMA_R21
#undef QATTN_WGMMA_D22
#undef QATTN_WGMMA_R22
#undef QATTN_WGMMA_D23
#undef QATTN_WGMMA_R23
#undef QATTN_WGMMA_D24
#undef QATTN_WGMMA_R24
#undef QATTN_WGMMA_D25
#undef QATTN_WGMMA_R25
#undef QATTN_WGMMA_D26
#undef QATTN_WGMMA_R26
#undef QATTN_WGMMA_D27
#undef QATTN_WGMMA_R27
#undef QATTN_WGMMA_D28
#undef QATTN_WGMMA_R28
#undef QATTN_WGMMA_D29
#undef QATTN_WGMMA_R29
#undef QATTN_WGMMA_D30
#undef QATTN_WGMMA_R30
#undef QATTN_WGMMA_D31
#undef QATTN_WGMMA_R31
#undef QATTN_WGMMA_D32
#undef QATTN_WGMMA_R32
#undef QATTN_WGMMA_Q

}  // namespace detail

template <int N, class Element, Major A, Major B>
struct Wgmma {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16: N = 8 .. 256 in steps of 8");
  static_assert(std::is_same_v<Element, __nv_bfloat16> || std::is_same_v<Element, __half>, "bf16 or fp16 operands");
  static constexpr int kN = N, kAcc = N / 2;
  static constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
  __device__ __forceinline__ static void ss(uint64_t da, uint64_t db, float (&acc)[N / 2], bool accumulate) {
    detail::WgmmaN<N>::template ss<kBf16, int(A), int(B)>(da, db, acc, accumulate ? 1 : 0);
  }
  __device__ __forceinline__ static void rs(const uint32_t* a, uint64_t db, float (&acc)[N / 2], bool accumulate) {
    static_assert(A == Major::K, "an A operand from registers is K-major");
    detail::WgmmaN<N>::template rs<kBf16, int(B)>(a, db, acc, accumulate ? 1 : 0);
  }
};

}  // namespace qattn::sm90
