// The row-wise statement lowering (rowwise.h): the row tiling and the statements, in TL order.
#include "backend/rowwise.h"

#include <algorithm>

#include "backend/stmt_header.h"
#include "tl/printer.h"

namespace qattn::backend::rowwise {
namespace {
using tl::Space;
using tl::Stmt;

void walk(const std::vector<Stmt>& body, const std::function<void(const Stmt&)>& fn) {
  for (const auto& s : body) {
    fn(s);
    if (s.kind == Stmt::Kind::For) walk(s.loop.body, fn);
  }
}

}  // namespace

bool Body::fail(const char* code, support::SrcLoc at, const std::string& msg, const std::string& hint) {
  diags_.error(code, at, msg, hint);
  failed_ = true;
  return false;
}

std::optional<int64_t> Body::constant(const tl::Expr& e, support::SrcLoc at, const std::string& what) {
  support::DiagSink quiet(diags_.file());
  auto v = tl::eval_int(e, env_, &quiet);
  if (!v) fail("XL0201", at, what + " `" + tl::print_expr(e) + "` is not a compile-time constant",
               "the rows of a tile and its columns are Consts or fixed Dims (`Const BM = 4`, `Dim d = 128`)");
  return v;
}

std::string Body::tiling_decl() const {
  return "using Tiling = qattn::rows::RowTiling<" + std::to_string(rows_) + ", " + std::to_string(cols_) + ", " + std::to_string(warps_) + ">;";
}

bool Body::tiling(const std::vector<Stmt>& stmts, support::SrcLoc at) {
  walk(stmts, [&](const Stmt& s) {
    if (failed_ || s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Register) return;
    const auto& a = s.alloc;
    if (a.dtype && *a.dtype != tl::DType::F32) {
      fail("XL0102", s.loc, "register tensor " + a.name + " is " + tl::to_string(*a.dtype),
           "the " + kind_ + " computes in fp32: allocate register tensors as fp32");
      return;
    }
    auto r = constant(a.shape[0], s.loc, "the rows of " + a.name);
    if (!r) return;
    if (rows_ == 0) rows_ = *r;
    if (*r != rows_) {
      fail("XL0202", s.loc, "register tensor " + a.name + " has " + std::to_string(*r) + " rows, another " + std::to_string(rows_),
           "every register tile and row vector of a " + kind_ + " program covers the same rows");
      return;
    }
    if (a.shape.size() == 2) {
      auto c = constant(a.shape[1], s.loc, "the columns of " + a.name);
      if (!c) return;
      if (cols_ == 0) cols_ = *c;
      if (*c != cols_)
        fail("XL0202", s.loc, "register tile " + a.name + " has " + std::to_string(*c) + " columns, another " + std::to_string(cols_),
             "every register tile of a " + kind_ + " program has the same columns");
    }
  });
  if (failed_) return false;
  if (rows_ < 1 || cols_ < 1)
    return fail("XL0301", at, "the " + kind_ + " program has no register tile (rows, cols)",
                "compute in a register tile: `Allocate O in register (BM, d) fp32`");
  warps_ = int(std::min<int64_t>(rows_, 4));
  if (auto it = env_.ints.find("WARPS"); it != env_.ints.end()) warps_ = int(it->second);
  if (strip_.rows > 0) {  // (the caller chose rows dividing the TL's)
    if (rows_ % strip_.rows != 0)
      return fail("XL0202", at, "the " + kind_ + "'s tiles of " + std::to_string(rows_) + " rows are not strips of " + std::to_string(strip_.rows),
                  "a number of rows at a time that divides the tile's");
    rows_ = strip_.rows, warps_ = strip_.warps;
  }
  if (warps_ < 1 || warps_ > 16 || rows_ % warps_ != 0 || rows_ > 128)
    return fail("XL0202", at,
                "rows " + std::to_string(rows_) + " over WARPS = " + std::to_string(warps_) + " warps is not lowered",
                "the tile's rows (at most 128) are a multiple of WARPS (1 to 16)");
  if (cols_ % 32 == 0 && (rows_ / warps_) * (cols_ / 32) > 64)
    return fail("XL0202", at,
                "a (" + std::to_string(rows_) + ", " + std::to_string(cols_) + ") tile over " + std::to_string(warps_) +
                    " warps puts " + std::to_string((rows_ / warps_) * (cols_ / 32)) + " values of each tile in every thread",
                "at most 64: fewer rows per block or more warps (`Const WARPS`)");
  if (cols_ % 32 != 0 || cols_ > 1024)
    return fail("XL0202", at, "a tile of " + std::to_string(cols_) + " columns is not lowered",
                "a row is dealt to the 32 lanes of a warp: the columns are a multiple of 32, at most 1024");
  return true;
}

void Body::emit(CudaOut& w, const std::vector<Stmt>& stmts) {
  for (const auto& s : stmts) {
    if (failed_) return;
    switch (s.kind) {
      case Stmt::Kind::Let:
        w.line(tl_ref(s));
        w.line("const int " + id(s.let.name) + " = " + cint(s.let.value) + ";");
        break;
      case Stmt::Kind::Allocate: allocate(w, s); break;
      case Stmt::Kind::Copy: copy(w, s); break;
      case Stmt::Kind::Compute: compute(w, s); break;
      case Stmt::Kind::For: {
        w.line(tl_ref(s));
        long unroll = 1;
        for (const auto& a : s.attrs)  // `{unroll: U}` (TL0415: an integer literal, 1 .. 64)
          if (a.key == "unroll" && a.value && a.value->kind == tl::Expr::Kind::Number && a.value->is_int)
            unroll = std::max(1L, std::min(64L, long(a.value->value)));
        loop(w, s, unroll);
        break;
      }
      case Stmt::Kind::Reshape:
        fail("XL0301", s.loc, "Reshape in a " + kind_ + " program is not lowered", "a " + kind_ + " program has no GEMM operands to re-lay");
        break;
      case Stmt::Kind::Variant:
        fail("XL0301", s.loc, "a Score / Mask declaration in a " + kind_ + " program is not lowered",
             "a row-wise kernel applies no scores: remove the declaration");
        break;
      default: break;
    }
  }
}

// A TL loop. With `{unroll: U}`, blocks of U iterations whose bodies are written out one after the
// other (no branch between them: the loads of the U iterations are in flight together), then the
// remainder in blocks of the powers of two below U, so that no count runs more than about log2(U)
// blocks one after the other (a plain `#pragma unroll U` ran a count below U, e.g. decoding's 4
// parts under U = 8, as a rolled loop, one part's loads at a time).
void Body::loop(CudaOut& w, const Stmt& s, long unroll) {
  const std::string v = id(s.loop.var), lo = cint(s.loop.lo), hi = cint(s.loop.hi);
  auto body = [&](const std::string& value) {
    std::map<std::string, Reg> saved = regs_;  // names bound in the body are forgotten at its end
    std::map<std::string, GlobalView> saved_g = globals_;
    if (!value.empty()) w.line("const int " + v + " = " + value + ";");
    emit(w, s.loop.body);
    regs_ = std::move(saved);
    globals_ = std::move(saved_g);
  };
  if (unroll <= 1) {
    w.open("for (int " + v + " = " + lo + "; " + v + " < " + hi + "; ++" + v + ") {");
    body("");
    w.close();
    return;
  }
  std::vector<long> blocks{unroll};
  for (long b = 1; b < unroll; b *= 2) blocks.insert(blocks.begin() + 1, b);  // U, then the powers of two below it, descending
  // the generated counters' names are reserved (cpp_expr.cc): a TL name never spells them
  const std::string at = "unroll_at_", hi_v = "unroll_hi_", k = "unroll_k_";
  w.open("{  // {unroll: " + std::to_string(unroll) + "}: blocks of " + std::to_string(unroll) + " iterations, the rest in smaller blocks");
  w.line("int " + at + " = " + lo + ";");
  w.line("const int " + hi_v + " = " + hi + ";");
  for (long b : blocks) {
    const std::string n = std::to_string(b);
    w.open("for (; " + at + " + " + n + " <= " + hi_v + "; " + at + " += " + n + ") {");
    if (b == 1) {
      body(at);
    } else if (strip_.hoist_loads) {
      hoisted_block(w, s, at, b);
    } else {
      w.line("#pragma unroll");
      w.open("for (int " + k + " = 0; " + k + " < " + n + "; ++" + k + ") {");
      body(at + " + " + k);
      w.close();
    }
    w.close();
  }
  w.close();
}

// n iterations of the loop `s` from `first` (strip_.hoist_loads): every iteration's loads first, each
// in a scope of its own (the loop variable, its Lets, the global views) into registers declared
// outside it (suffixed by the iteration), then every iteration's other statements (the Lets again).
void Body::hoisted_block(CudaOut& w, const Stmt& s, const std::string& first, long n) {
  std::map<std::string, const Stmt*> loaded;  // tensor -> its register Allocate in the body
  for (const auto& b : s.loop.body)
    if (b.kind == Stmt::Kind::Copy && b.copy.from == Space::Global && b.copy.to == Space::Register) loaded[b.copy.name] = nullptr;
  for (const auto& b : s.loop.body)
    if (b.kind == Stmt::Kind::Allocate && b.alloc.space == Space::Register && loaded.count(b.alloc.name)) loaded[b.alloc.name] = &b;
  auto is_load = [&](const Stmt& b) {
    return (b.kind == Stmt::Kind::Allocate && (b.alloc.space == Space::Global || loaded.count(b.alloc.name))) ||
           (b.kind == Stmt::Kind::Copy && b.copy.from == Space::Global && b.copy.to == Space::Register);
  };
  const std::string v = id(s.loop.var);
  const std::map<std::string, Reg> saved = regs_;
  const std::map<std::string, GlobalView> saved_g = globals_;
  std::vector<std::map<std::string, Reg>> regs(static_cast<size_t>(n));
  for (long i = 0; i < n; ++i) {
    for (const auto& [name, a] : loaded) {
      if (!a) {
        fail("XL0301", s.loc, "the loop loads " + name + " without allocating it in the loop", "allocate the register tile in the loop");
        return;
      }
      w.line(tl_ref(*a) + "  (iteration " + std::to_string(i) + " of the block)");
      const bool vec = a->alloc.shape.size() == 1;
      const std::string var = "r_" + id(name) + "_" + std::to_string(i);
      w.line(std::string("qattn::rows::") + (vec ? "VecOf" : "TileOf") + "<Tiling> " + var + ";");
      regs[size_t(i)][name] = {var, vec};
    }
    w.open("{  // iteration " + std::to_string(i) + "'s loads");
    w.line("const int " + v + " = " + first + " + " + std::to_string(i) + ";");
    for (const auto& [name, r] : regs[size_t(i)]) regs_[name] = r;
    for (const auto& b : s.loop.body)
      if (b.kind == Stmt::Kind::Let || (is_load(b) && !(b.kind == Stmt::Kind::Allocate && b.alloc.space == Space::Register)))
        emit(w, {b});
    w.close();
  }
  for (long i = 0; i < n; ++i) {
    w.open("{  // iteration " + std::to_string(i));
    w.line("[[maybe_unused]] const int " + v + " = " + first + " + " + std::to_string(i) + ";");
    for (const auto& [name, r] : regs[size_t(i)]) regs_[name] = r;
    for (const auto& b : s.loop.body)
      if (b.kind == Stmt::Kind::Let || !is_load(b)) emit(w, {b});
    w.close();
  }
  regs_ = saved;
  globals_ = saved_g;
}

void Body::allocate(CudaOut& w, const Stmt& s) {
  const auto& a = s.alloc;
  if (a.space == Space::Shared) {
    fail("XL0301", s.loc, "shared buffer " + a.name + " in a " + kind_ + " program is not lowered",
         "load the rows straight into registers (`Copy X (BM, d) in coordinate [m, 0] from global to register`)");
    return;
  }
  w.line(tl_ref(s));
  const std::string var = "r_" + id(a.name);
  if (a.space == Space::Register) {
    const bool vec = a.shape.size() == 1;
    w.line(std::string("qattn::rows::") + (vec ? "VecOf" : "TileOf") + "<Tiling> " + var + ";");
    if (a.init) w.line("qattn::rows::fill(" + var + ", " + names_.float_expr(*a.init) + ");");
    regs_[a.name] = {var, vec};
    return;
  }
  auto g = bind_(w, s);  // the kernel's pointer of this block's matrix
  if (!g) {
    failed_ = true;
    return;
  }
  globals_[a.name] = *g;
}

void Body::copy(CudaOut& w, const Stmt& s) {
  const auto& c = s.copy;
  const bool load = c.from == Space::Global && c.to == Space::Register;
  const bool store = c.from == Space::Register && c.to == Space::Global;
  auto g = globals_.find(c.name);
  auto r = regs_.find(c.name);
  if (!(load || store) || g == globals_.end() || r == regs_.end() || c.tile.empty()) {
    fail("XL0301", s.loc, "this Copy of " + c.name + " is not lowered in a " + kind_ + " program",
         "copy tiles between a global view and registers: `Copy X (BM, d) in coordinate [m, 0] from global to register`");
    return;
  }
  if (c.tile.size() == 2) {
    auto col = constant(c.coord[1], s.loc, "the column coordinate");
    if (!col) return;
    if (*col != 0) {
      fail("XL0301", s.loc, "a tile at column coordinate " + std::to_string(*col) + " is not lowered",
           "a " + kind_ + " program's tiles hold whole rows (coordinate [m, 0])");
      return;
    }
  }
  w.line(tl_ref(s));
  std::string row0 = "(" + cint(c.coord[0]) + ") * (" + cint(c.tile[0]) + ")";
  if (!strip_.row_offset.empty()) row0 += " + " + strip_.row_offset;
  const std::string args = g->second.var + ", " + g->second.row_stride + ", " + row0 + ", " + g->second.rows;
  if (r->second.vec)
    w.line(std::string("qattn::rows::") + (load ? "load_vec" : "store_vec") + "<Tiling>(" + r->second.var + ", " + args + ");");
  else
    w.line(std::string("qattn::rows::") + (load ? "load_tile" : "store_tile") + "<Tiling>(" + r->second.var + ", " + args + ");");
}

const Body::Reg* Body::reg(const std::string& n, const Stmt& s) {
  auto it = regs_.find(n);
  if (it != regs_.end()) return &it->second;
  fail("XL0301", s.loc, "'" + n + "' has no register tensor the " + kind_ + " lowering knows here",
       "allocate it in register, or produce it with `and get " + n + "` first");
  return nullptr;
}
bool Body::is_tensor(const tl::Operand& o) const { return o.expr.kind == tl::Expr::Kind::Name && regs_.count(o.expr.name); }

void Body::compute(CudaOut& w, const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.empty() || !is_tensor(c.operands[0])) {
    fail("XL0301", s.loc, "Compute " + c.op + " on something other than a register tensor is not lowered", "");
    return;
  }
  const Reg* x = reg(c.operands[0].expr.name, s);
  if (!x) return;
  w.line(tl_ref(s));
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
  fail("XL0301", s.loc, "Compute " + c.op + " is not lowered in a " + kind_ + " program",
       "a row-wise kernel lowers Add Subtract Multiply Divide Max Exp Exp2 Log Log2 RowMax RowSum Rescale Normalize on fp32 registers");
}

}  // namespace qattn::backend::rowwise
