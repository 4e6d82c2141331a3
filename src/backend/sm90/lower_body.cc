// sm90 lowering, the consumer's statements (see lower.h): each TL statement -> ops on register
// tensors of one consumer warpgroup, in program order, before any scheduling.
//   - register tensors: a TL register Allocate or a Compute's `and get X` (tile, row vector or
//     converted A operand), named after CuTe's convention (tSrS, tOrO, rm, ...)
//   - a positive scalar Multiply of a score tile is *pending*: it travels with the tile and is
//     applied by its consumers (RowMax scales the row result, a row-broadcast Subtract is one FFMA)
//   - a row sum whose uses in the loop are only sums and rescales stays *partial* (each thread's
//     share; quad_sum once, at its first other use after the loop)
// Every statement the sm90 kernel cannot lower is an XL diagnostic naming it.
#include <algorithm>
#include <optional>

#include "backend/sm90/lower.h"
#include "hw/sm90_policy.h"
#include "tl/eval.h"
#include "tl/printer.h"

namespace qattn::backend::sm90 {

namespace {

bool is_name(const tl::Operand& o) { return o.expr.kind == tl::Expr::Kind::Name; }

std::string mul(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return "(" + a + ") * (" + b + ")";
}

}  // namespace

kir::Reg* Lower::reg(const std::string& name) {
  for (auto& r : k_.sm90.regs)
    if (r.name == name) return &r;
  return nullptr;
}

kir::Reg& Lower::define(const std::string& name, kir::RegKind kind, int cols, tl::DType dt, const tl::Stmt& s) {
  if (kir::Reg* r = reg(name)) return *r;
  kir::Reg r;
  r.name = name;
  r.kind = kind;
  r.cols = cols;
  r.dtype = dt;
  r.tl = ref(s);
  r.partial = partial_.count(name) > 0;
  k_.sm90.regs.push_back(r);
  return k_.sm90.regs.back();
}

// The C++ name of a register tensor: tiles tXrY (X: the family, the accumulator of the GEMM it
// belongs to), row vectors rY.
static std::string cpp_reg_name(const std::string& family, const std::string& name, kir::RegKind kind) {
  if (kind == kir::RegKind::Rows) return "r" + name;
  return "t" + family + "r" + name;
}

// Register Allocates, then every statement before, in and after the loop, lowered in order.
bool Lower::lower_registers() {
  find_partial_rows();
  // families: a GEMM's accumulator names its family; element-wise results inherit their operand's;
  // a converted tile that feeds a GEMM as A belongs to that GEMM's family
  std::map<std::string, std::string> family;
  auto walk_family = [&](const tl::Stmt& s) {
    if (s.kind != tl::Stmt::Kind::Compute) return;
    const auto& c = s.compute;
    if (c.op == "GEMM") {
      const std::string t = c.target;
      family[t] = t;
      if (!c.operands.empty() && is_name(c.operands[0])) family[c.operands[0].expr.name] = t;  // its A operand (Pc)
      return;
    }
    if (c.result == tl::ComputeStmt::Result::Get && !c.operands.empty() && is_name(c.operands[0]) && !family.count(c.target)) {
      auto it = family.find(c.operands[0].expr.name);
      if (it != family.end()) family[c.target] = it->second;
    }
  };
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& s : prog_.stmts) {
      walk_family(s);
      if (s.kind == tl::Stmt::Kind::For)
        for (const auto& b : s.loop.body) walk_family(b);
    }
  auto fam = [&](const std::string& n) { auto it = family.find(n); return it == family.end() ? n : it->second; };

  std::vector<BodyStmt> before;
  for (const auto& s : prog_.stmts) {
    if (&s == f_.loop_) {
      nonneg_ = nonneg_at_loop(nonneg_);
      for (const auto& b : s.loop.body) {
        BodyStmt bs;
        if (!lower_statement(b, true, bs)) return false;
        nonneg_step(b, nonneg_);
        body_.push_back(std::move(bs));
      }
      nonneg_ = nonneg_at_loop(nonneg_);  // after the loop: what holds at every iteration's end
      continue;
    }
    if (s.kind == tl::Stmt::Kind::Merge) {
      if (!lower_merge(s)) return false;
      continue;
    }
    const bool after_loop = &s > f_.loop_;
    BodyStmt bs;
    if (!lower_statement(s, false, bs)) return false;
    nonneg_step(s, nonneg_);
    if (bs.ops.empty() && bs.waits.empty() && bs.releases.empty()) continue;
    (after_loop ? after_ : before).push_back(std::move(bs));
  }
  for (auto& b : before) {
    if (b.gemm) return error("XL0301", b.stmt->loc, "a GEMM before the loop is not lowered on sm90", "GEMMs belong to the key loop");
    for (auto& op : b.ops) k_.sm90.before.push_back(op);
    for (const auto& w : b.waits) pre_waits_.push_back({w, b.stmt});
  }
  for (auto& r : k_.sm90.regs) r.cpp = cpp_reg_name(fam(r.name), names_.ident(r.name), r.kind);
  return true;
}

// Row vectors that may stay partial (per-thread shares of a row sum): every write is a RowSum, a
// zero init, a Rescale, or an Add of partials; every read inside the loop is one of those writes.
void Lower::find_partial_rows() {
  std::vector<const tl::Stmt*> all, loop;
  for (const auto& s : prog_.stmts) {
    if (&s == f_.loop_) {
      for (const auto& b : s.loop.body) {
        all.push_back(&b);
        loop.push_back(&b);
      }
      continue;
    }
    all.push_back(&s);
  }
  // candidates: every row vector (1-D register Allocates, RowMax/RowSum results, row-shaped results);
  // the rules below remove those with another kind of write or read
  std::set<std::string> cand;
  for (const auto* s : all) {
    if (s->kind == tl::Stmt::Kind::Allocate && s->alloc.space == tl::Space::Register && s->alloc.shape.size() == 1)
      cand.insert(s->alloc.name);
    if (s->kind == tl::Stmt::Kind::Compute && s->compute.op == "RowSum" && s->compute.result != tl::ComputeStmt::Result::InPlace)
      cand.insert(s->compute.target);
    if (s->kind == tl::Stmt::Kind::Compute && s->compute.op == "Add" && s->compute.result == tl::ComputeStmt::Result::Get)
      cand.insert(s->compute.target);
  }
  auto target_of = [](const tl::ComputeStmt& c) {
    return c.result == tl::ComputeStmt::Result::InPlace ? (c.operands.empty() || !is_name(c.operands[0]) ? std::string() : c.operands[0].expr.name)
                                                        : c.target;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = cand.begin(); it != cand.end();) {
      const std::string t = *it;
      bool ok = true;
      for (const auto* s : all) {
        if (s->kind == tl::Stmt::Kind::Allocate && s->alloc.name == t && s->alloc.space == tl::Space::Register) {
          if (s->alloc.init && !(s->alloc.init->kind == tl::Expr::Kind::Number && s->alloc.init->value == 0)) ok = false;
          continue;
        }
        if (s->kind != tl::Stmt::Kind::Compute) continue;
        const auto& c = s->compute;
        if (target_of(c) != t) continue;
        if (c.op == "RowSum" || c.op == "Rescale") continue;
        if (c.op == "Add" && c.operands.size() == 2 && is_name(c.operands[0]) && is_name(c.operands[1]) &&
            cand.count(c.operands[0].expr.name) && cand.count(c.operands[1].expr.name))
          continue;
        ok = false;
      }
      for (const auto* s : loop) {
        if (!ok || s->kind != tl::Stmt::Kind::Compute) continue;
        const auto& c = s->compute;
        bool reads = false;
        for (const auto& o : c.operands)
          if (is_name(o) && o.expr.name == t) reads = true;
        if (!reads) continue;
        const std::string tgt = target_of(c);
        if (c.op == "Rescale" && c.operands.size() == 2 && is_name(c.operands[0]) && c.operands[0].expr.name == t &&
            !(is_name(c.operands[1]) && c.operands[1].expr.name == t))
          continue;
        if (c.op == "Add" && cand.count(tgt)) continue;
        ok = false;
      }
      if (!ok) {
        it = cand.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
  }
  partial_ = cand;
}

// Which tensors are >= 0 (never -inf) after statement s, given those before it (flow-sensitive, in
// program order): Exp/Exp2 results; a RowSum, Normalize, Add, Rescale or Max of such tensors; a
// positive scalar Multiply of one; a non-negative init. TL's guarded Add (-inf + x = -inf) is a
// plain add where both operands are >= 0.
void Lower::nonneg_step(const tl::Stmt& s, std::set<std::string>& nn) const {
  if (s.kind == tl::Stmt::Kind::Allocate && s.alloc.space == tl::Space::Register) {
    if (s.alloc.init && s.alloc.init->kind == tl::Expr::Kind::Number && s.alloc.init->value >= 0) nn.insert(s.alloc.name);
    else nn.erase(s.alloc.name);
    return;
  }
  if (s.kind != tl::Stmt::Kind::Compute) return;
  const auto& c = s.compute;
  auto named = [&](size_t i) { return i < c.operands.size() && is_name(c.operands[i]) ? c.operands[i].expr.name : std::string(); };
  const std::string a = named(0), b = named(1);
  const std::string t = c.result == tl::ComputeStmt::Result::InPlace ? a : c.target;
  if (t.empty()) return;
  const bool ka = nn.count(a) > 0, kb = nn.count(b) > 0;
  bool ok = false;
  if (c.op == "Exp" || c.op == "Exp2") ok = true;
  else if (c.op == "RowSum" || c.op == "Normalize") ok = ka && (c.result != tl::ComputeStmt::Result::Accumulate || nn.count(t));
  else if (c.op == "Add" || c.op == "Rescale" || c.op == "Max") ok = ka && kb;
  else if (c.op == "Multiply") ok = ka && b.empty() && c.operands.size() == 2 && is_positive_scalar(c.operands[1].expr);
  if (ok) nn.insert(t);
  else nn.erase(t);
}

// The facts at the top of the loop body: those before the loop that also hold at its end.
std::set<std::string> Lower::nonneg_at_loop(const std::set<std::string>& before) const {
  std::set<std::string> entry = before;
  for (int pass = 0; pass < 8; ++pass) {
    std::set<std::string> nn = entry;
    for (const auto& b : f_.loop_->loop.body) nonneg_step(b, nn);
    std::set<std::string> next;
    for (const auto& x : entry)
      if (nn.count(x)) next.insert(x);
    if (next == entry) break;
    entry = next;
  }
  return entry;
}

// A partial row vector read where its whole value is needed: made whole in place (after the loop).
bool Lower::whole(const std::string& rows, bool in_loop, const tl::Stmt& s, BodyStmt& out) {
  if (!partial_.count(rows) || whole_now_.count(rows)) return true;
  if (in_loop)
    return error("XL0301", s.loc, "internal: the partial row sum " + rows + " is read whole inside the loop", "report this");
  kir::Op q;
  q.kind = kir::Op::Kind::QuadSum;
  q.tl = ref(s);
  q.a = rows;
  out.ops.push_back(q);
  if (k_.roles.split_columns) {  // and the other warpgroups' shares of the row
    kir::Op x = q;
    x.kind = kir::Op::Kind::RowCombine;
    x.op = "Add";
    out.ops.push_back(x);
  }
  whole_now_.insert(rows);
  return true;
}

std::string Lower::take_pending(const std::string& tile) {
  auto it = pending_.find(tile);
  if (it == pending_.end()) return "";
  std::string f = it->second;
  pending_.erase(it);
  return f;
}

bool Lower::materialize(const std::string& tile, const tl::Stmt& s, BodyStmt& out) {
  const std::string f = take_pending(tile);
  if (f.empty()) return true;
  kir::Op op;
  op.kind = kir::Op::Kind::Scale;
  op.tl = ref(s);
  op.a = op.result = tile;
  op.scalar_cpp = f;
  out.ops.push_back(op);
  out.reads.insert(tile);
  out.writes.insert(tile);
  return true;
}

bool Lower::lower_statement(const tl::Stmt& s, bool in_loop, BodyStmt& out) {
  out.stmt = &s;
  in_loop_ = in_loop;
  for (const auto& a : s.attrs) {
    if (a.key == "wait" && a.value && a.value->kind == tl::Expr::Kind::Name) out.waits.push_back(a.value->name);
    if (a.key == "release" && a.value && a.value->kind == tl::Expr::Kind::Name) out.releases.push_back(a.value->name);
  }
  kir::Op st;
  st.kind = kir::Op::Kind::Stmt;
  st.tl = ref(s);
  switch (s.kind) {
    case tl::Stmt::Kind::Allocate: {
      const auto& a = s.alloc;
      if (a.space != tl::Space::Register) return true;
      if (in_loop) return error("XL0301", s.loc, "a register Allocate inside the loop is not lowered on sm90", "allocate before the loop");
      const int bm = k_.sm90.bm;
      if (a.shape.size() == 2) {
        tl::Env env;
        env.ints = f_.env_;
        auto r = tl::eval_int(a.shape[0], env, nullptr), c = tl::eval_int(a.shape[1], env, nullptr);
        const int split = k_.roles.split();
        if (!r || !c || *r != bm || *c % split != 0 || !hw::sm90::wgmma_n_ok(int(*c / split)))
          return error("XL0202", s.loc, "register tile " + a.name + " is not (BM, N) with N a multiple of 8 up to 256" +
                                            (split > 1 ? " per warpgroup (split columns: N / " + std::to_string(split) + ")" : std::string()),
                       "a consumer warpgroup holds 64 rows of a (BM, N) wgmma accumulator");
        if (a.dtype && *a.dtype != tl::DType::F32)
          return error("XL0303", s.loc, "register tile " + a.name + " in " + tl::to_string(*a.dtype) + " is not lowered on sm90",
                       "the wgmma form reads Q, K and V from shared memory: register tiles are fp32 accumulators");
        kir::Reg& rg = define(a.name, kir::RegKind::Tile, int(*c / split), tl::DType::F32, s);  // this warpgroup's columns
        rg.allocated = true;
        if (a.init) rg.init_cpp = kernel_names_.float_expr(*a.init);
      } else if (a.shape.size() == 1) {
        kir::Reg& rg = define(a.name, kir::RegKind::Rows, 1, tl::DType::F32, s);
        rg.allocated = true;
        if (a.init) rg.init_cpp = kernel_names_.float_expr(*a.init);
      } else {
        return error("XL0301", s.loc, "a register tensor of " + std::to_string(a.shape.size()) + " dims is not lowered", "");
      }
      return true;
    }
    case tl::Stmt::Kind::Copy: {
      const auto& c = s.copy;
      if (c.from == tl::Space::Global && c.to == tl::Space::Shared) {
        out.copies.push_back(c.name);
        return true;  // the producer's (lower_loads)
      }
      if (c.from == tl::Space::Register && c.to == tl::Space::Global) {
        out.ops.push_back(st);
        return lower_store(s, out);
      }
      if (c.from == tl::Space::Register && c.to == tl::Space::Shared && k_.roles.split_columns) {
        // split columns: each warpgroup's columns of P into the shared tile the second GEMM reads
        kir::Reg* r = reg(c.name);
        const kir::SharedBuf* b = buf(c.name);
        if (!r || r->kind != kir::RegKind::OperandA || !b || !b->from_registers || b->rows != k_.sm90.bm ||
            b->cols != r->cols * k_.roles.consumer_wg || !c.tile.empty())
          return error("XL0303", s.loc, "the Copy of " + c.name + " to shared memory is not a converted score tile into a (BM, BN) tile",
                       "`Compute Convert P and get Pc bf16`, `Allocate Pc in shared (BM, BN) bf16`, then `Copy Pc from register to shared`");
        out.ops.push_back(st);
        kir::Op op;
        op.kind = kir::Op::Kind::StoreShared;
        op.tl = ref(s);
        op.a = c.name;
        op.buffer = c.name;
        out.ops.push_back(op);
        out.reads.insert(c.name);
        out.writes.insert("shared " + c.name);
        return true;
      }
      return error("XL0303", s.loc, std::string("Copy from ") + tl::to_string(c.from) + " to " + tl::to_string(c.to) + " is not lowered on sm90",
                   "the wgmma form reads GEMM operands from shared memory: no register copies of Q, K, V");
    }
    case tl::Stmt::Kind::Compute:
      out.ops.push_back(st);
      return lower_compute(s, out);
    case tl::Stmt::Kind::Reshape: {
      kir::Reg* r = reg(s.reshape.name);
      if (!r || r->kind != kir::RegKind::OperandA)
        return error("XL0301", s.loc, "Reshape of " + s.reshape.name + ", which is not a converted tile",
                     "`Compute Convert P and get Pc bf16`, then `Reshape Pc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)`");
      st.tl.text += "  (free: the wgmma accumulator layout is the register-A layout)";
      out.ops.push_back(st);
      return true;
    }
    default: return true;  // header statements, comments, declarations
  }
}

bool Lower::lower_compute(const tl::Stmt& s, BodyStmt& out) {
  const auto& c = s.compute;
  const bool in_loop = in_loop_;
  if (c.op == "GEMM") return lower_gemm(s, out);
  if (c.op == "Mask" || c.op == "Modify") return lower_score_op(s, out);
  auto opname = [&](size_t i) { return i < c.operands.size() && is_name(c.operands[i]) ? c.operands[i].expr.name : std::string(); };
  const std::string a = opname(0);
  if (a.empty() || !reg(a)) return error("XL0301", s.loc, "`" + c.op + "` of something that is not a register tensor", "Computes work on register tensors");
  // copies: define() grows the register list and would leave pointers into it dangling
  const kir::Reg a_reg = *reg(a);
  const kir::Reg* ra = &a_reg;
  const bool get = c.result == tl::ComputeStmt::Result::Get;
  const bool acc = c.result == tl::ComputeStmt::Result::Accumulate;
  const std::string target = get || acc ? c.target : a;
  kir::Op op;
  op.tl = ref(s);
  op.a = a;
  op.result = target;
  auto finish = [&](kir::Op o) {
    out.reads.insert(o.a);
    if (!o.b.empty()) out.reads.insert(o.b);
    if (acc) out.reads.insert(o.result);
    out.writes.insert(o.result);
    // facts about the written tensor no longer hold; `Max a, b and get z` makes z an upper bound
    upper_.erase(o.result);
    for (auto& [z, below] : upper_) below.erase(o.result);
    if (c.op == "Max" && get && !o.b.empty()) upper_[o.result] = {o.a, o.b};
    out.ops.push_back(o);
    return true;
  };
  if (c.op == "RowMax" || c.op == "RowSum") {
    if (ra->kind != kir::RegKind::Tile) return error("XL0301", s.loc, c.op + " of a row vector", "RowMax/RowSum reduce a (BM, N) tile to (BM)");
    if (!(get || acc)) return error("XL0301", s.loc, c.op + " needs `and get X` or `and accumulate X`", "");
    if (acc && (!reg(target) || reg(target)->kind != kir::RegKind::Rows))
      return error("XL0301", s.loc, "`and accumulate " + target + "`: not a row vector", "");
    define(target, kir::RegKind::Rows, 1, tl::DType::F32, s);
    op.kind = c.op == "RowMax" ? kir::Op::Kind::RowMax : kir::Op::Kind::RowSum;
    op.accumulate = acc;
    op.partial = c.op == "RowSum" && partial_.count(target) && !whole_now_.count(target);
    op.xscale_cpp = pending_.count(a) ? pending_[a] : "";
    if (acc && op.kind == kir::Op::Kind::RowMax && !whole(target, in_loop, s, out)) return false;
    if (!k_.roles.split_columns || op.partial) return finish(op);
    // split columns: the row's other columns are the other warpgroups'
    if (acc) return error("XL0301", s.loc, "`and accumulate` on " + c.op + " with split columns is not lowered", "`and get X`, then combine");
    finish(op);
    kir::Op x;
    x.kind = kir::Op::Kind::RowCombine;
    x.tl = ref(s);
    x.a = target;
    x.op = c.op == "RowMax" ? "Max" : "Add";
    out.ops.push_back(x);
    return true;
  }
  if (c.op == "Exp" || c.op == "Exp2" || c.op == "Log" || c.op == "Log2") {
    if (acc) return error("XL0301", s.loc, "`and accumulate` on " + c.op, "");
    if (ra->kind == kir::RegKind::Rows && !whole(a, in_loop, s, out)) return false;
    define(target, ra->kind, ra->cols, tl::DType::F32, s);
    op.kind = kir::Op::Kind::Map;
    op.op = op_functor(c.op);
    op.xscale_cpp = target == a ? take_pending(a) : (pending_.count(a) ? pending_[a] : "");
    return finish(op);
  }
  if (c.op == "Rescale" || c.op == "Normalize") {
    const std::string b = opname(1);
    kir::Reg* rb = b.empty() ? nullptr : reg(b);
    if (!rb || rb->kind != kir::RegKind::Rows || get || acc)
      return error("XL0301", s.loc, c.op + " needs a tensor and a row vector (in place)", "`Compute " + c.op + " O, l`");
    if (!whole(b, in_loop, s, out)) return false;
    op.kind = c.op == "Rescale" ? kir::Op::Kind::Rescale : kir::Op::Kind::Normalize;
    op.b = b;
    if (c.op == "Normalize") {
      if (ra->kind != kir::RegKind::Tile) return error("XL0301", s.loc, "Normalize of a row vector", "`Compute Normalize O, l`");
      if (!materialize(a, s, out)) return false;
    }
    // Rescale keeps a pending factor (it commutes) and a partial row vector's shares
    return finish(op);
  }
  if (c.op == "Convert") {
    if (ra->kind != kir::RegKind::Tile || !get || !c.target_dtype)
      return error("XL0301", s.loc, "Convert of something that is not a tile into a named 16-bit tile", "`Compute Convert P and get Pc bf16`");
    if (*c.target_dtype != k_.elem)
      return error("XL0102", s.loc, std::string("Convert to ") + tl::to_string(*c.target_dtype) + " is not lowered on sm90",
                   std::string("the P V wgmma reads P in the operands' dtype: `and get ") + target + " " + tl::to_string(k_.elem) + "`");
    define(target, kir::RegKind::OperandA, ra->cols, *c.target_dtype, s);
    op.kind = kir::Op::Kind::Convert;
    op.xscale_cpp = pending_.count(a) ? pending_[a] : "";
    return finish(op);
  }
  const char* fn = op_functor(c.op);
  if (!fn || c.operands.size() != 2) return error("XL0301", s.loc, "`Compute " + c.op + "` is not lowered on sm90", "");
  op.op = fn;
  std::string b = opname(1);
  std::optional<kir::Reg> b_reg;
  if (!b.empty() && reg(b)) b_reg = *reg(b);
  const kir::Reg* rb = b_reg ? &*b_reg : nullptr;
  if (!rb) b.clear();  // a scalar: a number, a builtin (ln2, softmax_scale), a Dim or Const
  if (acc) return error("XL0301", s.loc, "`and accumulate` on " + c.op, "");
  // A positive scalar Multiply of a computed tile waits for its consumers (pending).
  const bool computed_tile = ra->kind == kir::RegKind::Tile && ra->init_cpp.empty() && ra->tl.line &&
                             std::none_of(prog_.stmts.begin(), prog_.stmts.end(), [&](const tl::Stmt& x) {
                               return x.kind == tl::Stmt::Kind::Allocate && x.alloc.name == a && x.alloc.space == tl::Space::Register;
                             });
  if (c.op == "Multiply" && !rb && target == a && computed_tile && is_positive_scalar(c.operands[1].expr)) {
    // the factor is loop-invariant: computed once per work tile, under a name
    std::string name = "scale_" + names_.ident(a);
    for (int n = 2; std::any_of(k_.sm90.scalars.begin(), k_.sm90.scalars.end(), [&](const kir::Sm90::Scalar& x) { return x.cpp == name; }); ++n)
      name = "scale_" + names_.ident(a) + "_" + std::to_string(n);
    if (k_.sm90.scalars.size() >= 4)
      return error("XL0301", s.loc, "more than 4 scale factors are not lowered on sm90", "combine the Multiply statements");
    // computed by the host at launch (p = the C ABI's parameters): kernel constants, not registers
    CppNames host = names_;
    host.scoped = {"softmax_scale"};
    host.scope_prefix = "p.";
    std::string prev;
    for (const auto& x : k_.sm90.scalars)
      if (pending_.count(a) && x.cpp == pending_[a]) prev = x.value_cpp;
    k_.sm90.scalars.push_back({name, mul(prev, host.float_expr(c.operands[1].expr)), ref(s)});
    pending_[a] = name;
    // the tile's later readers see the factor: the statement orders like a write of the tile
    out.reads.insert(a);
    out.writes.insert(a);
    out.ops.back().tl.text += "  (a positive factor: applied by the tile's consumers)";
    return true;
  }
  const bool partial_add = c.op == "Add" && rb && ra->kind == kir::RegKind::Rows && rb->kind == kir::RegKind::Rows &&
                           partial_.count(a) && !whole_now_.count(a) && partial_.count(b) && !whole_now_.count(b) &&
                           partial_.count(target) && !whole_now_.count(target);
  if (!partial_add) {
    if (ra->kind == kir::RegKind::Rows && !whole(a, in_loop, s, out)) return false;
    if (rb && rb->kind == kir::RegKind::Rows && !whole(b, in_loop, s, out)) return false;
    if (partial_.count(target) && !whole_now_.count(target)) {
      if (in_loop) return error("XL0301", s.loc, "internal: the partial row sum " + target + " is written whole in the loop", "report this");
      whole_now_.insert(target);
    }
  }
  if (rb && rb->kind == kir::RegKind::Tile && !materialize(b, s, out)) return false;
  op.xscale_cpp = target == a ? take_pending(a) : (pending_.count(a) ? pending_[a] : "");
  // TL's -inf rules need no guard where the operands cannot be -inf (Add), or where b bounds a
  // from above (Subtract: b = -inf only when a = -inf)
  if (c.op == "Add" && rb && nonneg_.count(a) && nonneg_.count(b)) op.op = "AddNonNeg";
  if (c.op == "Subtract" && rb && upper_.count(b) && upper_[b].count(a)) op.op = "SubMax";
  if (c.op == "Max" && rb && upper_.count(b) && upper_[b].count(a)) op.op = "MaxOfUpper";
  if (!rb) {
    op.kind = kir::Op::Kind::EwScalar;
    op.scalar_cpp = kernel_names_.float_expr(c.operands[1].expr);
    define(target, ra->kind, ra->cols, tl::DType::F32, s);
  } else if (ra->kind == rb->kind) {
    if (ra->kind == kir::RegKind::Tile && ra->cols != rb->cols)
      return error("XL0301", s.loc, "tiles of different columns", "");
    op.kind = kir::Op::Kind::Ew;
    op.b = b;
    define(target, ra->kind, ra->cols, tl::DType::F32, s);
  } else if (ra->kind == kir::RegKind::Tile && rb->kind == kir::RegKind::Rows) {
    op.kind = kir::Op::Kind::EwRows;
    op.b = b;
    define(target, kir::RegKind::Tile, ra->cols, tl::DType::F32, s);
  } else {
    return error("XL0301", s.loc, "`Compute " + c.op + "` of a row vector and a tile is not lowered",
                 "write the tile first: `Compute " + c.op + " " + b + ", " + a + " ...`");
  }
  if (reg(target)->kind != (op.kind == kir::Op::Kind::EwRows ? kir::RegKind::Tile : ra->kind))
    return error("XL0301", s.loc, "the result " + target + " changes shape", "");
  return finish(op);
}

bool Lower::lower_gemm(const tl::Stmt& s, BodyStmt& out) {
  const auto& c = s.compute;
  if (c.operands.size() != 2 || !is_name(c.operands[0]) || !is_name(c.operands[1]))
    return error("XL0301", s.loc, "GEMM operands must be tensor names", "`Compute GEMM Q, K^T and get S`");
  if (c.result == tl::ComputeStmt::Result::InPlace) return error("XL0301", s.loc, "a GEMM needs `and get C` or `and accumulate C`", "");
  const std::string a = c.operands[0].expr.name, b = c.operands[1].expr.name, t = c.target;
  const int split = k_.roles.split();
  const kir::SharedBuf* bb = buf(b);
  if (bb && !bb->view_of.empty()) {
    // O += P V with V a view of K's slot (split columns): A is the P tile the warpgroups staged, B read MN-major
    const kir::SharedBuf* ab = buf(a);
    const kir::SharedBuf* base = buf(bb->view_of);
    if (!ab || !ab->from_registers || c.operands[0].transposed || c.operands[1].transposed || ab->rows != k_.sm90.bm ||
        ab->cols != bb->rows || c.result != tl::ComputeStmt::Result::Accumulate)
      return error("XL0303", s.loc, "a GEMM reading the view " + b + " is lowered as `Compute GEMM Pc, " + b + " and accumulate O` with Pc staged in shared memory",
                   "`Allocate Pc in shared (BM, BN) bf16`, `Copy Pc from register to shared`, then the GEMM");
    kir::Op op;
    op.kind = kir::Op::Kind::GemmSS;
    op.b_mn = true;
    op.tl = ref(s);
    op.a = a;
    op.b = op.buffer = base->name;  // the ring whose slot the view reads
    op.result = t;
    op.accumulate = true;
    op.group = groups_++;
    op.a_rows = ab->rows;
    op.b_rows = bb->rows;
    op.k_dim = ab->cols;
    const int n = bb->cols / split;
    op.atom = wgmma_atom(n, k_.elem, false, true);
    kir::Reg* rt = reg(t);
    if (!hw::sm90::wgmma_n_ok(n) || !rt || rt->kind != kir::RegKind::Tile || rt->cols != n)
      return error("XL0301", s.loc, "`and accumulate " + t + "`: not a (BM, " + std::to_string(bb->cols) + ") register tile", "allocate it before the loop");
    if (!materialize(t, s, out)) return false;
    out.reads.insert(t);
    out.reads.insert(base->name);
    out.reads.insert("shared " + a);
    out.writes.insert(t);
    out.gemm = true;
    out.ops.push_back(op);
    return true;
  }
  if (!bb || !bb->ring)
    return error("XL0303", c.operands[1].loc, "GEMM operand " + b + " is not a shared buffer the producer fills", "B operands are read from shared memory (TMA rings)");
  if (c.operands[0].transposed)
    return error("XL0303", c.operands[0].loc, "a transposed A operand (" + a + "^T) is not lowered", "store the tensor as (M, K) and write it without ^T");
  kir::Op op;
  op.tl = ref(s);
  op.a = a;
  op.b = b;
  op.buffer = b;
  op.result = t;
  op.accumulate = c.result == tl::ComputeStmt::Result::Accumulate;
  op.group = groups_++;
  int n = 0;
  if (const kir::SharedBuf* ab = buf(a)) {
    // A from shared memory: S = Q K^T (both K-major)
    if (!c.operands[1].transposed)
      return error("XL0303", c.operands[1].loc, "a shared x shared GEMM with B untransposed is not lowered", "`Compute GEMM Q, K^T and get S`");
    if (ab->rows != k_.sm90.bm || ab->cols != bb->cols)
      return error("XL0202", s.loc, "GEMM " + a + " (" + std::to_string(ab->rows) + ", " + std::to_string(ab->cols) + ") x " + b + "^T does not tile",
                   "A is (BM, K) and B (N, K)");
    n = bb->rows / split;
    op.kind = kir::Op::Kind::GemmSS;
    op.a_rows = ab->rows;
    op.b_rows = bb->rows;
    op.k_dim = ab->cols_padded;
    op.atom = wgmma_atom(n, k_.elem, false, false);
  } else if (kir::Reg* ra = reg(a); ra && ra->kind == kir::RegKind::OperandA) {
    if (split > 1)
      return error("XL0303", c.operands[0].loc, "with split columns each warpgroup holds part of " + a + "'s columns: the GEMM reads it from shared memory",
                   "`Allocate " + a + " in shared (BM, BN) bf16`, `Copy " + a + " from register to shared`, and V as a view of K");
    if (c.operands[1].transposed)
      return error("XL0303", c.operands[1].loc, "a register x shared GEMM with B transposed is not lowered", "`Compute GEMM Pc, V and accumulate O`");
    if (ra->cols != bb->rows)
      return error("XL0202", s.loc, "GEMM " + a + " (BM, " + std::to_string(ra->cols) + ") x " + b + " (" + std::to_string(bb->rows) + ", ...) does not match",
                   "A's columns are B's rows");
    n = bb->cols;
    op.kind = kir::Op::Kind::GemmRS;
    op.b_rows = bb->rows;
    op.atom = wgmma_atom(n, k_.elem, false, true);
    out.reads.insert(a);
  } else {
    return error("XL0303", c.operands[0].loc, "A operand " + a + " is neither a shared buffer nor a converted register tile",
                 "`Compute GEMM Q, K^T and get S` (shared) or `Compute GEMM Pc, V and accumulate O` (Pc converted and reshaped)");
  }
  if (!hw::sm90::wgmma_n_ok(n)) return error("XL0202", s.loc, "a GEMM of N = " + std::to_string(n) + " has no wgmma", "N is a multiple of 8 up to 256");
  if (op.accumulate) {
    kir::Reg* rt = reg(t);
    if (!rt || rt->kind != kir::RegKind::Tile || rt->cols != n)
      return error("XL0301", s.loc, "`and accumulate " + t + "`: not a (BM, " + std::to_string(n) + ") register tile", "allocate it before the loop");
    if (!materialize(t, s, out)) return false;
    out.reads.insert(t);
  } else {
    define(t, kir::RegKind::Tile, n, tl::DType::F32, s);
    pending_.erase(t);
  }
  out.reads.insert(b);
  if (buf(a)) out.reads.insert(a);
  out.writes.insert(t);
  out.gemm = true;
  out.ops.push_back(op);
  return true;
}

bool Lower::lower_score_op(const tl::Stmt& s, BodyStmt& out) {
  const auto& c = s.compute;
  const std::string x = c.operands.size() == 1 && is_name(c.operands[0]) ? c.operands[0].expr.name : "";
  kir::Reg* rx = x.empty() ? nullptr : reg(x);
  if (!rx || rx->kind != kir::RegKind::Tile || c.at.size() != 2)
    return error("XL0301", s.loc, c.op + " of something that is not a score tile", "`Compute " + c.op + " S at [m_block, j] with ...`");
  if (tl::print_expr(c.at[0]) != k_.scope.grid[0].tl)
    return error("XL0301", s.loc, "the score tile's row coordinate is not the work tile's " + k_.scope.grid[0].tl,
                 "the consumer's rows are those of the Grid's first axis: `at [" + k_.scope.grid[0].tl + ", j]`");
  if (rx->cols * k_.roles.split() != k_.sm90.bn)
    return error("XL0301", s.loc, c.op + " of a tile of " + std::to_string(rx->cols) + " columns", "the score tile has BN columns (one key tile)");
  kir::Op op;
  op.tl = ref(s);
  op.a = op.result = x;
  op.coord_cpp = kernel_names_.int_expr(c.at[1]);
  if (c.op == "Modify") {
    auto v = info_.variants.find(c.mask.name);
    if (c.mask.kind != tl::MaskSpec::Kind::Named || v == info_.variants.end() || v->second.is_mask)
      return error("XL0301", s.loc, "`" + c.mask.name + "` is not a Score declaration", "declare `Score " + c.mask.name + " = ...`");
    op.kind = kir::Op::Kind::Modify;
    op.op = c.mask.name;
    op.xscale_cpp = take_pending(x);
  } else {
    if (c.mask.kind == tl::MaskSpec::Kind::None) {
      out.ops.back().tl.text += "  (no mask: nothing to do)";
      return true;
    }
    op.kind = kir::Op::Kind::Mask;
    op.op = c.mask.kind == tl::MaskSpec::Kind::Named ? c.mask.name : tl::to_string(c.mask.kind);
    // a pending positive factor commutes with -inf: it stays pending
  }
  out.reads.insert(x);
  out.writes.insert(x);
  out.ops.push_back(op);
  return true;
}

bool Lower::lower_store(const tl::Stmt& s, BodyStmt& out) {
  const auto& c = s.copy;
  kir::Reg* r = reg(c.name);
  if (!r) return error("XL0301", s.loc, c.name + " has no register tensor", "");
  auto first_axis = [&]() { return !c.coord.empty() && tl::print_expr(c.coord[0]) == k_.scope.grid[0].tl; };
  kir::Op op;
  op.tl = ref(s);
  op.a = c.name;
  for (const auto& st : prog_.stmts)
    if (st.kind == tl::Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && st.alloc.name == c.name &&
        st.alloc.offset.size() == 2) {
      op.batch_cpp = kernel_names_.int_expr(st.alloc.offset[0]);
      op.head_cpp = kernel_names_.int_expr(st.alloc.offset[1]);
    } else if (st.kind == tl::Stmt::Kind::Allocate && st.alloc.space == tl::Space::Global && st.alloc.name == c.name &&
               st.alloc.offset.size() == 3 && k_.launch.split) {
      // split keys: part s of sequence b is entry b * splits + s of O's and LSE's batch (ABI 8)
      tl::Expr splits, mul, add;
      splits.kind = tl::Expr::Kind::Name;
      splits.name = "splits";
      mul.kind = add.kind = tl::Expr::Kind::Binary;
      mul.op = "*";
      mul.args = {st.alloc.offset[0], splits};
      add.op = "+";
      add.args = {mul, st.alloc.offset[1]};
      op.batch_cpp = kernel_names_.int_expr(add);
      // ragged queries: the parts' rows follow one another, (splits, total_q, ...): part s is entry s
      if (!k_.scope.q_start_cpp.empty()) op.batch_cpp = kernel_names_.int_expr(st.alloc.offset[1]);
      op.head_cpp = kernel_names_.int_expr(st.alloc.offset[2]);
    }
  if (op.head_cpp.empty())
    return error("XL0301", s.loc, "the global " + c.name + " has no `with offset [batch, head]`", "");
  if (c.name == "O") {
    if (r->kind != kir::RegKind::Tile || r->cols * k_.roles.split() != k_.d_v || !first_axis() ||
        c.coord.size() != 2)
      return error("XL0301", s.loc, "the store of O is not the work tile's (BM, d_v) rows",
                   "`Copy O (BM, d) in coordinate [" + k_.scope.grid[0].tl + ", 0] from register to global`");
    if (!materialize(c.name, s, out)) return false;
    op.kind = kir::Op::Kind::StoreO;
    op.buffer = "O";
  } else if (c.name == "LSE") {
    if (r->kind != kir::RegKind::Rows || !first_axis())
      return error("XL0301", s.loc, "the store of LSE is not the work tile's rows", "`Copy LSE (BM) in coordinate [" + k_.scope.grid[0].tl + "] from register to global`");
    if (!whole(c.name, false, s, out)) return false;
    op.kind = kir::Op::Kind::StoreRows;
    k_.sm90.lse_global = "LSE";
  } else {
    return error("XL0301", s.loc, "only O and LSE are stored to global memory", "");
  }
  out.reads.insert(c.name);
  out.ops.push_back(op);
  return true;
}

}  // namespace qattn::backend::sm90
