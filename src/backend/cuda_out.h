// Indented C++ text, as the statement-by-statement lowerings write it (src/backend/bwd,
// src/backend/combine).
#pragma once
#include <sstream>
#include <string>
#include <vector>

namespace qattn::backend {

class CudaOut {
 public:
  void line(const std::string& s = {}) { os_ << (s.empty() ? "" : std::string(indent_ * 2, ' ') + s) << "\n"; }
  void open(const std::string& s) { line(s); ++indent_; }
  void close(const std::string& s = "}") { --indent_; line(s); }
  void raw(const std::string& s) { os_ << s; }  // text written by another CudaOut
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
  int indent_ = 0;
};

// The exports every generated library shares: QATTN_EXPORT, `extern "C" {`, qattn_last_error and
// qattn_kernel_info returning `info_json`. The caller writes its entry point and closes with
// abi_end(). W: any writer with line() (CudaOut here, the forward emitters' Writer).
template <class W>
inline void abi_begin(W& w, const std::string& info_json) {
  w.line("#define QATTN_EXPORT __attribute__((visibility(\"default\")))");
  w.line("using namespace qattn_generated;");
  w.line("extern \"C\" {");
  w.line();
  w.line("QATTN_EXPORT const char* qattn_last_error(void) { return qattn::host::error_buffer(); }");
  w.line();
  w.line("QATTN_EXPORT const char* qattn_kernel_info(void) {");
  w.line("  return R\"json(" + info_json + ")json\";");
  w.line("}");
  w.line();
}
template <class W>
inline void abi_end(W& w) {
  w.line();
  w.line("}  // extern \"C\"");
}

// The launch of the TL Grid (C++ extents, x y z): checked against CUDA's limits (an empty axis
// launches nothing), `before_launch` lines (e.g. raising the shared-memory limit), the launch on
// `stream` with `args` (the kernel's arguments), and the status of the launch.
inline void launch_grid(CudaOut& w, const std::string (&ext)[3], const std::string& kernel, const std::string& threads,
                        const std::string& smem, const std::vector<std::string>& before_launch = {},
                        const std::string& args = "p") {
  w.line("const long long gx = " + ext[0] + ", gy = " + ext[1] + ", gz = " + ext[2] + ";");
  w.line("bool empty = false;");
  w.line("if (int st = qattn::host::check_grid(gx, gy, gz, &empty); st != QATTN_OK || empty) return st;");
  for (const auto& l : before_launch) w.line(l);
  w.line(kernel + "<<<dim3(unsigned(gx), unsigned(gy), unsigned(gz)), " + threads + ", " + smem +
         ", static_cast<cudaStream_t>(stream)>>>(" + args + ");");
  w.line("return qattn::host::launch_status(cudaGetLastError(), \"" + kernel + " launch\");");
}

}  // namespace qattn::backend
