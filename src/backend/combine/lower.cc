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

struct GlobalView {
  std::string var;         // C++ pointer
  std::string row_stride;  // C++ expression
  std::string rows;        // C++ expression: the view's rows (TL shape[0])
  bool vec = false;        // 1-D (LSE, LSE_part)
};

struct Reg {
  std::string var;
  bool vec = false;  // a row vector (ROWS)
};

class Lower {
 public:
  Lower(const tl::Program& p, const tl::CheckInfo& info, const plan::Target& t, support::DiagSink& d)
      : prog_(p), info_(info), target_(t), diags_(d) {}

  std::optional<Translation> run() {
    if (!header() || !tiling()) return std::nullopt;
    CudaOut w;
    preamble(w);
    kernel(w);
    if (failed_) return std::nullopt;
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

  // ---- the row tiling: every 2-D register tile is (rows_, d_v_), every row vector (rows_) ---------
  void walk(const std::vector<Stmt>& body, const std::function<void(const Stmt&)>& fn) {
    for (const auto& s : body) {
      fn(s);
      if (s.kind == Stmt::Kind::For) walk(s.loop.body, fn);
    }
  }
  bool tiling() {
    walk(prog_.stmts, [&](const Stmt& s) {
      if (failed_ || s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Register) return;
      const auto& a = s.alloc;
      if (a.dtype && *a.dtype != tl::DType::F32) {
        fail("XL0102", s.loc, "register tensor " + a.name + " is " + tl::to_string(*a.dtype),
             "the combine computes in fp32: allocate register tensors as fp32");
        return;
      }
      auto r = constant(a.shape[0], s.loc, "the rows of " + a.name);
      if (!r) return;
      if (rows_ == 0) rows_ = *r;
      if (*r != rows_) {
        fail("XL0202", s.loc, "register tensor " + a.name + " has " + std::to_string(*r) + " rows, another " + std::to_string(rows_),
             "every register tile and row vector of a combine program covers the same rows");
        return;
      }
      if (a.shape.size() == 2) {
        auto c = constant(a.shape[1], s.loc, "the columns of " + a.name);
        if (!c) return;
        if (d_v_ == 0) d_v_ = *c;
        if (*c != d_v_)
          fail("XL0202", s.loc, "register tile " + a.name + " has " + std::to_string(*c) + " columns, another " + std::to_string(d_v_),
               "every register tile of a combine program is (rows, d_v)");
      }
    });
    if (failed_) return false;
    if (rows_ < 1 || d_v_ < 1)
      return fail("XL0301", kernel_stmt_->loc, "the combine program has no register tile (rows, d_v)",
                  "merge into `Allocate O in register (BM, d_v) fp32 init 0`");
    warps_ = int(std::min<int64_t>(rows_, 4));
    if (auto it = env_.ints.find("WARPS"); it != env_.ints.end()) warps_ = int(it->second);
    if (warps_ < 1 || warps_ > 16 || rows_ % warps_ != 0 || rows_ > 64)
      return fail("XL0202", kernel_stmt_->loc,
                  "rows " + std::to_string(rows_) + " over WARPS = " + std::to_string(warps_) + " warps is not lowered",
                  "the tile's rows (at most 64) are a multiple of WARPS (1 to 16)");
    if (d_v_ % 32 != 0 || d_v_ > 1024)
      return fail("XL0202", kernel_stmt_->loc, "d_v = " + std::to_string(d_v_) + " is not lowered",
                  "a row is dealt to the 32 lanes of a warp: d_v is a multiple of 32, at most 1024");
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
    w.line("using Tiling = qattn::rows::RowTiling<" + std::to_string(rows_) + ", " + std::to_string(d_v_) + ", " + std::to_string(warps_) + ">;");
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
    body(w, prog_.stmts);
    w.close();
    w.line();
    w.line("}  // namespace qattn_generated");
    w.line("#pragma GCC visibility pop");
    w.line();
  }

  void body(CudaOut& w, const std::vector<Stmt>& stmts) {
    for (const auto& s : stmts) {
      if (failed_) return;
      switch (s.kind) {
        case Stmt::Kind::Let:
          w.line(ref(s));
          w.line("const int " + id(s.let.name) + " = " + cint(s.let.value) + ";");
          break;
        case Stmt::Kind::Allocate: allocate(w, s); break;
        case Stmt::Kind::Copy: copy(w, s); break;
        case Stmt::Kind::Compute: compute(w, s); break;
        case Stmt::Kind::For: {
          w.line(ref(s));
          for (const auto& a : s.attrs)  // `{unroll: U}`: U iterations' loads in flight together
            if (a.key == "unroll" && a.value) w.line("#pragma unroll " + tl::print_expr(*a.value));
          const std::string v = id(s.loop.var);
          w.open("for (int " + v + " = " + cint(s.loop.lo) + "; " + v + " < " + cint(s.loop.hi) + "; ++" + v + ") {");
          std::map<std::string, Reg> saved = regs_;  // names bound in the body are forgotten at its end
          std::map<std::string, GlobalView> saved_g = globals_;
          body(w, s.loop.body);
          regs_ = std::move(saved);
          globals_ = std::move(saved_g);
          w.close();
          break;
        }
        case Stmt::Kind::Reshape:
          fail("XL0301", s.loc, "Reshape in a combine program is not lowered", "a combine program has no GEMM operands to re-lay");
          break;
        case Stmt::Kind::Variant:
          fail("XL0301", s.loc, "a Score / Mask declaration in a combine program is not lowered",
               "the combine merges finished results: remove the declaration");
          break;
        default: break;
      }
    }
  }

  void allocate(CudaOut& w, const Stmt& s) {
    const auto& a = s.alloc;
    if (a.space == Space::Shared) {
      fail("XL0301", s.loc, "shared buffer " + a.name + " in a combine program is not lowered",
           "load the rows straight into registers (`Copy X (BM, d_v) in coordinate [m_block, 0] from global to register`)");
      return;
    }
    w.line(ref(s));
    const std::string var = "r_" + id(a.name);
    if (a.space == Space::Register) {
      const bool vec = a.shape.size() == 1;
      w.line(std::string("qattn::rows::") + (vec ? "VecOf" : "TileOf") + "<Tiling> " + var + ";");
      if (a.init) w.line("qattn::rows::fill(" + var + ", " + names_.float_expr(*a.init) + ");");
      regs_[a.name] = {var, vec};
      return;
    }
    // Global views: this block's (batch, [split,] head) matrix of the kernel argument.
    const auto o = [&](size_t i) { return "int64_t(" + cint(a.offset[i]) + ")"; };
    GlobalView g;
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
    globals_[a.name] = g;
  }

  void copy(CudaOut& w, const Stmt& s) {
    const auto& c = s.copy;
    const bool load = c.from == Space::Global && c.to == Space::Register;
    const bool store = c.from == Space::Register && c.to == Space::Global;
    auto g = globals_.find(c.name);
    auto r = regs_.find(c.name);
    if (!(load || store) || g == globals_.end() || r == regs_.end() || c.tile.empty()) {
      fail("XL0301", s.loc, "this Copy of " + c.name + " is not lowered in a combine program",
           "copy tiles between a global view and registers: `Copy X (BM, d_v) in coordinate [m_block, 0] from global to register`");
      return;
    }
    if (c.tile.size() == 2) {
      auto col = constant(c.coord[1], s.loc, "the column coordinate");
      if (!col) return;
      if (*col != 0) {
        fail("XL0301", s.loc, "a tile at column coordinate " + std::to_string(*col) + " is not lowered",
             "a combine program's tiles hold whole rows (coordinate [m, 0])");
        return;
      }
    }
    w.line(ref(s));
    const std::string row0 = "(" + cint(c.coord[0]) + ") * (" + cint(c.tile[0]) + ")";
    const std::string args = g->second.var + ", " + g->second.row_stride + ", " + row0 + ", " + g->second.rows;
    if (r->second.vec)
      w.line(std::string("qattn::rows::") + (load ? "load_vec" : "store_vec") + "<Tiling>(" + r->second.var + ", " + args + ");");
    else
      w.line(std::string("qattn::rows::") + (load ? "load_tile" : "store_tile") + "<Tiling>(" + r->second.var + ", " + args + ");");
  }

  const Reg* reg(const std::string& n, const Stmt& s) {
    auto it = regs_.find(n);
    if (it != regs_.end()) return &it->second;
    fail("XL0301", s.loc, "'" + n + "' has no register tensor the combine lowering knows here",
         "allocate it in register, or produce it with `and get " + n + "` first");
    return nullptr;
  }
  bool is_tensor(const tl::Operand& o) const { return o.expr.kind == tl::Expr::Kind::Name && regs_.count(o.expr.name); }

  void compute(CudaOut& w, const Stmt& s) {
    const auto& c = s.compute;
    if (c.operands.empty() || !is_tensor(c.operands[0])) {
      fail("XL0301", s.loc, "Compute " + c.op + " on something other than a register tensor is not lowered", "");
      return;
    }
    const Reg* x = reg(c.operands[0].expr.name, s);
    if (!x) return;
    w.line(ref(s));
    // The result: in place, a new tensor of X's shape (and get), or an existing one (accumulate).
    const bool reduce = c.op == "RowMax" || c.op == "RowSum";
    std::string z = x->var;
    if (c.result == tl::ComputeStmt::Result::Get) {
      const bool vec = x->vec || reduce;
      z = "r_" + id(c.target);
      w.line(std::string("qattn::rows::") + (vec ? "VecOf" : "TileOf") + "<Tiling> " + z + ";");
      regs_[c.target] = {z, vec};
    } else if (c.result == tl::ComputeStmt::Result::Accumulate) {
      const Reg* t = reg(c.target, s);
      if (!t) return;
      z = t->var;
    }
    if (reduce) {
      if (x->vec) {
        fail("XL0301", s.loc, c.op + " of a row vector is not lowered", "reduce a (rows, d_v) tile");
        return;
      }
      const bool acc = c.result == tl::ComputeStmt::Result::Accumulate;
      w.line(std::string("qattn::rows::row_reduce_lanes<") + (c.op == "RowMax" ? "true" : "false") + ", " + (acc ? "true" : "false") +
             ">(" + x->var + ", " + z + ");");
      return;
    }
    if (const char* f = op_functor(c.op)) {
      if (c.operands.size() == 1) {
        w.line(std::string("qattn::rows::map<qattn::op::") + f + ">(" + x->var + ", " + z + ");");
        return;
      }
      const auto& y = c.operands[1];
      if (!is_tensor(y)) {
        w.line(std::string("qattn::rows::ew_scalar<qattn::op::") + f + ">(" + x->var + ", " + names_.float_expr(y.expr) + ", " + z + ");");
        return;
      }
      const Reg* yr = reg(y.expr.name, s);
      if (!yr) return;
      if (yr->vec == x->vec) w.line(std::string("qattn::rows::ew<qattn::op::") + f + ">(" + x->var + ", " + yr->var + ", " + z + ");");
      else if (yr->vec) w.line(std::string("qattn::rows::ew_rows<qattn::op::") + f + ">(" + x->var + ", " + yr->var + ", " + z + ");");
      else fail("XL0301", s.loc, "Compute " + c.op + " of a row vector and a tile is not lowered", "write the tile first");
      return;
    }
    if (c.op == "Rescale" || c.op == "Normalize") {
      if (c.result != tl::ComputeStmt::Result::InPlace) {
        fail("XL0301", s.loc, c.op + " with a result is not lowered", "it scales its first operand in place");
        return;
      }
      const auto& y = c.operands[1];
      if (!is_tensor(y)) {
        if (c.op == "Rescale") w.line("qattn::rows::rescale_scalar(" + x->var + ", " + names_.float_expr(y.expr) + ");");
        else fail("XL0301", s.loc, "Normalize by a scalar is not lowered", "divide by a row vector");
        return;
      }
      const Reg* yr = reg(y.expr.name, s);
      if (!yr) return;
      w.line(std::string("qattn::rows::") + (c.op == "Rescale" ? "rescale" : "normalize") + "(" + x->var + ", " + yr->var + ");");
      return;
    }
    fail("XL0301", s.loc, "Compute " + c.op + " is not lowered in a combine program",
         "the combine lowers Add Subtract Multiply Divide Max Exp Exp2 Log Log2 RowMax RowSum Rescale Normalize on fp32 registers");
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
  std::map<std::string, Reg> regs_;
  std::map<std::string, GlobalView> globals_;
};

}  // namespace

std::optional<Translation> translate(const tl::Program& code, const tl::CheckInfo& info, const plan::Target& target,
                                     support::DiagSink& diags) {
  return Lower(code, info, target, diags).run();
}

}  // namespace qattn::backend::combine
