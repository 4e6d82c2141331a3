// The one vocabulary of mask kinds and element types, from the spec to the device. The spec
// (spec::Mask::kind, spec::DType), its fp64 reference (spec::MaskKind), the TL (tl::MaskSpec::Kind,
// tl::DType), the kernel IR (kir::MaskKind) and the device runtime (device/qattn/mask.cuh, and the
// generated kernels' `qattn::MaskKind::Causal`) all name these two types, and to_string() is their
// one spelling (the TL's, the spec JSON's and the kernel IR's words).
// Plain C++17, no CUDA, no std::string: host C++ and nvcc device code both include it.
#pragma once

namespace qattn {

// Which keys a query row q sees (key column k), with off = seqlen_k - seqlen_q:
//   None           every key: a spec or a Kernel header without a mask
//   Bounds         only the sequence bounds, 0 <= k < seqlen_k (the tile mask of an unmasked kernel)
//   Causal         k <= q + off (bottom-right aligned)
//   CausalTopLeft  k <= q
//   Window         q + off - left <= k <= q + off + right (bottom-right aligned)
//   Named          a TL `Mask NAME = ...` declaration; never reaches the device as a kind
// The spec uses None, Causal, CausalTopLeft and Window.
enum class MaskKind { None, Bounds, Causal, CausalTopLeft, Window, Named };

// Element types. The spec accepts F16, BF16 and F8E4M3 (Q, K, V); F32 is the accumulators' and
// the LSE's; I32 is for auxiliary tensors only.
enum class DType {
  F32, F16, BF16, F8E4M3, F8E5M2, I32,
};

constexpr const char* to_string(MaskKind k) {
  switch (k) {
    case MaskKind::None: return "none";
    case MaskKind::Bounds: return "bounds";
    case MaskKind::Causal: return "causal";
    case MaskKind::CausalTopLeft: return "causal_top_left";
    case MaskKind::Window: return "window";
    case MaskKind::Named: return "named";
  }
  return "?";
}

constexpr const char* to_string(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::F8E4M3: return "fp8_e4m3";
    case DType::F8E5M2: return "fp8_e5m2";
    case DType::I32: return "int32";
  }
  return "?";
}

}  // namespace qattn
