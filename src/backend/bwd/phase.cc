// Backward programs' Phases (docs/tl.md, "Phases"): each `Phase NAME ... end` block is a kernel of
// its own, lowered statement by statement onto the row-wise primitives (src/backend/rowwise.h,
// device/qattn/rowwise.cuh) and launched by qattn_bwd before the main kernel on the same stream
// (e.g. FlashAttention's preprocessing D = rowsum(dO * O)). The fp32 globals a phase writes
// (workspaces: one value per query row of each (batch, query head)) live in qattn_bwd_params'
// workspace, before the `{ordered}` turn counters; the main kernel reads them like LSE.
#include "backend/bwd/lower_impl.h"
#include "backend/rowwise.h"

namespace qattn::backend::bwd::detail {

bool Lower::collect_workspaces() {
  for (const auto& s : prog_.stmts) {
    if (s.kind != Stmt::Kind::Phase) continue;
    for (const auto& b : s.loop.body) {
      if (b.kind != Stmt::Kind::Allocate || b.alloc.space != tl::Space::Global || find_arg(b.alloc.name)) continue;
      if (std::find(workspaces_.begin(), workspaces_.end(), b.alloc.name) != workspaces_.end()) continue;
      if (b.alloc.shape.size() != 1)
        return fail("XL0301", b.loc, "the 2-D workspace " + b.alloc.name + " is not lowered",
                    "a phase's workspace holds one fp32 value per query row: `Allocate " + b.alloc.name +
                        " in global (seqlen_q) fp32 with offset [b, head]`");
      workspaces_.push_back(b.alloc.name);
    }
  }
  return true;
}

bool Lower::is_workspace(const std::string& n) const {
  return std::find(workspaces_.begin(), workspaces_.end(), n) != workspaces_.end();
}

std::string Lower::workspace_elems() const {
  if (workspaces_.empty()) return "0";
  return std::to_string(workspaces_.size()) + " * int64_t(p.batch) * p.heads_q * p.seqlen_q";
}

std::string Lower::workspace_ptr(const std::string& n, const tl::AllocateStmt& a) const {
  const size_t k = size_t(std::find(workspaces_.begin(), workspaces_.end(), n) - workspaces_.begin());
  return "reinterpret_cast<float*>(p.workspace) + " + (k ? std::to_string(k) + " * int64_t(p.batch) * p.heads_q * p.seqlen_q + " : "") +
         "(int64_t(" + cint(a.offset[0]) + ") * p.heads_q + (" + cint(a.offset[1]) + ")) * p.seqlen_q";
}

void Lower::phase_kernels(Out& w) {
  for (const auto& s : prog_.stmts) {
    if (failed_) return;
    if (s.kind != Stmt::Kind::Phase) continue;
    const std::string name = id(s.loop.var), kname = kernel_name_ + "_" + name;
    const Stmt* grid = nullptr;
    for (const auto& b : s.loop.body)
      if (b.kind == Stmt::Kind::Grid) grid = &b;
    if (!grid || grid->grid.items.empty() || grid->grid.items.size() > 3) {
      fail("XL0301", s.loc, "Phase " + s.loop.var + " has no Grid of 1 to 3 axes", "`Grid m = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch`");
      return;
    }
    const char* native = elem_ == tl::DType::BF16 ? "__nv_bfloat16" : "__half";
    auto bind = [&, native](CudaOut& o, const Stmt& st) -> std::optional<rowwise::GlobalView> {
      const auto& a = st.alloc;
      const GlobalArg* ga = find_arg(a.name);
      if (a.offset.size() != 2 || (ga && ga->out)) {
        fail("XL0301", st.loc, "global " + a.name + " in Phase " + s.loop.var + " is not lowered",
             "a phase reads the kernel's inputs (Q, K, V, O, dO, LSE) and writes its fp32 workspaces, each `with offset [b, head]`");
        return std::nullopt;
      }
      rowwise::GlobalView g;
      g.var = "g_" + id(a.name);
      g.rows = cint(a.shape[0]);
      const std::string b = cint(a.offset[0]), h = cint(a.offset[1]);
      if (is_workspace(a.name)) {
        o.line("float* " + g.var + " = " + workspace_ptr(a.name, a) + ";  // (seqlen_q) of the workspace");
        g.row_stride = "1", g.vec = true;
      } else if (a.name == "LSE") {
        o.line("const float* " + g.var + " = p.lse + (int64_t(" + b + ") * p.heads_q + (" + h + ")) * p.seqlen_q;");
        g.row_stride = "1", g.vec = true;
      } else {
        o.line(std::string("const ") + native + "* " + g.var + " = static_cast<const " + native + "*>(p." + ga->field + ") + int64_t(" + b +
               ") * p." + ga->stride + "_batch_stride + int64_t(" + h + ") * p." + ga->stride + "_head_stride;");
        g.row_stride = std::string("p.") + ga->stride + "_row_stride";
      }
      return g;
    };
    rowwise::Body body("phase", names_, env_, diags_, bind);
    if (!body.tiling(s.loop.body, s.loc)) {
      failed_ = true;
      return;
    }
    w.line(ref(s) + ": a kernel of its own, launched by qattn_bwd before " + kernel_name_);
    w.open("namespace phase_" + name + " {");
    w.line(body.tiling_decl());
    w.open("__global__ void __launch_bounds__(Tiling::kThreads) " + kname + "(const __grid_constant__ qattn_bwd_params p) {");
    std::string dims;
    for (const auto& n : runtime_dims_) dims += (dims.empty() ? "" : ", ") + id(n) + " = p." + n;
    if (!dims.empty()) w.line("[[maybe_unused]] const int " + dims + ";");
    w.line(ref(*grid));
    static const char* axes[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
    for (size_t i = 0; i < grid->grid.items.size(); ++i) w.line("const int " + id(grid->grid.items[i].var) + " = " + axes[i] + ";");
    body.emit(w, s.loop.body);
    w.close();
    w.close("}  // namespace phase_" + name);
    w.line();
    if (body.failed()) {
      failed_ = true;
      return;
    }
    Phase ph;
    ph.kernel = "phase_" + name + "::" + kname;
    ph.threads = "phase_" + name + "::Tiling::kThreads";
    ph.ref = ref(s);
    for (size_t i = 0; i < 3; ++i) ph.ext[i] = i < grid->grid.items.size() ? cint(grid->grid.items[i].extent) : "1";
    ph.kir = "phase " + s.loop.var + ": rows " + std::to_string(body.rows()) + " x " + std::to_string(body.cols()) + " over " +
             std::to_string(body.warps()) + " warps (row-wise)";
    phases_.push_back(ph);
  }
}

void Lower::phase_launches(Out& w) {
  for (const auto& ph : phases_) {
    w.line(ph.ref + ": first, on the same stream");
    w.open("{");
    w.line("const long long gx = " + ph.ext[0] + ", gy = " + ph.ext[1] + ", gz = " + ph.ext[2] + ";");
    w.line("bool empty = false;");
    w.line("if (int st = qattn::host::check_grid(gx, gy, gz, &empty); st != QATTN_OK) return st;");
    w.open("if (!empty) {");
    w.line(ph.kernel + "<<<dim3(unsigned(gx), unsigned(gy), unsigned(gz)), " + ph.threads + ", 0, static_cast<cudaStream_t>(stream)>>>(p);");
    w.line("if (int st = qattn::host::launch_status(cudaGetLastError(), \"" + ph.kernel + " launch\"); st != QATTN_OK) return st;");
    w.close();
    w.close();
  }
}

}  // namespace qattn::backend::bwd::detail
