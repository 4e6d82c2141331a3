// Per-architecture lowering table (see arch.h).
#include "backend/arch.h"

namespace qattn::backend {

const char* cute_type(tl::DType t) {
  switch (t) {
    case tl::DType::F16: return "cute::half_t";
    case tl::DType::BF16: return "cute::bfloat16_t";
    case tl::DType::F8E4M3: return "cute::float_e4m3_t";
    case tl::DType::F8E5M2: return "cute::float_e5m2_t";
    case tl::DType::F32: return "float";
    case tl::DType::I32: return "int";
  }
  return "float";
}

const char* cuda_type(tl::DType t) {
  switch (t) {
    case tl::DType::F16: return "__half";
    case tl::DType::BF16: return "__nv_bfloat16";
    case tl::DType::F8E4M3: return "__nv_fp8_e4m3";
    case tl::DType::F8E5M2: return "__nv_fp8_e5m2";
    case tl::DType::F32: return "float";
    case tl::DType::I32: return "int";
  }
  return "float";
}

namespace {
const char kWgmma[] = "qattn::sm90::Wgmma<";
}

std::string wgmma_atom(int n, tl::DType t, bool a_mn, bool b_mn) {
  const std::string major = "qattn::sm90::Major::";
  return kWgmma + std::to_string(n) + ", " + cuda_type(t) + ", " + major + (a_mn ? "MN" : "K") + ", " + major +
         (b_mn ? "MN" : "K") + ">";
}

int wgmma_atom_n(const std::string& atom) {
  if (atom.rfind(kWgmma, 0) != 0) return 0;
  int n = 0;
  for (size_t i = sizeof(kWgmma) - 1; i < atom.size() && atom[i] >= '0' && atom[i] <= '9' && n < 100000; ++i)
    n = 10 * n + (atom[i] - '0');
  return n;
}

int dtype_bytes(tl::DType t) {
  switch (t) {
    case tl::DType::F16:
    case tl::DType::BF16: return 2;
    case tl::DType::F8E4M3:
    case tl::DType::F8E5M2: return 1;
    case tl::DType::F32:
    case tl::DType::I32: return 4;
  }
  return 4;
}

int copy_threads_per_row(int cols, int bytes) {
  const int chunks = cols * bytes / 16;
  return chunks % 8 == 0 ? 8 : chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
}

std::optional<ArchSpec> choose_arch(const plan::Target& target, tl::DType dt, support::DiagSink& diags,
                                    support::SrcLoc where, bool wgmma) {
  const int sm = target.sm;
  const std::string tname = target.name.empty() ? "sm" + std::to_string(sm) : target.name;
  if (sm < 75) {
    diags.error("XL0101", where, "no lowering for " + tname + " (sm" + std::to_string(sm) + ")",
                "the translator lowers sm75 (Turing), sm80-sm89 (Ampere, Ada) and runs the sm80 lowering on sm90");
    return std::nullopt;
  }
  ArchSpec a;
  a.element = cute_type(dt);
  if (wgmma) {
    if (dt != tl::DType::F16 && dt != tl::DType::BF16) {
      diags.error("XL0102", where, std::string(tl::to_string(dt)) + " operands are not lowered to wgmma yet",
                  "use fp16/bf16 on sm90, or --gpu l40s for the sm89 fp8 (mma.sync) kernel");
      return std::nullopt;
    }
    a.name = "sm90";
    a.sm = 90;
    a.elem_bytes = 2;
    a.mma_atom = dt == tl::DType::BF16 ? "SM90_64xNx16_F32BF16BF16 (SS, RS)" : "SM90_64xNx16_F32F16F16 (SS, RS)";
    a.mma_instr = "wgmma.mma_async.sync.aligned.m64nNk16";
    a.mma_k = 16;
    a.tile_k = 16;
    a.gencode = {"-gencode=arch=compute_90a,code=sm_90a"};
    return a;
  }
  a.elem_bytes = dtype_bytes(dt);
  a.ldsm_n = "SM75_U32x4_LDSM_N";
  if (dt == tl::DType::F8E4M3) {
    if (sm < 89) {
      diags.error("XL0102", where, "fp8_e4m3 has no tensor-core path on " + tname,
                  "fp8 needs sm89 (L40S, RTX 4090) or newer; use fp16/bf16 here");
      return std::nullopt;
    }
    a.name = "sm89";
    a.sm = 89;
    a.mma_atom = "SM89_16x8x32_F32E4M3E4M3F32_TN";
    a.mma_instr = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32";
    a.mma_k = 32;
    a.tile_k = 32;
    a.ldsm_t = "";  // no ldmatrix.trans for 8-bit data: V^T is built in shared memory
    a.reshape_fn = "qattn::acc_to_a_m16n8k32";
    a.cp_async = true;
    a.fp8 = true;
    if (sm >= 90)
      a.gencode = {"-gencode=arch=compute_89,code=sm_90", "-gencode=arch=compute_89,code=compute_89"};
    else
      a.gencode = {"-gencode=arch=compute_" + std::to_string(sm) + ",code=sm_" + std::to_string(sm)};
    return a;
  }
  if (dt == tl::DType::F8E5M2) {
    diags.error("XL0102", where, "fp8_e5m2 operands are not lowered", "use fp8_e4m3 (sm89) or fp16/bf16");
    return std::nullopt;
  }
  if (dt != tl::DType::F16 && dt != tl::DType::BF16) {
    diags.error("XL0102", where, std::string("GEMM operands of dtype ") + tl::to_string(dt) + " are not lowered",
                "Q, K and V must be fp16, bf16 or fp8_e4m3");
    return std::nullopt;
  }
  const bool bf16 = dt == tl::DType::BF16;
  a.ldsm_t = "SM75_U16x8_LDSM_T";
  if (sm < 80) {
    if (bf16) {
      diags.error("XL0102", where, "bf16 has no tensor-core path on " + tname, "use fp16 on Turing (sm75)");
      return std::nullopt;
    }
    a.name = "sm75";
    a.sm = 75;
    a.mma_atom = "SM75_16x8x8_F32F16F16F32_TN";
    a.mma_instr = "mma.sync.aligned.m16n8k8";
    a.mma_k = 8;
    a.tile_k = 16;
    a.reshape_fn = "qattn::acc_to_a_m16n8k8";
    a.cp_async = false;
    a.gencode = {"-gencode=arch=compute_75,code=sm_75"};
    return a;
  }
  a.name = "sm80";
  a.sm = 80;
  a.mma_atom = bf16 ? "SM80_16x8x16_F32BF16BF16F32_TN" : "SM80_16x8x16_F32F16F16F32_TN";
  a.mma_instr = "mma.sync.aligned.m16n8k16";
  a.mma_k = 16;
  a.tile_k = 16;
  a.reshape_fn = "qattn::acc_to_a_m16n8k16";
  a.cp_async = true;
  if (sm >= 90) {
    // The sm80 lowering runs on Hopper (an sm_80 cubin does not load on sm_90): sm_90 machine code
    // from compute_90 PTX, plus compute_80 PTX for the driver to JIT elsewhere. The same CUDA from
    // compute_80 PTX ran 1.16-1.33x slower on an H200 (the backward at d64 / d128 / MLA 192/128 / d256,
    // bench/results/2026-11-29-h200-bwd-sm80).
    a.gencode = {"-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_80,code=compute_80"};
  } else {
    a.gencode = {"-gencode=arch=compute_" + std::to_string(sm) + ",code=sm_" + std::to_string(sm)};
  }
  return a;
}

}  // namespace qattn::backend
