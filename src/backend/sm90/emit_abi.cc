// The sm90 emitter's C ABI: qattn_kernel_info, qattn_last_error and qattn_fwd, which checks the call
// (host.cuh), writes the TL's launch arguments and Grid, and launches the kernel (launch.cuh builds
// the tensor maps).
#include <algorithm>

#include "backend/cuda_out.h"
#include "backend/arch.h"
#include "backend/lowering.h"
#include "backend/sm90/emit.h"

namespace qattn::backend::sm90 {

void emit_abi(detail::Writer& w_, const kir::Kernel& k_, const std::string& info_json) {
  const kir::Scope& sc = k_.scope;
  w_.line("}  // namespace qattn_generated");
  w_.line();
  w_.line("// ---- the C ABI (include/qattn/qattn.h) ----");
  w_.line("#pragma GCC visibility pop");
  w_.line("#if !defined(__CUDA_ARCH__)  // the launch code");
  abi_begin(w_, info_json);
  w_.open("QATTN_EXPORT int qattn_fwd(const qattn_fwd_params* params, void* stream) {");
  unsigned aux = 0;
  for (const auto& a : sc.aux) aux |= 1u << a.slot;
  const int eb = dtype_bytes(k_.elem), ob = dtype_bytes(k_.out);
  for (const auto& g : sc.globals) w_.line("// TL " + std::to_string(g.line) + ": " + g.text + "  (a tensor of qattn_fwd_params)");
  w_.line("if (int st = qattn::host::check_fwd_params(params, " + std::to_string(k_.d_qk) + ", " + std::to_string(k_.d_v) + ", " +
          std::to_string(eb) + ", " + std::to_string(ob) + ", " + cpp_bool(k_.lse) + ", " + std::to_string(aux) + "u" +
          (k_.launch.split ? ", true" : "") + "); st != QATTN_OK)");
  w_.line("  return st;");
  if (std::any_of(k_.smem.begin(), k_.smem.end(), [](const kir::SharedBuf& b) { return b.name == "V" && b.view_of == "K"; }))  // TL {view: K}: V is read from K's first d_v columns
    w_.line("if (params->v != params->k || params->v_row_stride != params->k_row_stride || params->v_head_stride != params->k_head_stride || "
            "params->v_batch_stride != params->k_batch_stride) return qattn::host::fail(QATTN_ERR_SHAPE, \"this kernel reads V as the "
            "first d_v columns of K (TL {view: K}): pass v = k with k's strides\");");
  if (!sc.paged.empty())  // TL {paged}: whole pages of a multiple of 8 rows per TMA box
    w_.line("if (int st = qattn::host::check_paged(*params, 8, " + std::to_string(k_.sm90.bn) + "); st != QATTN_OK) return st;");
  if (!sc.q_start_cpp.empty() || !sc.kv_start_cpp.empty())  // TL {ragged}: the packed rows of ABI 5
    w_.line(std::string("if (int st = qattn::host::check_ragged(*params, ") + cpp_bool(!sc.q_start_cpp.empty()) + ", " +
            cpp_bool(!sc.kv_start_cpp.empty()) + "); st != QATTN_OK) return st;");
  w_.line("const qattn_fwd_params& p = *params;");
  detail::write_launch_args(w_, sc.launch_args);
  w_.line("if (p.seqlen_q == 0) return qattn::host::ok();");
  std::string dims;
  for (const auto& n : sc.runtime_dims) dims += (dims.empty() ? "" : ", ") + n.cpp + " = " + n.value_cpp;
  if (!dims.empty()) w_.line("[[maybe_unused]] const int " + dims + ";");
  w_.line("// TL " + std::to_string(k_.launch.grid_tl.line) + ": " + k_.launch.grid_tl.text);
  // split keys: the parts (the fourth axis) are folded into the batch axis, b * splits + s
  w_.line("const long long gx = " + sc.grid_extents_cpp[0] + ", gy = " + sc.grid_extents_cpp[1] + ", gz = " + sc.grid_extents_cpp[2] +
          (sc.grid.size() > 3 ? " * 1LL * (" + sc.grid_extents_cpp[3] + ")" : "") + ";");
  w_.line("bool empty = false;");
  w_.line("if (int st = qattn::host::check_tiles(gx, gy, gz, &empty); st != QATTN_OK || empty) return st;  // a 1-D launch");
  w_.line("Params kp;");
  w_.line("int blocks = 0;");
  w_.line("const KernelShape shape{" + std::to_string(k_.sm90.bm) + ", " + std::to_string(k_.sm90.bn) + ", " + std::to_string(k_.d_qk) +
          ", " + std::to_string(k_.d_v) + ", kBf16, " + cpp_bool(k_.lse) + ", kPack, kPersistent" +
          (sc.q_start_cpp.empty() && sc.kv_start_cpp.empty() && !k_.launch.split
               ? (sc.paged.empty() ? "" : ", true")
               : ", " + cpp_bool(!sc.paged.empty()) + ", " + cpp_bool(!sc.q_start_cpp.empty()) + ", " + cpp_bool(!sc.kv_start_cpp.empty()) +
                     (k_.launch.split ? ", true" : "")) +
          "};");
  const std::string wl = sc.mask == kir::MaskKind::Window ? sc.window_left_cpp : "0";
  const std::string wr = sc.mask == kir::MaskKind::Window ? sc.window_right_cpp : "0";
  w_.line("if (int st = make_params(&kp, p, shape, gx * gy * gz, " + wl + ", " + wr + ", &blocks); st != QATTN_OK) return st;");
  if (k_.sm90.merge.on)  // TL Merge (ABI 10): the merged O / LSE, the counters
    w_.line("if (int st = merge_params(&kp, p, gx, gy, kConsumers, stream); st != QATTN_OK) return st;");
  for (size_t i = 0; i < k_.sm90.scalars.size(); ++i)
    w_.line("kp.scalars[" + std::to_string(i) + "] = " + k_.sm90.scalars[i].value_cpp + ";  // " + k_.sm90.scalars[i].cpp + " (TL " +
            std::to_string(k_.sm90.scalars[i].tl.line) + ")");
  w_.line("#if defined(QATTN_HOST_ONLY)  // the split build: the kernel of the fatbin linked into this library");
  w_.line("return launch_fatbin(\"" + k_.name + "\", kp, blocks, kThreads, kSmemBytes, stream, \"" + k_.name + " launch\");");
  w_.line("#else");
  w_.line("return launch(" + k_.name + ", kp, blocks, kThreads, kSmemBytes, stream, \"" + k_.name + " launch\");");
  w_.line("#endif");
  w_.close();
  abi_end(w_);
  w_.line("#endif  // the launch code");
}

}  // namespace qattn::backend::sm90
