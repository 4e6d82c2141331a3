// The sm90 emitter's C ABI: qattn_kernel_info, qattn_last_error and qattn_fwd, which checks the call
// (host.cuh), writes the TL's launch arguments and Grid, and launches the kernel (launch.cuh builds
// the tensor maps).
#include <algorithm>

#include "backend/arch.h"
#include "backend/cuda_out.h"
#include "backend/lowering.h"
#include "backend/sm90/emit.h"

namespace qattn::backend::sm90 {

void emit_abi(detail::Writer& w, const kir::Kernel& k, const std::string& info_json) {
  const kir::Scope& sc = k.scope;
  w.line("}  // namespace qattn_generated");
  w.line();
  w.line("// ---- the C ABI (include/qattn/qattn.h) ----");
  w.line("#pragma GCC visibility pop");
  w.line("#if !defined(__CUDA_ARCH__)  // the launch code");
  abi_begin(w, info_json);
  w.open("QATTN_EXPORT int qattn_fwd(const qattn_fwd_params* params, void* stream) {");
  unsigned aux = 0;
  for (const auto& a : sc.aux) aux |= 1u << a.slot;
  const int eb = dtype_bytes(k.elem), ob = dtype_bytes(k.out);
  for (const auto& g : sc.globals) w.line("// TL " + std::to_string(g.line) + ": " + g.text + "  (a tensor of qattn_fwd_params)");
  w.line("if (int st = qattn::host::check_fwd_params(params, " + std::to_string(k.d_qk) + ", " + std::to_string(k.d_v) + ", " +
         std::to_string(eb) + ", " + std::to_string(ob) + ", " + cpp_bool(k.lse) + ", " + std::to_string(aux) + "u" +
         (k.launch.split ? ", true" : "") + "); st != QATTN_OK)");
  w.line("  return st;");
  // TL {view: K}: V is read from K's first d_v columns
  if (std::any_of(k.smem.begin(), k.smem.end(), [](const kir::SharedBuf& b) { return b.name == "V" && b.view_of == "K"; }))
    w.line(
        "if (params->v != params->k || params->v_row_stride != params->k_row_stride || params->v_head_stride != params->k_head_stride || "
        "params->v_batch_stride != params->k_batch_stride) return qattn::host::fail(QATTN_ERR_SHAPE, \"this kernel reads V as the "
        "first d_v columns of K (TL {view: K}): pass v = k with k's strides\");");
  if (!sc.paged.empty())  // TL {paged}: whole pages of a multiple of 8 rows per TMA box
    w.line("if (int st = qattn::host::check_paged(*params, 8, " + std::to_string(k.sm90.bn) + "); st != QATTN_OK) return st;");
  if (!sc.q_start_cpp.empty() || !sc.kv_start_cpp.empty())  // TL {ragged}: the packed rows of ABI 5
    w.line(std::string("if (int st = qattn::host::check_ragged(*params, ") + cpp_bool(!sc.q_start_cpp.empty()) + ", " +
           cpp_bool(!sc.kv_start_cpp.empty()) + "); st != QATTN_OK) return st;");
  w.line("const qattn_fwd_params& p = *params;");
  detail::write_launch_args(w, sc.launch_args);
  w.line("if (p.seqlen_q == 0) return qattn::host::ok();");
  std::string dims;
  for (const auto& n : sc.runtime_dims) dims += (dims.empty() ? "" : ", ") + n.cpp + " = " + n.value_cpp;
  if (!dims.empty()) w.line("[[maybe_unused]] const int " + dims + ";");
  w.line("// TL " + std::to_string(k.launch.grid_tl.line) + ": " + k.launch.grid_tl.text);
  // split keys: the parts (the fourth axis) are folded into the batch axis, b * splits + s
  w.line("const long long gx = " + sc.grid_extents_cpp[0] + ", gy = " + sc.grid_extents_cpp[1] + ", gz = " + sc.grid_extents_cpp[2] +
         (sc.grid.size() > 3 ? " * 1LL * (" + sc.grid_extents_cpp[3] + ")" : "") + ";");
  w.line("bool empty = false;");
  w.line("if (int st = qattn::host::check_tiles(gx, gy, gz, &empty); st != QATTN_OK || empty) return st;  // a 1-D launch");
  w.line("Params kp;");
  w.line("int blocks = 0;");
  w.line("const KernelShape shape{" + std::to_string(k.sm90.bm) + ", " + std::to_string(k.sm90.bn) + ", " + std::to_string(k.d_qk) + ", " +
         std::to_string(k.d_v) + ", kBf16, " + cpp_bool(k.lse) + ", kPack, kPersistent" +
         (sc.q_start_cpp.empty() && sc.kv_start_cpp.empty() && !k.launch.split
              ? (sc.paged.empty() ? "" : ", true")
              : ", " + cpp_bool(!sc.paged.empty()) + ", " + cpp_bool(!sc.q_start_cpp.empty()) + ", " + cpp_bool(!sc.kv_start_cpp.empty()) +
                    (k.launch.split ? ", true" : "")) +
         "};");
  const std::string wl = sc.mask == kir::MaskKind::Window ? sc.window_left_cpp : "0";
  const std::string wr = sc.mask == kir::MaskKind::Window ? sc.window_right_cpp : "0";
  w.line("if (int st = make_params(&kp, p, shape, gx * gy * gz, " + wl + ", " + wr + ", &blocks); st != QATTN_OK) return st;");
  if (k.sm90.merge.on)  // TL Merge (ABI 10): the merged O / LSE, the counters
    w.line("if (int st = merge_params(&kp, p, gx, gy, kConsumers, stream); st != QATTN_OK) return st;");
  for (size_t i = 0; i < k.sm90.scalars.size(); ++i)
    w.line("kp.scalars[" + std::to_string(i) + "] = " + k.sm90.scalars[i].value_cpp + ";  // " + k.sm90.scalars[i].cpp + " (TL " +
           std::to_string(k.sm90.scalars[i].tl.line) + ")");
  w.line("#if defined(QATTN_HOST_ONLY)  // the split build: the kernel of the fatbin linked into this library");
  w.line("return launch_fatbin(\"" + k.name + "\", kp, blocks, kThreads, kSmemBytes, stream, \"" + k.name + " launch\");");
  w.line("#else");
  w.line("return launch(" + k.name + ", kp, blocks, kThreads, kSmemBytes, stream, \"" + k.name + " launch\");");
  w.line("#endif");
  w.close();
  abi_end(w);
  w.line("#endif  // the launch code");
}

}  // namespace qattn::backend::sm90
