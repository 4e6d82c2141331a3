// Backward programs: TL statements -> CuTe code over the device runtime (lower.h); the header
// facts, the tensors, copies and GEMMs (mma.sync). Computes: compute.cc; wgmma: wgmma.cc; barriers
// and the overlap: schedule.cc; the preamble, variants and the C ABI: abi.cc.
#include "backend/bwd/lower_impl.h"

#include "support/sha256.h"
#include "tl/printer.h"
#include "tl/variant.h"

namespace qattn::backend::bwd::detail {
using tl::Stmt;

std::optional<Translation> Lower::run() {
  if (!header() || !collect_workspaces() || !tensors()) return std::nullopt;
  wgmma_plan();
  if (wg_) {
    arch_.name = "sm90";
    arch_.gencode = {"-gencode=arch=compute_90a,code=sm_90a"};  // wgmma needs the sm_90a target
    kernel_name_ = kernel_stmt_->kernel.name + "_" + arch_.name;
    plan_tma_ring();
    if (!tma_tiles_.empty()) {  // the ring's two mbarriers after the buffers
      tma_bar_off_ = (smem_bytes_ + 7) / 8 * 8;
      smem_bytes_ = tma_bar_off_ + 16;
    }
    plan_tma_adds();  // the stages of tiles added by TMA after them
    smem_bytes_ += 1024;  // the kernel aligns its shared memory to 1024 bytes (the swizzle's period)
  }
  // The phases' kernels, then the main kernel: it decides which Mma<R> and how much row-reduction
  // scratch the preamble declares.
  Out body;
  phase_kernels(body);
  if (failed_) return std::nullopt;
  kernel(body);
  if (failed_) return std::nullopt;
  smem_bytes_ += row_scratch_bytes_;
  if (const int64_t limit = target_.smem_per_block > 0 ? int64_t(target_.smem_per_block) : int64_t(166912); smem_bytes_ > limit) {
    fail("XL0202", kernel_stmt_->loc,
         "the shared buffers and the row-reduction scratch need " + std::to_string(smem_bytes_) + " bytes; " + target_.name + " has " +
             std::to_string(limit),
         "use smaller tiles (BM, BN) or fewer shared buffers");
    return std::nullopt;
  }
  Out w;
  preamble(w);
  w.raw(body.str());
  abi(w);
  Translation t;
  t.cuda_source = w.str();
  t.kernel_name = kernel_name_;
  t.arch = arch_.name;
  t.nvcc_flags = arch_.gencode;
  for (const auto& f : common_nvcc_flags()) t.nvcc_flags.push_back(f);
  t.threads = threads_;
  t.smem_bytes = int(smem_bytes_);
  t.info_json = info_json_;
  t.kir = kir_text();
  return t;
}

bool Lower::fail(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint) {
  diags_.error(code, at, msg, hint);
  failed_ = true;
  return false;
}

std::optional<int64_t> Lower::eval(const tl::Expr& e, support::SrcLoc at, const std::string& what) {
  support::DiagSink quiet(diags_.file());
  auto v = tl::eval_int(e, env_, &quiet);
  if (!v) fail("XL0201", at, what + " `" + tl::print_expr(e) + "` is not a compile-time constant",
               "tile shapes and head dims must be Consts or fixed Dims (`Dim d = 128`, `Const BM = 64`)");
  return v;
}

SharedBuf* Lower::sh(const std::string& n, const Stmt& s) {
  auto it = shared_.find(n);
  if (it != shared_.end()) return &it->second;
  fail("XL0301", s.loc, "'" + n + "' has no shared buffer the backward lowering knows here", "allocate it in shared before the loop");
  return nullptr;
}

RegBuf* Lower::rg(const std::string& n, const Stmt& s) {
  auto it = regs_.find(n);
  if (it != regs_.end()) return &it->second;
  fail("XL0301", s.loc, "'" + n + "' has no register tile the backward lowering knows here",
       "allocate it in register, or produce it with `and get " + n + "` first");
  return nullptr;
}

std::string Lower::ref(const Stmt& s) { return tl_ref(s); }

std::string Lower::mma(int rows, int wm) {
  const int m = warps_m(rows, wm);
  mma_rows_.insert({rows, m});
  if (m == warps_m(rows)) return "Mma<" + std::to_string(rows) + ">{}";
  return "Mma<" + std::to_string(rows) + ", " + std::to_string(m) + ">{}";
}

int Lower::attr_wm(const Stmt& s) {
  for (const auto& a : s.attrs) {
    if (a.key != "warps_m" || !a.value) continue;
    auto v = eval(*a.value, a.loc.line ? a.loc : s.loc, "`warps_m`");
    if (!v) return -1;
    if (*v < 1 || *v > warps_ || warps_ % *v != 0) {
      fail("XL0202", a.loc.line ? a.loc : s.loc, "`warps_m: " + std::to_string(*v) + "` does not divide WARPS = " + std::to_string(warps_),
           "the warps along the rows times those along the columns make WARPS: use a divisor of it");
      return -1;
    }
    return int(*v);
  }
  return 0;
}

bool Lower::same_rows(const RegBuf& x, const RegBuf& y, const Stmt& s) {
  if (x.layout != y.layout && (x.cols && y.cols))
    return fail("XL0202", s.loc, "'" + x.var.substr(1) + "' and '" + y.var.substr(1) + "' are laid out over the warpgroups differently",
                "combine tiles that the same kind of GEMM made");
  if (warps_m(x.rows, x.wm) == warps_m(y.rows, y.wm)) return true;
  return fail("XL0202", s.loc, "'" + x.var.substr(1) + "' (" + std::to_string(warps_m(x.rows, x.wm)) + " warps along its rows) and '" +
                                   y.var.substr(1) + "' (" + std::to_string(warps_m(y.rows, y.wm)) +
                                   ") are combined row by row but laid out over the warps differently",
              "give the statements that make them the same `{warps_m: N}`");
}

bool Lower::layout_ok(int rows, int cols, int wm_attr, const Stmt& s, const std::string& what) {
  if (wm_attr < 0) return false;
  const int wm = warps_m(rows, wm_attr), wn = warps_n(rows, wm_attr);
  if (rows % 16 != 0 || warps_ % wm != 0 || rows % (16 * wm) != 0)
    return fail("XL0202", s.loc, what + " has " + std::to_string(rows) + " rows: not split over " + std::to_string(wm) +
                                     " of the " + std::to_string(warps_) +
                                     " warps along M in 16-row MMAs (by default min(WARPS, rows / 16), else its `warps_m`)",
                "tile rows must be a multiple of 16 x the warps along M, which must divide WARPS");
  if (cols % (16 * wn) != 0)
    return fail("XL0202", s.loc, what + " (" + std::to_string(rows) + ", " + std::to_string(cols) + ") puts " + std::to_string(wn) +
                                     " warps along its columns: " + std::to_string(cols) + " is not a multiple of " + std::to_string(16 * wn),
                "use more rows (BM) or fewer warps");
  return true;
}

bool Lower::header() {
  HeaderFacts h{nullptr, nullptr, env_, fixed_, runtime_dims_};
  for (const auto& s : prog_.stmts) {
    if (!read_header_stmt(s, h, diags_, "tile shapes and head dims must be Consts or fixed Dims (`Dim d = 128`, `Const BM = 64`)"))
      return failed_ = true, false;
    switch (s.kind) {
      case Stmt::Kind::Role:
        return fail("XL0301", s.loc, "a Role in a backward program is not lowered",
                    "the backward lowering (mma.sync) takes the program of tests/tl/backward.tl's form");
      case Stmt::Kind::For:
        for (const auto& b : s.loop.body)
          if (b.kind == Stmt::Kind::For)
            return fail("XL0302", b.loc, "nested loops are not lowered", "one loop over the query tiles");
        break;
      default: break;
    }
    for (const auto& a : s.attrs) {
      if (a.key == "stages" && s.kind == Stmt::Kind::Allocate && s.alloc.space == tl::Space::Shared) continue;
      if (a.key == "warps_m") continue;  // the checker placed it (a register Allocate, a GEMM's `and get`)
      if (a.key == "skip" && s.kind == Stmt::Kind::For) continue;  // the query loop skips empty tile pairs (schedule.cc)
      if (a.key == "ordered") continue;  // deterministic additions (ordered.cc; the checker placed it)
      if (a.key == "at_use") continue;   // a register vector read from shared where it is used (allocate checks it)
      return fail("XL0301", a.loc.line ? a.loc : s.loc, "the attribute `" + a.key + "` is not lowered in a backward program",
                  "the backward lowering takes `{stages: 2}` on a shared Allocate (a ring the query loop fills ahead), "
                  "`{warps_m: N}` or `{at_use}` on a register tile or vector and `{skip: NAME}` on the loop; it has no Hopper schedule or "
                  "packing yet: remove the attribute");
    }
  }
  kernel_stmt_ = h.kernel, grid_stmt_ = h.grid;
  if (!kernel_stmt_ || !grid_stmt_) return fail("XL0301", {}, "the program lacks its Kernel or Grid line", "");
  if (auto it = env_.ints.find("WARPS"); it != env_.ints.end()) warps_ = int(it->second);
  if (warps_ < 1 || warps_ > 16)
    return fail("XL0202", {}, "WARPS = " + std::to_string(warps_) + " is not lowered", "use 4 or 8 warps");
  threads_ = 32 * warps_;
  // The element type: Q's global dtype; every 16-bit operand shares it.
  const tl::DType el = info_.tensors.count("Q") ? info_.tensors.at("Q").global_dtype : tl::DType::F16;
  auto a = choose_arch(target_, el, diags_, kernel_stmt_->loc);
  if (!a) return failed_ = true, false;
  if (a->sm < 80 || a->fp8)
    return fail("XL0101", kernel_stmt_->loc, "the backward lowering needs the sm80 form (fp16/bf16 on Ampere or newer)",
                "translate for --gpu a100, l40s (fp16/bf16) or h100");
  arch_ = *a;
  elem_ = el;
  kernel_name_ = kernel_stmt_->kernel.name + "_" + arch_.name;
  mask_ = kernel_stmt_->kernel.mask;
  return true;
}

void Lower::walk(const std::vector<Stmt>& body, const std::function<void(const Stmt&)>& fn) const {
  for (const auto& s : body) {
    fn(s);
    if (s.kind == Stmt::Kind::For) walk(s.loop.body, fn);
  }
}

bool Lower::tensors() {
  bool ok = true;
  int64_t off = 0;
  walk(prog_.stmts, [&](const Stmt& s) {
    if (!ok || s.kind != Stmt::Kind::Allocate) return;
    const auto& a = s.alloc;
    if (a.space == tl::Space::Global) {
      if (find_arg(a.name) || is_workspace(a.name)) return;  // (a workspace: written by a Phase)
      if (std::find(info_.aux_grads.begin(), info_.aux_grads.end(), a.name) != info_.aux_grads.end()) return;  // plan_aux_grads
      // an auxiliary input of the declarations: qattn_bwd_params::aux[slot], in the checker's order
      int slot = -1;
      for (size_t i = 0; i < info_.aux.size(); ++i)
        if (info_.aux[i] == a.name) slot = int(i);
      if (slot < 0) {
        ok = fail("XL0301", s.loc, "global '" + a.name + "' is not an argument of the backward ABI", "");
        return;
      }
      std::vector<std::string> ext;
      for (const auto& e : a.shape) ext.push_back(cint(e));
      names_.aux_extents[a.name] = ext;
      aux_slot_[a.name] = slot;
      aux_int_[a.name] = a.dtype && *a.dtype == tl::DType::I32;
      return;
    }
    std::vector<int> dims;
    for (const auto& e : a.shape) {
      auto v = eval(e, s.loc, "the shape of " + a.name);
      if (!v) { ok = false; return; }
      dims.push_back(int(*v));
    }
    const tl::DType dt = a.dtype.value_or(a.space == tl::Space::Shared ? tl::DType::F16 : tl::DType::F32);
    if (a.space == tl::Space::Shared) {
      SharedBuf b;
      b.var = "s" + id(a.name);
      b.rows = dims[0];
      b.cols = dims.size() > 1 ? dims[1] : 0;
      b.dtype = dt;
      if (b.cols == 0 && dt != tl::DType::F32) {
        ok = fail("XL0301", s.loc, "a 1-D shared buffer of " + std::string(tl::to_string(dt)) + " is not lowered",
                  "1-D shared buffers are fp32 row vectors (the LSE of a query tile)");
        return;
      }
      if (b.cols > 0 && dt != elem_) {
        ok = fail("XL0102", s.loc, "shared tile " + a.name + " is " + tl::to_string(dt) + " but the operands are " +
                                       tl::to_string(elem_), "keep every 16-bit tile in one dtype");
        return;
      }
      if (b.cols > 0 && (b.rows % 8 != 0 || b.cols % 16 != 0)) {
        ok = fail("XL0202", s.loc, "shared tile " + a.name + " (" + std::to_string(b.rows) + ", " + std::to_string(b.cols) +
                                       ") does not tile by the swizzle atom", "rows a multiple of 8, columns of 16");
        return;
      }
      const int64_t bytes = b.cols ? int64_t(b.rows) * b.cols * dtype_bytes(dt) : int64_t(b.rows) * 4;
      for (const auto& at : s.attrs) {
        if (at.key != "stages" || !at.value) continue;
        auto n = eval(*at.value, at.loc.line ? at.loc : s.loc, "`stages` of " + a.name);
        if (!n) { ok = false; return; }
        if (*n < 1 || *n > 2) {
          ok = fail("XL0202", at.loc.line ? at.loc : s.loc, "`stages: " + std::to_string(*n) + "` on " + a.name +
                                                                 ": the mma.sync backward lowers rings of 1 or 2 slots",
                    "write `{stages: 2}` (the next query tile is loaded while this one is used)");
          return;
        }
        b.stages = int(*n);
      }
      b.bytes = (bytes + 127) / 128 * 128;
      if (b.cols > 0 && target_.sm == 90) off = (off + 1023) / 1024 * 1024;  // a wgmma operand starts on the swizzle's period
      b.offset = off;
      b.layout = "SmemLayout" + id(a.name);
      off += b.bytes * b.stages;
      shared_[a.name] = b;
    } else {
      RegBuf r;
      r.var = "r" + id(a.name);
      r.rows = dims[0];
      r.cols = dims.size() > 1 ? dims[1] : 0;
      r.dtype = dt;
      r.wm = attr_wm(s);
      if (r.wm < 0) { ok = false; return; }
      regs_[a.name] = r;
    }
  });
  if (!ok) return false;
  if (!plan_aux_grads(off)) return false;
  smem_bytes_ = off;
  const int64_t limit = target_.smem_per_block > 0 ? int64_t(target_.smem_per_block) : int64_t(166912);
  if (smem_bytes_ > limit)
    return fail("XL0202", kernel_stmt_->loc,
                "the shared buffers need " + std::to_string(smem_bytes_) + " bytes; " + target_.name + " has " + std::to_string(limit),
                "use smaller tiles (BM, BN) or fewer shared buffers");
  // Register facts: computed tensors and element-wise reads.
  walk(prog_.stmts, [&](const Stmt& s) {
    if (s.kind != Stmt::Kind::Compute) return;
    const auto& c = s.compute;
    if (c.result != tl::ComputeStmt::Result::InPlace) computed_.insert(c.target);
    else if (!c.operands.empty() && c.operands[0].expr.kind == tl::Expr::Kind::Name) computed_.insert(c.operands[0].expr.name);
    if (c.op != "GEMM")
      for (const auto& o : c.operands)
        if (o.expr.kind == tl::Expr::Kind::Name) elementwise_.insert(o.expr.name);
  });
  dk_dtype_ = info_.tensors.count("dK") ? info_.tensors.at("dK").global_dtype : tl::DType::F32;
  dv_dtype_ = info_.tensors.count("dV") ? info_.tensors.at("dV").global_dtype : tl::DType::F32;
  if (dk_dtype_ != dv_dtype_)
    return fail("XL0102", kernel_stmt_->loc, "dK and dV have different dtypes", "store both in one dtype");
  if (info_.tensors.count("Q")) {
    auto q = info_.tensors.at("Q").global_shape;
    if (q.size() == 2) {
      auto v = eval(q[1], kernel_stmt_->loc, "the head dim of Q");
      if (!v) return false;
      d_qk_ = int(*v);
    }
  }
  if (info_.tensors.count("V")) {
    auto vs = info_.tensors.at("V").global_shape;
    if (vs.size() == 2) {
      auto v = eval(vs[1], kernel_stmt_->loc, "the head dim of V");
      if (!v) return false;
      d_v_ = int(*v);
    }
  }
  return true;
}

void Lower::kernel(Out& w) {
  std::string maps;  // the TMA ring's tensor maps (plan_tma_ring)
  for (const auto& t : tma_tiles_) maps += ", const __grid_constant__ CUtensorMap tm" + id(t.name);
  for (const auto& t : tma_adds_) maps += ", const __grid_constant__ CUtensorMap ta" + id(t.name);  // (plan_tma_adds)
  w.open("__global__ void __launch_bounds__(kThreads, 1) " + kernel_name_ + "(const __grid_constant__ qattn_bwd_params p" + maps + ") {");
  if (wg_) {
    w.line("char* smem = qattn::sm90::smem_aligned();  // 1024-byte aligned for the wgmma operands");
    w.line("const int tid = threadIdx.x;");
    w.line("[[maybe_unused]] const int wg = qattn::sm90::warpgroup();  // this thread's warpgroup: its share of each wgmma");
  } else {
    w.line("extern __shared__ __align__(128) char smem[];");
    w.line("const int tid = threadIdx.x;");
  }
  std::string dims;
  for (const auto& n : runtime_dims_) dims += (dims.empty() ? "" : ", ") + id(n) + " = p." + n;
  if (!dims.empty()) w.line("[[maybe_unused]] const int " + dims + ";  // TL Dims bound at launch");
  w.line("[[maybe_unused]] const float softmax_scale = p.softmax_scale;");
  w.line("[[maybe_unused]] const int window_left = p.window_left, window_right = p.window_right;  // resolved by qattn_bwd");
  w.line("[[maybe_unused]] const float softcap = p.softcap;  // a launch argument of the declarations");
  w.line("GmemCopy gmem_copy;");
  w.line(ref(*grid_stmt_));
  static const char* axes[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
  static const char* dims_of[] = {"gridDim.x", "gridDim.y", "gridDim.z"};
  reversed_grid_var_ = ordered_loop_var();
  for (size_t i = 0; i < grid_stmt_->grid.items.size(); ++i) {
    const std::string& g = grid_stmt_->grid.items[i].var;
    if (g == reversed_grid_var_) {
      reversed_extent_ = dims_of[i];
      w.line("const int " + id(g) + " = " + dims_of[i] + " - 1 - " + axes[i] + ";  // launched in reverse: the `{ordered}` turns go "
             "from the last " + g + " down, and a block waits only for blocks launched before it");
    } else {
      w.line("const int " + id(g) + " = " + axes[i] + ";");
    }
  }
  body(w, prog_.stmts, false);
  if (wg_) wait_before(w, nullptr);
  flush(w);
  aux_grad_flush(w);
  if (!tma_adds_.empty()) w.line("qattn::sm90::add_acc_global_tma_done(tid);  // the TMA copies have read their stages before the block exits");
  w.close();
  w.line();
  w.line("}  // namespace qattn_generated");
  w.line("#pragma GCC visibility pop");
  w.line();
}

void Lower::body(Out& w, const std::vector<Stmt>& stmts, bool in_loop) {
  for (const auto& s : stmts) {
    if (failed_) return;
    one(w, s);
  }
  (void)in_loop;
}

void Lower::one(Out& w, const Stmt& s) {
  if (wg_) wait_before(w, &s);
  {
    switch (s.kind) {
      case Stmt::Kind::Let: w.line(ref(s)); w.line("const int " + id(s.let.name) + " = " + cint(s.let.value) + ";"); break;
      case Stmt::Kind::Allocate: allocate(w, s); break;
      case Stmt::Kind::Copy: copy(w, s); break;
      case Stmt::Kind::Compute: compute(w, s); break;
      case Stmt::Kind::Reshape: reshape(w, s); break;
      case Stmt::Kind::For: loop(w, s); break;
      case Stmt::Kind::Comment: w.line("// " + (s.comment.text.empty() || s.comment.text[0] != ' ' ? s.comment.text : s.comment.text.substr(1))); break;
      case Stmt::Kind::Variant: declaration(w, s); break;
      case Stmt::Kind::Phase: w.line(ref(s) + ": kernel " + kernel_name_ + "_" + id(s.loop.var) + " above (launched first)"); break;
      default: break;
    }
  }
}

void Lower::allocate(Out& w, const Stmt& s) {
  const auto& a = s.alloc;
  w.line(ref(s));
  if (a.space == tl::Space::Global && is_workspace(a.name)) {
    w.line("const float* g" + id(a.name) + " = " + workspace_ptr(a.name, a) + ";  // (seqlen_q), written by a Phase");
    return;
  }
  if (a.space == tl::Space::Global && aux_grad(a.name)) return aux_grad_init(w, *aux_grad(a.name));
  if (a.space == tl::Space::Global && !find_arg(a.name)) {
    const bool is_int = aux_int_[a.name];
    const std::string t = is_int ? "int" : "float";
    w.line("const " + t + "* __restrict__ aux_" + a.name + " = static_cast<const " + t + "*>(p.aux[" +
           std::to_string(aux_slot_[a.name]) + "]);  // an input of the declarations");
    return;
  }
  if (a.space == tl::Space::Global) {
    const GlobalArg* g = find_arg(a.name);
    const std::string b = cint(a.offset[0]), h = cint(a.offset[1]);
    if (a.name == "LSE") {
      w.line("const float* g" + id(a.name) + " = p.lse + (int64_t(" + b + ") * p.heads_q + " + h + ") * p.seqlen_q;  // (seqlen_q)");
      return;
    }
    const bool rows_k = a.name == "K" || a.name == "V" || a.name == "dK" || a.name == "dV";
    const int cols = (a.name == "V" || a.name == "O" || a.name == "dO" || a.name == "dV") ? d_v_ : d_qk_;
    const std::string offset = b + " * p." + g->stride + "_batch_stride + " + h + " * p." + g->stride + "_head_stride";
    std::string type = g->out ? (a.name == "dQ" ? "float" : "ElementDK") : "Element";
    w.line(std::string("Tensor m") + id(a.name) + " = qattn::global_matrix" + (g->out ? "_out" : "") + "<" + type + ", " +
           std::to_string(cols) + ">(p." + g->field + ", " + offset + ", " + (rows_k ? "p.seqlen_k" : "p.seqlen_q") + ", p." +
           g->stride + "_row_stride);");
    return;
  }
  if (a.space == tl::Space::Shared) {
    const SharedBuf* bp = sh(a.name, s);
    if (!bp) return;
    const SharedBuf& b = *bp;
    if (b.cols == 0)
      w.line("float* " + b.var + " = reinterpret_cast<float*>(smem + kSmem" + id(a.name) + ");  // (" + std::to_string(b.rows) + ")");
    else
      w.line("Tensor " + b.var + " = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem + kSmem" + id(a.name) + ")), " +
             b.layout + "{});");
    return;
  }
  RegBuf* rp = rg(a.name, s);
  if (!rp) return;
  RegBuf& r = *rp;
  if (std::any_of(s.attrs.begin(), s.attrs.end(), [](const tl::Attr& at) { return at.key == "at_use"; })) {
    // `{at_use}`: a vector read only by column (`X^T`) and filled from a shared ring: each Compute that
    // reads it loads its values from the iteration's slot (broadcast loads) instead of registers
    // holding them across the products (d64's 128 columns: 32 registers a vector)
    auto b = shared_.find(a.name);
    if (r.cols != 0 || !col_vecs_.count(a.name) || b == shared_.end() || b->second.cols != 0 || b->second.stages < 2) {
      fail("XL0301", s.loc, "`{at_use}` on " + a.name + ": lowered for a register vector read only by column (`" + a.name +
                                "^T`) and copied from a shared vector of the same name in a ring (`{stages: 2}`)",
           "remove `{at_use}`, or ring the shared vector");
      return;
    }
    const auto [tr, tc] = col_vecs_.at(a.name);
    r.col_rows = tr, r.col_cols = tc;
    r.at_use = true;
    w.line("// (" + a.name + " is read from s" + id(a.name) + " where a Compute reads it by column: `{at_use}`)");
    return;
  }
  if (!computed_.count(a.name) && !elementwise_.count(a.name)) {
    w.line("// (a GEMM operand: its fragments are loaded from s" + id(a.name) + " inside the GEMM)");
    return;
  }
  if (r.cols == 0 && col_vecs_.count(a.name)) {
    const auto [tr, tc] = col_vecs_.at(a.name);
    r.col_rows = tr, r.col_cols = tc;
    w.line("Tensor " + r.var + " = qattn::cols_for<" + std::to_string(tr) + ", " + std::to_string(tc) + ">(" + mma(tr) + ");  // (" +
           std::to_string(r.rows) + "), read by column (`" + a.name + "^T`): the columns this thread holds of a (" + std::to_string(tr) +
           ", " + std::to_string(tc) + ") tile");
  } else if (r.cols == 0) {
    w.line("Tensor " + r.var + " = qattn::rows_for<" + std::to_string(r.rows) + ">(" + mma(r.rows, r.wm) + ");  // (" + std::to_string(r.rows) + ")");
  } else if (wg_ && split_acc_.count(a.name)) {
    r.layout = split_acc_.at(a.name);
    w.line("Tensor " + r.var + " = partition_fragment_C(" + r.layout + ", " + shape(r.rows, r.cols) +
           ");  // (MMA, MMA_M, MMA_N) fp32: each warpgroup's half of the columns (a product split along N adds to it)");
  } else {
    if (!layout_ok(r.rows, r.cols, r.wm, s, "register tile " + a.name)) return;
    w.line("Tensor " + r.var + " = partition_fragment_C(" + mma(r.rows, r.wm) + ", " + shape(r.rows, r.cols) + ");  // (MMA, MMA_M, MMA_N) fp32");
  }
  if (a.init) {
    w.line("fill(" + r.var + ", " + cfloat(*a.init) + ");");
  }
}

void Lower::copy(Out& w, const Stmt& s) {
  const auto& c = s.copy;
  w.line(ref(s));
  const std::string n = id(c.name);
  auto coord0 = [&]() { return c.coord.empty() ? std::string("0") : cint(c.coord[0]); };
  (void)coord0;
  if (c.from == tl::Space::Global && c.to == tl::Space::Shared) {
    const SharedBuf* bp = sh(c.name, s);
    if (!bp) return;
    const SharedBuf& b = *bp;
    if (c.coord.size() == 2 && !(c.coord[1].kind == tl::Expr::Kind::Number && c.coord[1].value == 0)) {
      fail("XL0301", s.loc, "a tile whose column coordinate is not 0", "copy whole rows: `in coordinate [i, 0]`");
      return;
    }
    if (prefetched_.count(&s)) {
      w.line("// (issued ahead: before the loop for the first iteration, during the previous one after that; waited for at its first read)");
      return;
    }
    (void)b;
    before_write(w, c.name, true);
    emit_g2s(w, s);
    return;
  }
  if (c.from == tl::Space::Shared && c.to == tl::Space::Register) {
    const SharedBuf* bp = sh(c.name, s);
    RegBuf* rp = bp ? rg(c.name, s) : nullptr;
    if (!rp) return;
    const SharedBuf& b = *bp;
    RegBuf& r = *rp;
    if (b.cols > 0 && !elementwise_.count(c.name)) {
      // only GEMMs read it: they stream its fragments from shared memory (a tile computed in registers
      // and copied there, e.g. dS split over warps along N, is read back whole by each warp's rows)
      w.line("// (fragments are loaded inside the GEMMs that read " + c.name + ")");
      r.from_shared = true;
      r.a_view.clear();
      return;
    }
    before_read(w, c.name);
    if (r.at_use) {
      r.at_use_scale.clear();  // the Copy gives the vector the slot's values again: no scale folded yet
      r.at_use_loaded = loop_stmt_ != nullptr;  // read this iteration's slot only after this Copy, in the loop
      w.line("// (" + c.name + " `{at_use}`: read from s" + id(c.name) + " by the Computes that use it)");
      return;
    }
    if (b.cols == 0 && r.col_rows)
      w.line("qattn::load_cols<" + std::to_string(r.col_rows) + ", " + std::to_string(r.col_cols) + ">(" + mma(r.col_rows) + ", " + b.var +
             ", " + r.var + ", tid);");
    else if (b.cols == 0)
      w.line("qattn::load_rows<" + std::to_string(b.rows) + ">(" + mma(b.rows, r.wm) + ", " + b.var + ", " + r.var + ", tid);");
    else
      w.line("qattn::load_acc(" + mma_of(r) + ", " + b.var + ", " + r.var + ", tid);");
    return;
  }
  if (c.from == tl::Space::Register && c.to == tl::Space::Shared) {
    const SharedBuf* bp = sh(c.name, s);
    const RegBuf* rp = bp ? rg(c.name, s) : nullptr;
    if (!rp) return;
    const SharedBuf& b = *bp;
    const RegBuf& r = *rp;
    if (b.cols == 0) {
      fail("XL0301", s.loc, "a row vector copied to shared memory", "");
      return;
    }
    before_write(w, c.name, false);
    // wgmma mode: a 16-bit tile by 32-bit stores of the accumulator's value pairs, not element by element
    // (H200, with the arrive form of the dQ stage below: d64-d128 1.01-1.06x, d256 / MLA 0.99-1.01x;
    // bench/results/2026-12-01-h200-bwd-loop). The mma.sync form keeps its stores: no A100 here to time it.
    const bool pairs = wg_ && (b.dtype == tl::DType::F16 || b.dtype == tl::DType::BF16);
    w.line(std::string(pairs ? "qattn::store_acc_smem_pairs(" : "qattn::store_acc_smem(") + mma_of(r) + ", " + r.var + ", " + b.var +
           ", tid);");
    return;
  }
  if (c.from == tl::Space::Register && c.to == tl::Space::Global) {
    const RegBuf* rp = rg(c.name, s);
    if (!rp) return;
    const RegBuf& r = *rp;
    if (r.cols == 0) {
      fail("XL0301", s.loc, "a row vector stored to global memory in a backward program", "");
      return;
    }
    for (const auto& a : s.attrs)
      if (a.key == "ordered") {
        ordered_add(w, s, r);
        return;
      }
    // a tile the plan stages for TMA (plan_tma_adds): each warpgroup's part by bulk tensor reductions
    // (fp32 additions) or stores (the epilogue's 16-bit dK, dV)
    const TmaAdd* t = tma_add(n);
    if (t && t->epilogue == loop_var_.empty() && t->store == !c.accumulate) {
      const std::string dims = std::to_string(r.rows) + ", " + std::to_string(r.cols);
      const std::string args = "(" + mma_of(r) + ", " + r.var + ", reinterpret_cast<" + (t->store ? "ElementDK" : "float") +
                               "*>(smem + kSmemAdd" + id(n) + "), &ta" + id(n) + ", " + coord0() + ", " + t->head + ", " + t->batch +
                               ", tid, 1 + kThreads / 128 + wg);";
      const bool free = tma_add_free_;  // the iteration's first barrier waited for the previous additions
      // the loop's only addition, after that barrier: the warpgroup's other warps arrive at its stage's
      // barrier and go on, the first one waits and issues (the next call is past a block-wide barrier)
      const bool arrive = free && !t->epilogue &&
                          std::count_if(tma_adds_.begin(), tma_adds_.end(), [](const TmaAdd& a) { return !a.epilogue; }) == 1;
      // d <= 64: the stage's fp32 stores in the XOR2 order (no bank conflicts; device/qattn/sm90/backward.cuh
      // stage_acc). H200: d64 1.03-1.05x; d128 0.97-0.99x (its consumers hold 250+ registers), so not there
      // (bench/results/2026-12-01-h200-bwd-loop, section 7)
      const bool xor2 = arrive && r.cols <= 64;
      tma_add_wait_due_ = false;
      if (t->epilogue && !epilogue_synced_) {
        w.line("__syncthreads();  // every warp is past the loop: its shared buffers take the epilogue's TMA stages");
        epilogue_synced_ = true;
      }
      if (t->store)
        w.line("qattn::sm90::store_acc_global_tma<" + dims + ">" + args + "  // TMA stores");
      else
        w.line("qattn::sm90::add_acc_global_tma<" + dims + ", " + (free ? "true" : "false") + (arrive ? ", true" : "") + (xor2 ? ", true" : "") + ">" + args +
               "  // TMA reductions (fp32 add)");
      return;
    }
    // otherwise, on warpgroup MMA an added tile goes by float4 reductions (value pairs traded within lane
    // pairs: device/qattn/sm90/backward.cuh; H200: 1.05-1.15x red.global.add.v2 per pair over d64-d256
    // and MLA, bench/results/2026-11-30-h200-bwd-dq-adds)
    const std::string fn = !c.accumulate ? "qattn::store_acc_global<" : wg_ ? "qattn::sm90::add_acc_global_v4<" : "qattn::add_acc_global<";
    w.line(fn + std::to_string(r.rows) + ", " + std::to_string(r.cols) + ">(" + mma_of(r) + ", " + r.var + ", m" + n + ", " +
           coord0() + ", tid);" + (c.accumulate ? "  // fp32 atomics" : ""));
    return;
  }
  fail("XL0301", s.loc, "a Copy from " + std::string(tl::to_string(c.from)) + " to " + tl::to_string(c.to) + " is not lowered", "");
}

std::optional<Lower::View> Lower::operand_view(const tl::Operand& o, bool is_a, const Stmt& s) {
  const std::string& n = o.expr.name;
  auto it = shared_.find(n);
  if (it == shared_.end() || it->second.cols == 0) {
    fail("XL0303", s.loc, "GEMM operand '" + n + "' has no 2-D shared buffer to read", "");
    return std::nullopt;
  }
  const SharedBuf& b = it->second;
  // A (M, K): stored as written unless ^T; B (N, K): stored as written when ^T (K^T of a (N, K) buffer).
  const bool as_stored = is_a ? !o.transposed : o.transposed;
  if (as_stored) return View{b.var, "SmemCopyAtom"};
  return View{"make_tensor(" + b.var + ".data(), qattn::transposed(" + b.layout + "{}))", "SmemCopyAtomT"};
}

void Lower::gemm(Out& w, const Stmt& s) {
  const auto& c = s.compute;
  const tl::Operand &A = c.operands[0], &B = c.operands[1];
  if (A.expr.kind != tl::Expr::Kind::Name || B.expr.kind != tl::Expr::Kind::Name) {
    fail("XL0303", s.loc, "GEMM operands must be tensor names", "");
    return;
  }
  RegBuf* acc = nullptr;
  if (wg_) {
    std::string why;
    auto g = wg_form(s, why);
    if (!g) {
      fail("XL0303", s.loc, "no wgmma form for this GEMM: " + why, "");
      return;
    }
    if (c.result == tl::ComputeStmt::Result::Accumulate) {
      acc = rg(c.target, s);
      if (!acc) return;
      const std::string want = g->split_n ? "MmaCols<" + std::to_string(g->m) + ", " + std::to_string(g->n) + ", 2>{}" : "";
      if (acc->layout != want || acc->rows != g->m || acc->cols != g->n) {
        fail("XL0303", s.loc, "the accumulator " + c.target + " is not a (" + std::to_string(g->m) + ", " + std::to_string(g->n) +
                                  ") tile split along " + (g->split_n ? "N" : "M"), "");
        return;
      }
    } else {
      RegBuf r;
      r.var = "r" + id(c.target);
      r.rows = g->m;
      r.cols = g->n;
      if (g->split_n) r.layout = "MmaCols<" + std::to_string(g->m) + ", " + std::to_string(g->n) + ", 2>{}";
      regs_[c.target] = r;
      acc = &regs_[c.target];
      w.line("Tensor " + acc->var + " = partition_fragment_C(" + mma_of(*acc) + ", " + shape(g->m, g->n) + ");  // (MMA, MMA_M, MMA_N) fp32: " +
             (g->split_n ? "each warpgroup's half of the columns" : "each warpgroup's 64 rows"));
    }
    before_read(w, B.expr.name);
    if (!g->rs) before_read(w, A.expr.name);
    read_since_barrier_.insert(B.expr.name);
    wg_gemm(w, s, *acc, *g);
    return;
  }
  if (c.result == tl::ComputeStmt::Result::Accumulate) {
    acc = rg(c.target, s);
    if (!acc) return;
  } else {
    // M from A, N from B
    int m = 0, nn = 0;
    auto rows_of = [&](const tl::Operand& o, bool first) -> int {
      auto sh = shared_.find(o.expr.name);
      auto rg = regs_.find(o.expr.name);
      int r = 0, cc = 0;
      if (rg != regs_.end() && rg->second.cols) r = rg->second.rows, cc = rg->second.cols;
      else if (sh != shared_.end()) r = sh->second.rows, cc = sh->second.cols;
      return first ? (o.transposed ? cc : r) : (o.transposed ? r : cc);
    };
    m = rows_of(A, true);
    nn = rows_of(B, false);
    RegBuf r;
    r.var = "r" + id(c.target);
    r.rows = m;
    r.cols = nn;
    r.wm = attr_wm(s);
    regs_[c.target] = r;
    acc = &regs_[c.target];
    if (!layout_ok(m, nn, acc->wm, s, "the product " + c.target)) return;
    w.line("Tensor " + acc->var + " = partition_fragment_C(" + mma(m, acc->wm) + ", " + shape(m, nn) + ");  // (MMA, MMA_M, MMA_N) fp32");
    w.line("clear(" + acc->var + ");");
  }
  auto bv = operand_view(B, false, s);
  if (!bv) return;
  if (regs_.count(B.expr.name) && computed_.count(B.expr.name)) {
    fail("XL0303", B.loc.line ? B.loc : s.loc, "GEMM B operand '" + B.expr.name + "' is a computed register tile",
         "a B operand is read from shared memory: copy it there and read the shared buffer");
    return;
  }
  before_read(w, B.expr.name);
  const bool a_shared = A.transposed || !regs_.count(A.expr.name) || !computed_.count(A.expr.name) || regs_.at(A.expr.name).from_shared;
  if (a_shared) before_read(w, A.expr.name);
  read_since_barrier_.insert(B.expr.name);  // (a barrier for A's stores comes before B's reads too)
  const RegBuf* ra = regs_.count(A.expr.name) ? &regs_.at(A.expr.name) : nullptr;
  if (!A.transposed && ra && computed_.count(A.expr.name) && !ra->from_shared) {
    if (ra->a_view.empty()) {
      fail("XL0303", A.loc.line ? A.loc : s.loc, "GEMM A operand '" + A.expr.name + "' is a register accumulator without its Reshape",
           "insert `Reshape " + A.expr.name + " from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)`");
      return;
    }
    if (!same_rows(*ra, *acc, s)) return;
    w.line("qattn::gemm_rs<" + bv->atom + ">(" + mma(acc->rows, acc->wm) + ", " + acc->var + ", " + ra->a_view + ", " + bv->expr +
           ", tid);  // A from registers, B streamed from shared memory");
    return;
  }
  auto av = operand_view(A, true, s);
  if (!av) return;
  w.line("qattn::gemm_ss<" + av->atom + ", " + bv->atom + ">(" + mma(acc->rows, acc->wm) + ", " + acc->var + ", " + av->expr + ", " + bv->expr +
         ", tid);  // A and B streamed from shared memory");
}

}  // namespace qattn::backend::bwd::detail

namespace qattn::backend::bwd {

std::optional<Translation> translate(const tl::Program& code, const tl::CheckInfo& info, const plan::Target& target,
                                     support::DiagSink& diags) {
  return detail::Lower(code, info, target, diags).run();
}

}  // namespace qattn::backend::bwd
