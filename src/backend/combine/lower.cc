// The combine lowering (lower.h): header facts, the row tiling, the statements in TL order, the C
// ABI qattn_combine and the kernel info.
#include "backend/combine/lower.h"

#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "backend/arch.h"
#include "backend/cpp_expr.h"
#include "backend/cuda_out.h"
#include "backend/rowwise.h"
#include "backend/stmt_header.h"
#include "support/sha256.h"
#include "tl/eval.h"
#include "tl/printer.h"

namespace qattn::backend::combine {
namespace {

// The CUDA type of a storage dtype, without CuTe (device/qattn/rowwise.cuh).
const char* native_type(tl::DType t) {
  switch (t) {
    case tl::DType::F16: return "__half";
    case tl::DType::BF16: return "__nv_bfloat16";
    default: return "float";
  }
}

using tl::Space;
using tl::Stmt;

// The Dims the C ABI passes (qattn_combine_params), as C++ expressions of the params `p`.
const std::map<std::string, std::string> kAbiDims = {
    {"batch", "p.batch"}, {"heads_q", "p.heads_q"}, {"seqlen_q", "p.seqlen_q"}, {"splits", "p.splits"}};

class Lower {
 public:
  Lower(const tl::Program& p, const tl::CheckInfo& info, const plan::Target& t, support::DiagSink& d)
      : prog_(p), info_(info), target_(t), diags_(d) {}

  std::optional<Translation> run() {
    if (!header()) return std::nullopt;
    if (!body_.tiling(prog_.stmts, kernel_stmt_->loc)) return std::nullopt;
    rows_ = body_.rows(), d_v_ = body_.cols(), warps_ = body_.warps();
    CudaOut w;
    preamble(w);
    kernel(w);
    if (failed_ || body_.failed()) return std::nullopt;
    abi(w);
    Translation t;
    t.cuda_source = w.str();
    t.kernel_name = kernel_name_;
    t.arch = arch_.name;
    t.nvcc_flags = arch_.gencode;
    for (const auto& f : common_nvcc_flags()) t.nvcc_flags.push_back(f);
    t.threads = 32 * warps_;
    t.smem_bytes = 0;
    t.info_json = info_json_;
    t.kir = kir_text();
    return t;
  }

 private:
  bool fail(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint) {
    diags_.error(code, at, msg, hint);
    failed_ = true;
    return false;
  }
  std::string cint(const tl::Expr& e) const { return names_.int_expr(e); }
  std::string id(const std::string& n) const { return names_.ident(n); }
  static std::string ref(const Stmt& s) { return tl_ref(s); }
  std::optional<int64_t> constant(const tl::Expr& e, support::SrcLoc at, const std::string& what) {
    support::DiagSink quiet(diags_.file());
    auto v = tl::eval_int(e, env_, &quiet);
    if (!v) fail("XL0201", at, what + " `" + tl::print_expr(e) + "` is not a compile-time constant",
                 "the rows of a tile and d_v are Consts or fixed Dims (`Const BM = 4`, `Dim d_v = 128`)");
    return v;
  }

  // ---- header: Dims, Consts, Grid, the dtypes ----------------------------------------------------
  bool header() {
    HeaderFacts h{nullptr, nullptr, env_, fixed_, runtime_};
    for (const auto& s : prog_.stmts) {
      if (s.kind == Stmt::Kind::Dim)
        for (const auto& it : s.dim.items)
          if (!it.value && !kAbiDims.count(it.name))
            return fail("XL0301", it.loc, "Dim " + it.name + " is not passed by the combine's C ABI",
                        "a combine program's run-time Dims are batch, heads_q, seqlen_q and splits; fix the others "
                        "(`Dim d_v = 128`)");
      if (!read_header_stmt(s, h, diags_, "the rows of a tile and d_v are Consts or fixed Dims (`Const BM = 4`, `Dim d_v = 128`)"))
        return failed_ = true, false;
      for (const auto& a : s.attrs)
        if (!(a.key == "unroll" && s.kind == Stmt::Kind::For))  // (checked by TL0415)
          return fail("XL0301", a.loc.line ? a.loc : s.loc, "the attribute `" + a.key + "` is not lowered in a combine program",
                      "a combine kernel has no Hopper schedule: remove the attribute");
      switch (s.kind) {
        case Stmt::Kind::Role:
          return fail("XL0301", s.loc, "a Role in a combine program is not lowered", "remove it: the combine has no warp roles");
        case Stmt::Kind::For:
          for (const auto& b : s.loop.body)
            if (b.kind == Stmt::Kind::For) return fail("XL0302", b.loc, "nested loops are not lowered", "one loop over the parts");
          break;
        default: break;
      }
    }
    kernel_stmt_ = h.kernel, grid_stmt_ = h.grid;
  if (!kernel_stmt_ || !grid_stmt_) return fail("XL0301", {}, "the program lacks its Kernel or Grid line", "");
    const auto gdt = [&](const char* n) {
      return info_.tensors.count(n) ? info_.tensors.at(n).global_dtype : tl::DType::F16;
    };
    out_dtype_ = gdt("O");
    part_dtype_ = gdt("O_part");
    for (auto [n, dt] : {std::pair<const char*, tl::DType>{"O", out_dtype_}, {"O_part", part_dtype_}})
      if (dt != tl::DType::F16 && dt != tl::DType::BF16 && dt != tl::DType::F32)
        return fail("XL0102", kernel_stmt_->loc, std::string("global ") + n + " is " + tl::to_string(dt),
                    "the combine reads and writes fp16, bf16 or fp32");
    // No MMA: the architecture only chooses -gencode (fp16 for the table's lookup).
    auto a = choose_arch(target_, tl::DType::F16, diags_, kernel_stmt_->loc);
    if (!a) return failed_ = true, false;
    arch_ = *a;
    kernel_name_ = kernel_stmt_->kernel.name + "_" + arch_.name;
    return true;
  }

  // ---- the kernel -----------------------------------------------------------------------------------
  void preamble(CudaOut& w) {
    w.line("// Generated by qattn stage 2 (src/backend/combine) from TL kernel `" + kernel_stmt_->kernel.name + "` (combine) for " +
           arch_.name + " (" + target_.name + "). Do not edit: change the TL and translate again.");
    w.line("// Each block below names the TL statement it lowers (`// TL <line>: ...`).");
    w.line("#include \"qattn/qattn.h\"");
    w.line("#include \"qattn/host.cuh\"");
    w.line("#include \"qattn/intmath.cuh\"");
    w.line("#include \"qattn/rowwise.cuh\"  // no CuTe: the combine compiles in about a second");
    w.line();
    w.line("#pragma GCC visibility push(hidden)  // only the C ABI below is exported");
    w.line("namespace qattn_generated {");
    w.line();
    w.line("// ---- the TL header: fixed dims and tile parameters ----");
    w.line(ref(*kernel_stmt_));
    for (const auto& [n, v] : fixed_) w.line("[[maybe_unused]] constexpr int " + id(n) + " = " + std::to_string(v) + ";");
    w.line("using ElementO = " + std::string(native_type(out_dtype_)) + ";      // O (TL " + tl::to_string(out_dtype_) + ")");
    w.line("using ElementPart = " + std::string(native_type(part_dtype_)) + ";  // O_part (TL " + tl::to_string(part_dtype_) + ")");
    w.line("// chosen here: rows over warps, a row's columns over the 32 lanes (device/qattn/rowwise.cuh)");
    w.line(body_.tiling_decl());
    w.line();
  }

  void kernel(CudaOut& w) {
    w.open("__global__ void __launch_bounds__(Tiling::kThreads) " + kernel_name_ + "(const qattn_combine_params p) {");
    std::string dims;
    for (const auto& n : runtime_) dims += (dims.empty() ? "" : ", ") + id(n) + " = " + kAbiDims.at(n);
    if (!dims.empty()) w.line("[[maybe_unused]] const int " + dims + ";");
    w.line(ref(*grid_stmt_));
    const char* axes[3] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
    for (size_t i = 0; i < grid_stmt_->grid.items.size(); ++i)
      w.line("const int " + id(grid_stmt_->grid.items[i].var) + " = int(" + axes[i] + ");");
    body_.emit(w, prog_.stmts);
    w.close();
    w.line();
    w.line("}  // namespace qattn_generated");
    w.line("#pragma GCC visibility pop");
    w.line();
  }

  // ---- the C ABI ------------------------------------------------------------------------------------
  void abi(CudaOut& w) {
    std::ostringstream j;
    j << "{\"kernel\":\"" << kernel_name_ << "\",\"tl_kernel\":\"" << kernel_stmt_->kernel.name << "\",\"pass\":\"combine\""
      << ",\"arch\":\"" << arch_.name << "\",\"family\":\"rowwise\",\"target\":\"" << target_.name << "\",\"dtype\":\""
      << tl::to_string(out_dtype_) << "\",\"part_dtype\":\"" << tl::to_string(part_dtype_) << "\",\"d_v\":" << d_v_
      << ",\"tiles\":{";
    bool first = true;
    for (const auto& [n, v] : fixed_) {
      if (n == "d_v" || n == "d") continue;
      j << (first ? "" : ",") << "\"" << n << "\":" << v;
      first = false;
    }
    j << "},\"threads\":" << 32 * warps_ << ",\"smem_bytes\":0,\"aux\":[],\"args\":[],\"tl_hash\":\""
      << support::sha256_hex(tl::print(prog_)).substr(0, 16) << "\"}";
    info_json_ = j.str();
    const int vec = (d_v_ / 32) % 4 == 0 ? 4 : (d_v_ / 32) % 2 == 0 ? 2 : 1;
    abi_begin(w, info_json_);
    w.open("QATTN_EXPORT int qattn_combine(const qattn_combine_params* params, void* stream) {");
    w.line("if (int st = qattn::host::check_combine_params(params, " + std::to_string(d_v_) + ", " + std::to_string(vec) +
           ", int(sizeof(ElementPart)), int(sizeof(ElementO))); st != QATTN_OK)");
    w.line("  return st;");
    w.line("const qattn_combine_params& p = *params;");
    std::string dims;
    for (const auto& n : runtime_) dims += (dims.empty() ? "" : ", ") + id(n) + " = " + kAbiDims.at(n);
    if (!dims.empty()) w.line("[[maybe_unused]] const int " + dims + ";");
    w.line(ref(*grid_stmt_));
    std::string ext[3] = {"1", "1", "1"};
    for (size_t i = 0; i < grid_stmt_->grid.items.size(); ++i) ext[i] = cint(grid_stmt_->grid.items[i].extent);
    launch_grid(w, ext, kernel_name_, "Tiling::kThreads", "0");
    w.close();
    abi_end(w);
  }

  std::string kir_text() const {
    std::ostringstream o;
    o << "kernel " << kernel_name_ << " (combine, " << arch_.name << ", " << target_.name << ")\n";
    o << "  tl " << kernel_stmt_->kernel.name << "  tl_hash " << support::sha256_hex(tl::print(prog_)).substr(0, 16) << "\n";
    o << "  launch threads " << 32 * warps_ << " smem 0 bytes\n";
    o << "  rows " << rows_ << " per block over " << warps_ << " warps; d_v " << d_v_ << " over 32 lanes\n";
    o << "  O " << tl::to_string(out_dtype_) << "  O_part " << tl::to_string(part_dtype_) << "\n";
    return o.str();
  }

  const tl::Program& prog_;
  const tl::CheckInfo& info_;
  plan::Target target_;
  support::DiagSink& diags_;
  CppNames names_;
  tl::Env env_;
  bool failed_ = false;
  const Stmt* kernel_stmt_ = nullptr;
  const Stmt* grid_stmt_ = nullptr;
  std::vector<std::pair<std::string, int64_t>> fixed_;
  std::vector<std::string> runtime_;
  ArchSpec arch_;
  tl::DType out_dtype_ = tl::DType::F16, part_dtype_ = tl::DType::F16;
  int64_t rows_ = 0, d_v_ = 0;
  int warps_ = 1;
  std::string kernel_name_, info_json_;
  // Global views: this block's (batch, [split,] head) matrix of the kernel argument.
  std::optional<rowwise::GlobalView> bind_global(CudaOut& w, const Stmt& s) {
    const auto& a = s.alloc;
    const auto o = [&](size_t i) { return "int64_t(" + cint(a.offset[i]) + ")"; };
    rowwise::GlobalView g;
    g.var = "g_" + id(a.name);
    g.rows = cint(a.shape[0]);
    if (a.name == "O") {
      w.line("ElementO* " + g.var + " = static_cast<ElementO*>(p.o) + " + o(0) + " * p.o_batch_stride + " + o(1) + " * p.o_head_stride;");
      g.row_stride = "p.o_row_stride";
    } else if (a.name == "LSE") {
      w.line("float* " + g.var + " = p.lse ? p.lse + (" + o(0) + " * p.heads_q + " + o(1) + ") * int64_t(p.seqlen_q) : nullptr;");
      g.row_stride = "1";
      g.vec = true;
    } else if (a.name == "O_part") {
      w.line("const ElementPart* " + g.var + " = static_cast<const ElementPart*>(p.o_part) + " + o(0) + " * p.op_batch_stride + " +
             o(1) + " * p.op_split_stride + " + o(2) + " * p.op_head_stride;");
      g.row_stride = "p.op_row_stride";
    } else {  // LSE_part
      w.line("const float* " + g.var + " = p.lse_part + " + o(0) + " * p.lp_batch_stride + " + o(1) + " * p.lp_split_stride + " + o(2) +
             " * p.lp_head_stride;");
      g.row_stride = "1";
      g.vec = true;
    }
    return g;
  }
  rowwise::Body body_{"combine", names_, env_, diags_, [this](CudaOut& w, const Stmt& s) { return bind_global(w, s); }};
};

}  // namespace

std::optional<Translation> translate(const tl::Program& code, const tl::CheckInfo& info, const plan::Target& target,
                                     support::DiagSink& diags) {
  return Lower(code, info, target, diags).run();
}

}  // namespace qattn::backend::combine
