// Stage 2 pre-pass: reads the checked TL program once and decides everything the emitter needs
// that is not local to one statement: the header constants, the ABI binding of the Dims, the
// operand dtype and so the architecture lowering, which register tensors are streamed GEMM
// operands, the K/V copy pipeline of the main loop, and the shared-memory plan. Any form the
// emitter cannot lower faithfully is reported here (XL01xx-XL03xx) with its TL line.
#include <algorithm>
#include <functional>

#include "backend/lowering.h"
#include "tl/eval.h"
#include "tl/printer.h"

namespace qattn::backend::detail {
namespace {

bool is_g2s(const tl::Stmt& s) {
  return s.kind == tl::Stmt::Kind::Copy && s.copy.from == tl::Space::Global && s.copy.to == tl::Space::Shared;
}
bool is_s2r(const tl::Stmt& s) {
  return s.kind == tl::Stmt::Kind::Copy && s.copy.from == tl::Space::Shared && s.copy.to == tl::Space::Register;
}

// Shared buffers a statement reads (S2R copies and GEMM operands without a register buffer are
// handled by the caller, which knows which operands stream from shared memory).
void walk(const std::vector<tl::Stmt>& body, const std::function<void(const tl::Stmt&)>& f) {
  for (const auto& s : body) {
    f(s);
    if (s.kind == tl::Stmt::Kind::For) walk(s.loop.body, f);
  }
}

}  // namespace

std::optional<int64_t> Lowering::eval(const tl::Expr& e, support::SrcLoc where, const std::string& what) {
  tl::Env env;
  env.ints = env_;
  auto v = tl::eval_int(e, env, nullptr);
  if (!v) {
    diags_.error("XL0201", where, what + " `" + tl::print_expr(e) + "` is not a compile-time constant",
                 "tile shapes and head dims must be Consts or fixed Dims (`Dim d = 128`, `Const BM = 128`): the "
                 "translator builds them into the kernel");
  }
  return v;
}

bool Lowering::analyze_front() {
  if (!analyze_header()) return false;
  // Hopper programs in the wgmma form (no register copy of Q: GEMMs read shared memory) take the
  // sm90 lowering (sm90/lower.cc); every other program the mma.sync lowering below.
  auto q = info_.tensors.find("Q");
  wgmma_ = target_.sm >= 90 && q != info_.tensors.end() && !q->second.in_register;
  return analyze_tensors();
}

bool Lowering::analyze_mma() {
  if (grid_.size() > 3 || info_.split) {
    diags_.error("XL0203", grid_stmt_ ? grid_stmt_->loc : support::SrcLoc{},
                 "split keys (a Grid axis over splits) are lowered for Hopper's wgmma kernels only",
                 "translate for an sm90 GPU (--gpu h100) a program whose GEMMs read Q and K from shared memory; on other "
                 "GPUs the Python package splits by folding the parts into the batch");
    return false;
  }
  if (!analyze_gemms()) return false;
  if (tile_m_ % (16 * warps_) != 0) {
    diags_.error("XL0202", const_stmt_ ? const_stmt_->loc : support::SrcLoc{},
                 "a " + std::to_string(tile_m_) + "-row tile cannot be split over " + std::to_string(warps_) +
                     " warps of 16-row MMAs",
                 "BM must be a multiple of 16 * WARPS (each warp owns BM / WARPS rows)");
    return false;
  }
  if (!analyze_statements(prog_.stmts, 0)) return false;
  analyze_schedule();
  return analyze_smem();
}

bool Lowering::analyze_header() {
  bool ok = true;
  for (size_t i = 0; i < prog_.stmts.size(); ++i) {
    const tl::Stmt& s = prog_.stmts[i];
    switch (s.kind) {
      case tl::Stmt::Kind::Kernel:
        kernel_stmt_ = &s;
        tl_kernel_name_ = s.kernel.name;
        mask_ = s.kernel.mask;
        break;
      case tl::Stmt::Kind::Dim:
        dim_stmt_ = &s;
        for (const auto& it : s.dim.items) {
          scalar_names_.insert(it.name);
          if (it.value) {
            auto v = eval(*it.value, it.loc, "Dim " + it.name);
            if (!v) return false;
            env_[it.name] = *v;
            fixed_dims_.push_back({it.name, *v});
          } else {
            runtime_dims_[it.name] = "";
          }
        }
        break;
      case tl::Stmt::Kind::Const:
        if (!const_stmt_) const_stmt_ = &s;
        const_stmts_.push_back(&s);
        for (const auto& it : s.cnst.items) {
          scalar_names_.insert(it.name);
          auto v = eval(it.value, it.loc, "Const " + it.name);
          if (!v) return false;
          env_[it.name] = *v;
          consts_.push_back({it.name, *v});
        }
        break;
      case tl::Stmt::Kind::Grid:
        grid_stmt_ = &s;
        if (s.grid.items.size() > 3) {
          // split keys (docs/tl.md, "Splitting the keys"): a fourth axis over the Dim splits, the part
          // index of O's and LSE's offsets; the launch folds it into the batch axis (b * splits + s)
          const auto& last = s.grid.items.back();
          const bool split = s.grid.items.size() == 4 && last.extent.kind == tl::Expr::Kind::Name &&
                             last.extent.name == "splits" && info_.split && info_.split_var &&
                             info_.split_var->kind == tl::Expr::Kind::Name && info_.split_var->name == last.var;
          if (!split) {
            diags_.error("XL0203", s.loc, "a Grid of " + std::to_string(s.grid.items.size()) + " axes cannot be launched",
                         info_.split ? "a program that splits the keys has the part as its fourth and last axis, `s = 0: splits`, "
                                       "and indexes O and LSE with it: `with offset [b, s, head]`"
                                     : "CUDA grids have 3 axes: `Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch`");
            return false;
          }
        }
        if (info_.split) {  // O and LSE at [b, split, head]: the part is the fourth axis, a launch value
          const bool four = s.grid.items.size() == 4;
          bool fixed = false;
          for (const auto& [n, v] : fixed_dims_) fixed = fixed || n == "splits";
          if (!four || fixed) {
            diags_.error("XL0203", s.loc,
                         !four ? "O and LSE hold the parts of split keys ([b, split, head]) but the Grid has no axis over the parts"
                               : "the number of parts is fixed (`Dim splits = N`): the launch passes it (the C ABI's splits)",
                         !four ? "add the fourth axis `split = 0: splits` and index O and LSE with it"
                               : "declare `Dim splits` without a value");
            return false;
          }
        }
        for (const auto& it : s.grid.items) {
          grid_.push_back({it.var, it.extent});
          scalar_names_.insert(it.var);
        }
        break;
      case tl::Stmt::Kind::Let: scalar_names_.insert(s.let.name); break;
      case tl::Stmt::Kind::For:
        if (loop_) {
          diags_.error("XL0302", s.loc, "a second top-level loop is not lowered",
                       "the translator lowers one main loop over K/V tiles (FlashAttention's structure)");
          ok = false;
          break;
        }
        loop_ = &s;
        loop_index_ = i;
        loop_var_ = s.loop.var;
        scalar_names_.insert(s.loop.var);
        for (const auto& b : s.loop.body) {
          if (b.kind == tl::Stmt::Kind::For) {
            diags_.error("XL0302", b.loc, "nested loops are not lowered",
                         "write one loop over the K/V tiles; the k-loop of a GEMM is implicit in `Compute GEMM`");
            ok = false;
          }
          if (b.kind == tl::Stmt::Kind::Let) scalar_names_.insert(b.let.name);
        }
        break;
      default: break;
    }
  }
  if (grid_.empty()) {
    diags_.error("XL0203", {}, "the program has no Grid", "add `Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch`");
    ok = false;
  }
  for (const auto& [n, v] : consts_) {
    if (n == "WARPS") { warps_ = int(v); warps_expr_ = ident(n); }
    if (n == "STAGES") { stages_ = int(v); stages_expr_ = ident(n); }
  }
  if (warps_ < 1 || warps_ > 16) {
    diags_.error("XL0202", const_stmt_ ? const_stmt_->loc : support::SrcLoc{}, "WARPS = " + std::to_string(warps_) + " is not lowered",
                 "use 1 to 16 warps (4 or 8 for mma.sync kernels)");
    ok = false;
  }
  if (stages_ < 1 || stages_ > 4) {
    diags_.error("XL0202", const_stmt_ ? const_stmt_->loc : support::SrcLoc{}, "STAGES = " + std::to_string(stages_) + " is not lowered",
                 "use 1 to 4 K/V shared-memory stages");
    ok = false;
  }
  threads_ = warps_ * 32;
  return ok;
}

bool Lowering::analyze_tensors() {
  auto find = [&](const std::string& n) -> const tl::TensorInfo* {
    auto it = info_.tensors.find(n);
    return it == info_.tensors.end() ? nullptr : &it->second;
  };
  const tl::TensorInfo *q = find("Q"), *k = find("K"), *v = find("V"), *o = find("O");
  // TL `Allocate V in shared ... {view: K}` (absorbed MLA): V is K's first d_v columns, no global V
  bool v_view = false;
  walk(prog_.stmts, [&](const tl::Stmt& s) {
    if (s.kind == tl::Stmt::Kind::Allocate && s.alloc.space == tl::Space::Shared && s.alloc.name == "V")
      for (const auto& a : s.attrs) v_view = v_view || (a.key == "view" && a.value && a.value->kind == tl::Expr::Kind::Name && a.value->name == "K");
  });
  if (v_view && v && v->in_global) {
    diags_.error("XL0301", v->decl, "V is both a global tensor and a view of K's shared tile", "drop `Allocate V in global ...`: the view reads K's columns");
    return false;
  }
  if (!q || !k || !o || !q->in_global || !k->in_global || !o->in_global || (!v_view && (!v || !v->in_global))) {
    diags_.error("XL0301", {}, "the program lacks a global Q, K, V or O", "the checker should have reported this");
    return false;
  }
  has_lse_ = find("LSE") && find("LSE")->in_global;
  elem_ = q->global_dtype;
  out_ = o->global_dtype;
  auto a = choose_arch(target_, elem_, diags_, q->decl, wgmma_);
  if (!a) return false;
  arch_ = *a;
  kernel_name_ = tl_kernel_name_ + "_" + arch_.name;
  if (k->global_dtype != elem_ || (!v_view && v->global_dtype != elem_)) {
    diags_.error("XL0102", k->decl, "Q, K and V of different dtypes are not lowered",
                 "store Q, K and V in one dtype (the MMA reads both operands in it)");
    return false;
  }
  if (out_ != tl::DType::F16 && out_ != tl::DType::BF16) {
    diags_.error("XL0102", o->decl, std::string("O in ") + tl::to_string(out_) + " is not lowered",
                 "O is fp16 or bf16 (bf16 for fp8 kernels), as include/qattn/qattn.h describes");
    return false;
  }
  // Head dims are fixed Dims; sequence lengths, batch and heads bind to the ABI's fields.
  auto fixed_cols = [&](const tl::TensorInfo* t, int& out, std::string& expr) {
    if (t->global_shape.size() != 2) return false;
    auto val = eval(t->global_shape[1], t->decl, "the head dim of " + t->name);
    if (!val) return false;
    out = int(*val);
    expr = cpp_int(t->global_shape[1]);
    return true;
  };
  if (!fixed_cols(q, d_qk_, q_cols_expr_) || !fixed_cols(v_view ? o : v, d_v_, v_cols_expr_)) return false;
  auto bind_rows = [&](const tl::TensorInfo* t, const std::string& field) {
    const tl::Expr& r = t->global_shape[0];
    if (r.kind == tl::Expr::Kind::Name && runtime_dims_.count(r.name)) {
      if (!runtime_dims_[r.name].empty() && runtime_dims_[r.name] != field) {
        diags_.error("XL0201", t->decl, "Dim " + r.name + " is both " + runtime_dims_[r.name] + " and " + field,
                     "seqlen_q (rows of Q and O) and seqlen_k (rows of K and V) are separate Dims");
        return false;
      }
      runtime_dims_[r.name] = field;
      return true;
    }
    diags_.error("XL0201", t->decl, "the rows of " + t->name + " must be a Dim bound at launch",
                 "write `Allocate " + t->name + " in global (" + field + ", d) ...` with `Dim " + field + "`");
    return false;
  };
  if (!bind_rows(q, "seqlen_q") || !bind_rows(o, "seqlen_q") || !bind_rows(k, "seqlen_k") || (!v_view && !bind_rows(v, "seqlen_k")))
    return false;
  for (auto& [name, field] : runtime_dims_) {
    if (!field.empty()) continue;
    if (name == "batch" || name == "heads_q" || name == "heads_kv" || (info_.split && name == "splits") ||  // ABI 8: split keys
        (!info_.paged.empty() && (name == "page_size" || name == "pages"))) {  // ABI 4: a paged KV cache
      field = name;
    } else {
      diags_.error("XL0201", dim_stmt_ ? dim_stmt_->loc : support::SrcLoc{},
                   "Dim " + name + " has no value at launch",
                   "the C ABI passes batch, heads_q, heads_kv, seqlen_q, seqlen_k (and page_size, pages for a paged K / V); fix other Dims (`Dim " + name +
                       " = 128`)");
      return false;
    }
  }
  // The block's M tile: rows of Q's shared tile (all row vectors and 2-D register tiles use it).
  if (!q->in_shared || q->shared_shape.size() != 2) {
    diags_.error("XL0301", q->decl, "Q has no (rows, cols) shared buffer",
                 "stage Q through shared memory: `Allocate Q in shared (BM, d)` and `Copy Q (BM, d) in coordinate [m_block, 0] from global to shared`");
    return false;
  }
  auto tm = eval(q->shared_shape[0], q->decl, "Q's tile rows");
  if (!tm) return false;
  tile_m_ = int(*tm);
  tile_m_expr_ = cpp_int(q->shared_shape[0]);
  for (int d : {d_qk_, d_v_}) {
    if (d % arch_.tile_k != 0 || d * arch_.elem_bytes % 16 != 0) {
      diags_.error("XL0202", q->decl, "head dim " + std::to_string(d) + " is not a multiple of " + std::to_string(arch_.tile_k),
                   "the MMA k-block is " + std::to_string(arch_.tile_k) + " elements on " + arch_.name);
      return false;
    }
  }
  // Shared buffers, in the order of their Allocates.
  std::vector<std::string> order;
  walk(prog_.stmts, [&](const tl::Stmt& s) {
    if (s.kind == tl::Stmt::Kind::Allocate && s.alloc.space == tl::Space::Shared) order.push_back(s.alloc.name);
  });
  for (const auto& name : order) {
    const tl::TensorInfo& t = info_.tensors.at(name);
    if (!t.in_shared || shared_.count(name)) continue;
    if (t.shared_shape.size() != 2) {
      diags_.error("XL0301", t.decl, "shared buffer " + name + " is not 2-D", "shared tiles are (rows, cols)");
      return false;
    }
    SharedBuf b;
    b.name = name;
    auto r = eval(t.shared_shape[0], t.decl, "rows of " + name), c = eval(t.shared_shape[1], t.decl, "cols of " + name);
    if (!r || !c) return false;
    b.rows = int(*r);
    b.cols = int(*c);
    b.rows_expr = cpp_int(t.shared_shape[0]);
    b.cols_expr = cpp_int(t.shared_shape[1]);
    b.dtype = t.shared_dtype;
    if (b.dtype != elem_) {
      diags_.error("XL0102", t.decl, "shared " + name + " in " + tl::to_string(b.dtype) + " differs from the operands' " +
                                         tl::to_string(elem_), "shared tiles keep the global dtype");
      return false;
    }
    if (b.rows % 16 != 0 || b.cols % arch_.tile_k != 0) {
      diags_.error("XL0202", t.decl, "shared tile " + name + " (" + std::to_string(b.rows) + ", " + std::to_string(b.cols) + ") does not tile by the MMA",
                   "rows must be multiples of 16 and columns of " + std::to_string(arch_.tile_k));
      return false;
    }
    shared_[name] = b;
    shared_order_.push_back(name);
  }
  return true;
}

bool Lowering::analyze_gemms() {
  bool ok = true;
  std::set<std::string> reshaped;
  walk(prog_.stmts, [&](const tl::Stmt& s) {
    if (s.kind == tl::Stmt::Kind::Reshape) reshaped.insert(s.reshape.name);
  });
  auto descale_of = [&](const std::string& n) -> std::string {
    if (!arch_.fp8) return "";
    if (n == "Q") return "descale_q";
    if (n == "K") return "descale_k";
    if (n == "V") return "descale_v";
    return "";
  };
  walk(prog_.stmts, [&](const tl::Stmt& s) {
    if (s.kind != tl::Stmt::Kind::Compute || s.compute.op != "GEMM") return;
    const auto& c = s.compute;
    GemmPlan g;
    if (c.operands.size() != 2 || c.operands[0].expr.kind != tl::Expr::Kind::Name ||
        c.operands[1].expr.kind != tl::Expr::Kind::Name) {
      diags_.error("XL0301", s.loc, "GEMM operands must be tensor names", "`Compute GEMM Q, K^T and get S`");
      ok = false;
      return;
    }
    g.a_name = c.operands[0].expr.name;
    g.b_name = c.operands[1].expr.name;
    g.c_name = c.target;
    g.accumulate = c.result == tl::ComputeStmt::Result::Accumulate;
    g.b_kmajor = c.operands[1].transposed;
    const auto& ta = info_.tensors.at(g.a_name);
    const auto& tb = info_.tensors.at(g.b_name);
    if (c.operands[0].transposed) {
      diags_.error("XL0303", c.operands[0].loc, "a transposed A operand (" + g.a_name + "^T) is not lowered",
                   "mma.sync reads A as (M, K) row-major: store the tensor as (M, K) and write it without ^T");
      ok = false;
      return;
    }
    if (target_.sm >= 90 && (!ta.in_register || !tb.in_register)) {
      const std::string n = !ta.in_register ? g.a_name : g.b_name;
      diags_.error("XL0303", s.loc, "GEMM operand " + n + " is read from shared memory (the sm90 wgmma form)",
                   "the wgmma/TMA lowering is not written yet; plan for sm80 (`--gpu a100`): its kernel runs on Hopper");
      ok = false;
      return;
    }
    if (reshaped.count(g.a_name)) {
      g.a = GemmPlan::A::Register;
    } else if (ta.in_shared) {
      g.a = GemmPlan::A::Streamed;
    } else {
      diags_.error("XL0303", c.operands[0].loc, "A operand " + g.a_name + " is neither a Reshape result nor staged in shared memory",
                   "an A operand is a shared tile copied to registers (Q) or a GEMM accumulator Reshaped to MMA_A (P)");
      ok = false;
      return;
    }
    if (!tb.in_shared) {
      diags_.error("XL0303", c.operands[1].loc, "B operand " + g.b_name + " has no shared buffer",
                   "B operands (K, V) are loaded into registers from shared memory with ldmatrix");
      ok = false;
      return;
    }
    if (!g.accumulate && c.target_dtype && *c.target_dtype != tl::DType::F32) {
      diags_.error("XL0301", c.target_loc, "a GEMM result in " + std::string(tl::to_string(*c.target_dtype)) + " is not lowered",
                   "mma.sync accumulates in fp32: `and get S` (fp32), then `Compute Convert`");
      ok = false;
      return;
    }
    const std::string da = descale_of(g.a_name), db = descale_of(g.b_name);
    if (!da.empty() && !db.empty()) g.descale = (da == "descale_q" && db == "descale_k") ? "descale_qk" : da + " * " + db;
    else g.descale = da.empty() ? db : da;
    if (g.accumulate && !g.descale.empty()) acc_descale_[g.c_name] = g.descale;
    if (g.a == GemmPlan::A::Register) reshape_family_[g.a_name] = g.c_name;
    gemms_[&s] = g;
  });
  if (!ok) return false;
  // Register-resident A operands: only where the whole operand, the accumulators and a margin fit
  // the 255-register cap (Q on sm75 d64); otherwise Q's fragments stream from shared memory.
  int acc_regs = 0;
  for (const auto& [st, g] : gemms_) {
    (void)st;
    const auto& tc = info_.tensors.count(g.c_name) ? info_.tensors.at(g.c_name) : tl::TensorInfo{};
    int cols = 0;
    if (tc.register_shape.size() == 2) {
      if (auto v = tl::eval_int(tc.register_shape[1], tl::Env{env_, {}}, nullptr)) cols = int(*v);
    } else {
      const auto& tb = info_.tensors.at(g.b_name);
      if (auto v = tl::eval_int(tb.shared_shape[g.b_kmajor ? 0 : 1], tl::Env{env_, {}}, nullptr)) cols = int(*v);
    }
    acc_regs += tile_m_ * cols / threads_;
  }
  for (const auto& [st, g] : gemms_) {
    (void)st;
    if (g.a != GemmPlan::A::Streamed || resident_a_.count(g.a_name)) continue;
    const int a_regs = tile_m_ * d_qk_ * arch_.elem_bytes / 4 / threads_;
    bool top_level_copy = false, written_in_loop = false;
    for (const auto& s : prog_.stmts)
      if (is_s2r(s) && s.copy.name == g.a_name) top_level_copy = true;
    if (loop_)
      for (const auto& s : loop_->loop.body)
        if (is_g2s(s) && s.copy.name == g.a_name) written_in_loop = true;
    if (top_level_copy && !written_in_loop && acc_regs + a_regs + 48 <= 255) resident_a_.insert(g.a_name);
  }
  for (auto& [st, g] : gemms_) {
    (void)st;
    if (g.a == GemmPlan::A::Streamed && resident_a_.count(g.a_name)) g.a = GemmPlan::A::Resident;
  }
  return true;
}

bool Lowering::analyze_statements(const std::vector<tl::Stmt>& body, int depth) {
  bool ok = true;
  for (const auto& s : body) {
    for (const auto& a : s.attrs) {
      if (a.key == "skip" && s.kind == tl::Stmt::Kind::For && a.value && a.value->kind == tl::Expr::Kind::Name) {
        if (!analyze_skip(s, a.value->name)) ok = false;
        continue;
      }
      if (a.key == "paged" || a.key == "ragged") continue;  // a paged K / V, a ragged view (the checker placed them): emit_allocate
      if (a.key == "pack") {
        diags_.error("XL0301", a.loc, "GQA packing (`{pack: ...}`) is not lowered for " + target_.name,
                     "packed views are lowered on sm90a only (TMA boxes over (head, row)): translate for `--gpu h100`, "
                     "or remove `{pack}` and launch one tile per query head (`Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, ...`)");
        ok = false;
        break;
      }
      const bool hopper =
          a.key == "async" || a.key == "stages" || a.key == "wait" || a.key == "release" || a.key == "overlap" || a.key == "stream";
      diags_.error("XL0301", a.loc, "schedule attribute `" + a.key + "` is not lowered for " + target_.name,
                   hopper ? "the Hopper schedule ({async}, {stages}, {wait}, {release}, {overlap}, {stream}) is lowered on sm90a only: "
                            "translate for `--gpu h100`, or remove it (the sm80 translator chooses its own cp.async pipeline)"
                          : "remove the attribute: the translator chooses the copy/compute overlap itself");
      ok = false;
      break;
    }
    switch (s.kind) {
      case tl::Stmt::Kind::Copy: {
        const auto& c = s.copy;
        const bool g2s = c.from == tl::Space::Global && c.to == tl::Space::Shared;
        const bool s2r = c.from == tl::Space::Shared && c.to == tl::Space::Register;
        const bool r2g = c.from == tl::Space::Register && c.to == tl::Space::Global;
        if (!g2s && !s2r && !r2g) {
          diags_.error("XL0301", s.loc, std::string("Copy from ") + tl::to_string(c.from) + " to " + tl::to_string(c.to) + " is not lowered",
                       "lowered copies: global -> shared (tiles), shared -> register (whole buffer), register -> global (O, LSE)");
          ok = false;
          break;
        }
        if (s2r && !c.tile.empty()) {
          diags_.error("XL0301", s.loc, "a partial shared -> register Copy is not lowered",
                       "copy the whole buffer: `Copy " + c.name + " from shared to register`");
          ok = false;
        }
        if ((g2s || r2g) && c.name != "LSE") {
          if (c.coord.size() != 2 || !(c.coord[1].kind == tl::Expr::Kind::Number && c.coord[1].value == 0)) {
            diags_.error("XL0301", s.loc, "a Copy tile that does not span the head dim (column coordinate 0) is not lowered",
                         "tiles hold whole rows: `Copy " + c.name + " (BN, d) in coordinate [j, 0] ...`");
            ok = false;
          }
        }
        if (r2g && c.name != "O" && c.name != "LSE") {
          diags_.error("XL0301", s.loc, "only O and LSE are stored to global memory", "");
          ok = false;
        }
        break;
      }
      case tl::Stmt::Kind::Reshape: {
        const auto& r = s.reshape;
        if (r.from.empty() || r.from[0] != "MMA_C" || r.to.empty() || r.to[0] != "MMA_A") {
          diags_.error("XL0301", s.loc, "only Reshape from (MMA_C, ...) to (MMA_A, ...) is lowered",
                       "`Reshape P from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)`");
          ok = false;
        } else if (!reshape_family_.count(r.name)) {
          diags_.error("XL0301", s.loc, "Reshape of " + r.name + ", which no GEMM reads as its A operand",
                       "a Reshape to MMA_A prepares the A operand of the next GEMM");
          ok = false;
        }
        break;
      }
      case tl::Stmt::Kind::Allocate: {
        const auto& a = s.alloc;
        if (a.space == tl::Space::Global && a.name != "Q" && a.name != "K" && a.name != "V" && a.name != "O" && a.name != "LSE") {
          const bool known = std::find(info_.aux.begin(), info_.aux.end(), a.name) != info_.aux.end();
          if (!known || depth > 0) {
            diags_.error("XL0301", s.loc, "global tensor " + a.name + " has no ABI argument",
                         "globals are Q, K, V, O, LSE and up to 4 auxiliary fp32/int32 inputs of Score/Mask declarations");
            ok = false;
          } else {
            AuxInfo ai;
            ai.slot = int(aux_order_.size());
            ai.is_int = a.dtype && *a.dtype == tl::DType::I32;
            for (const auto& e : a.shape) ai.extents.push_back(cpp_int(e));
            aux_[a.name] = ai;
            aux_order_.push_back(a.name);
          }
        }
        if (depth > 0 && a.space == tl::Space::Shared) {
          diags_.error("XL0301", s.loc, "a shared Allocate inside the loop is not lowered", "allocate shared tiles before the loop");
          ok = false;
        }
        break;
      }
      case tl::Stmt::Kind::For:
        if (!analyze_statements(s.loop.body, depth + 1)) ok = false;
        break;
      case tl::Stmt::Kind::Variant:
        if (depth > 0) {
          diags_.error("XL0301", s.loc, "a declaration inside the loop is not lowered", "declare Score/Mask before the loop");
          ok = false;
        }
        break;
      case tl::Stmt::Kind::Role:
        diags_.error("XL0301", s.loc, "Role statements (warp specialisation) are lowered on sm90a only",
                     "translate the wgmma form for a Hopper GPU (`--gpu h100`), or remove the Roles for " + target_.name);
        ok = false;
        break;
      default: break;
    }
  }
  return ok;
}

// `{skip: NAME}` on the main loop: the tile pair is the one `Compute Mask S at [r, c] with NAME`
// masks; S comes from a GEMM whose B operand (K^T) has a shared buffer of BN rows.
bool Lowering::analyze_skip(const tl::Stmt& loop, const std::string& name) {
  const auto t = skip_tile(loop, name, names());
  if (!t) {
    diags_.error("XL0301", loop.loc, "`{skip: " + name + "}` is not lowered here",
                 "the loop needs `Compute GEMM Q, K^T and get S` and `Compute Mask S at [m_block, j] with " + name +
                     "`, and the Mask an `empty when` clause");
    return false;
  }
  skip_mask_ = name;
  skip_row_ = t->row;
  skip_col_ = t->col;
  skip_cols_ = t->cols;
  return true;
}

// The K/V pipeline. Recognised: a loop body with exactly two global->shared copies X, Y (tile row
// from the loop variable and names bound before the loop), every read of X's shared tile before
// the first read of Y's, and no other shared buffer written in the loop. Then (docs/translation.md):
//   1 stage:  X(j) waited for at its first read, then Y(j) issued; after the last read of X(j),
//             Y(j) waited for and X(j+1) issued (it lands during the softmax and the second GEMM).
//   S stages: X(j+S-1), Y(j+S-1) issued at the first wait of iteration j.
// Otherwise each copy is issued at its statement after a barrier and waited for at its first read.
void Lowering::analyze_schedule() {
  if (!loop_) return;
  const auto& body = loop_->loop.body;
  std::vector<size_t> copies;
  for (size_t i = 0; i < body.size(); ++i)
    if (is_g2s(body[i])) copies.push_back(i);
  auto reads = [&](const tl::Stmt& s, const std::string& n) {
    if (is_s2r(s) && s.copy.name == n) return true;
    auto it = gemms_.find(&s);
    if (it == gemms_.end()) return false;
    return it->second.b_name == n || (it->second.a_name == n && it->second.a != GemmPlan::A::Register &&
                                      it->second.a != GemmPlan::A::Resident);
  };
  auto fail = [&](const std::string& why) { sched_.why_not = why; };
  if (copies.size() != 2) return fail("the loop does not copy exactly two tiles (K and V) from global memory");
  Schedule s;
  s.x_copy = copies[0];
  s.y_copy = copies[1];
  s.x = body[s.x_copy].copy.name;
  s.y = body[s.y_copy].copy.name;
  if (s.x == s.y) return fail("both copies fill the same shared tile");
  // coordinates may use the loop variable and names bound before the loop
  std::set<std::string> inner;
  for (const auto& b : body)
    if (b.kind == tl::Stmt::Kind::Let) inner.insert(b.let.name);
  for (size_t ci : copies) {
    std::set<std::string> names;
    for (const auto& e : body[ci].copy.coord) collect_names(e, names);
    for (const auto& n : names)
      if (inner.count(n)) return fail("a copy coordinate uses `" + n + "`, which is bound inside the loop");
  }
  long ax = -1, lx = -1, ay = -1;
  long first_shared_read = -1;
  for (size_t i = 0; i < body.size(); ++i) {
    bool any = false;
    for (const auto& [n, b] : shared_) {
      (void)b;
      if (reads(body[i], n)) any = true;
    }
    if (any && first_shared_read < 0) first_shared_read = long(i);
    if (reads(body[i], s.x)) {
      if (ax < 0) ax = long(i);
      lx = long(i);
    }
    if (reads(body[i], s.y) && ay < 0) ay = long(i);
  }
  if (ax < 0 || ay < 0) return fail("a copied tile is not read in the loop");
  if (!(long(s.x_copy) < ax && long(s.y_copy) < ay)) return fail("a tile is read before its copy in the loop body");
  if (!(lx < ay)) return fail(s.x + " is still read after the first read of " + s.y);
  if (first_shared_read != ax) return fail("a shared tile is read before " + s.x + " in the loop body");
  s.a_pos = size_t(ax);
  s.b_pos = stages_ == 1 ? size_t(lx) : size_t(ay);
  // the prologue goes after the last top-level global->shared copy before the loop, if the loop
  // bounds and the copy coordinates only use names bound by then
  std::set<std::string> needed;
  collect_names(loop_->loop.lo, needed);
  collect_names(loop_->loop.hi, needed);
  for (size_t ci : copies)
    for (const auto& e : body[ci].copy.coord) collect_names(e, needed);
  std::set<std::string> bound;
  for (const auto& [n, f] : runtime_dims_) bound.insert(n);
  for (const auto& [n, v] : env_) bound.insert(n);
  for (const char* n : {"window_left", "window_right", "softcap"}) bound.insert(n);  // launch builtins: bound at entry
  long after = -1;
  for (size_t i = 0; i < loop_index_; ++i) {
    const auto& st = prog_.stmts[i];
    if (st.kind == tl::Stmt::Kind::Grid)
      for (const auto& it : st.grid.items) bound.insert(it.var);
    if (st.kind == tl::Stmt::Kind::Let) bound.insert(st.let.name);
    if (is_g2s(st)) after = long(i);
  }
  bool all_bound = true;
  for (const auto& n : needed)
    if (n != loop_->loop.var && !bound.count(n)) all_bound = false;
  // names bound after `after` (a Let between the copy and the loop) force the prologue to the loop
  if (after >= 0) {
    std::set<std::string> late;
    for (size_t i = size_t(after) + 1; i < loop_index_; ++i)
      if (prog_.stmts[i].kind == tl::Stmt::Kind::Let) late.insert(prog_.stmts[i].let.name);
    for (const auto& n : needed)
      if (late.count(n)) all_bound = false;
  }
  s.prologue_after = all_bound ? after : -1;
  s.pipelined = true;
  sched_ = s;
  shared_[s.x].staged = true;
  shared_[s.y].staged = true;
}

bool Lowering::analyze_smem() {
  int64_t total = 0;
  for (const auto& n : shared_order_) {
    SharedBuf& b = shared_[n];
    b.bytes = int64_t(b.rows) * b.cols * dtype_bytes(b.dtype) * (b.staged ? stages_ : 1);
    total += (b.bytes + 127) / 128 * 128;
  }
  // fp8: the B operand of a GEMM stated without ^T (V) gets a V^T buffer.
  if (arch_.fp8) {
    for (const auto& [st, g] : gemms_) {
      (void)st;
      if (g.b_kmajor) continue;
      if (!vt_buffer_.empty() && vt_buffer_ != g.b_name) {
        diags_.error("XL0301", st->loc, "two fp8 GEMMs with untransposed B operands are not lowered", "");
        return false;
      }
      vt_buffer_ = g.b_name;
      const SharedBuf& b = shared_[g.b_name];
      total += (int64_t(b.rows) * b.cols + 127) / 128 * 128;
    }
  }
  smem_stage_bytes_ = int64_t(tile_m_) * d_v_ * dtype_bytes(out_);
  smem_bytes_ = std::max(total, smem_stage_bytes_);
  if (target_.smem_per_block > 0 && smem_bytes_ > target_.smem_per_block) {
    diags_.error("XL0202", const_stmt_ ? const_stmt_->loc : support::SrcLoc{},
                 "the tiles need " + std::to_string(smem_bytes_ / 1024) + " KB of shared memory; " + target_.name + " allows " +
                     std::to_string(target_.smem_per_block / 1024) + " KB per block",
                 "shrink BM, BN or STAGES (qattn plan --candidates lists configurations that fit)");
    return false;
  }
  return true;
}

}  // namespace qattn::backend::detail
