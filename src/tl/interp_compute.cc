// TL interpreter, part 3: the Compute statement. Every op computes its values in fp64 and stores
// them through store_result, which rounds to the destination's dtype in Storage mode.
// -inf rules (docs/tl.md): -inf - -inf = -inf and -inf + inf = -inf, so a masked value stays
// masked; Max and RowMax propagate NaN (an uninitialised register poisons what reads it).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tl/interp_impl.h"

namespace qattn::tl::interp {
namespace {

double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  return a > b ? a : b;
}
double plus(double a, double b) { return a + b; }

enum class Bin { Add, Sub, Mul, Div, Max };

double apply(Bin op, double a, double b) {
  switch (op) {
    case Bin::Add:
      if (std::isinf(a) && std::isinf(b) && a != b) return -kInf;  // -inf + inf = -inf
      return a + b;
    case Bin::Sub:
      if (a == -kInf && b == -kInf) return -kInf;  // -inf - -inf = -inf
      return a - b;
    case Bin::Mul: return a * b;
    case Bin::Div: return a / b;
    case Bin::Max: return nan_max(a, b);
  }
  return kNaN;
}

}  // namespace

bool Machine::store_result(const Stmt& s, Buffer* x, const std::vector<int64_t>& shape, std::vector<double> vals,
                           double (*acc)(double, double)) {
  const auto& c = s.compute;
  SrcLoc tloc = c.target_loc.line ? c.target_loc : s.loc;
  switch (c.result) {
    case ComputeStmt::Result::InPlace: {
      if (!x || x->shape != shape)
        return error("TL0901", s.loc, c.op + " has no in-place form here",
                     "write `and get NAME` (or `and accumulate NAME`) to name the result");
      for (size_t i = 0; i < vals.size(); ++i) x->data[i] = rnd(x->dtype, vals[i]);
      return true;
    }
    case ComputeStmt::Result::Get: {
      if (c.target.empty()) return error("TL0901", s.loc, "`and get` without a name");
      Buffer b;
      b.shape = shape;
      b.dtype = c.target_dtype.value_or(DType::F32);  // `and get P16 fp16`
      for (double& v : vals) v = rnd(b.dtype, v);
      b.data = std::move(vals);
      recharge(b);
      bind_buffer(c.target, kRegister, std::move(b));
      return true;
    }
    case ComputeStmt::Result::Accumulate: {
      if (!acc)
        return error("TL0903", s.loc, "`and accumulate` is not defined for " + c.op,
                     "accumulate works with GEMM (+=), RowSum (+=) and RowMax (max)");
      auto it = slots_.find(c.target);
      if (it == slots_.end() || !it->second.buf[kRegister])
        return error("TL0901", tloc, "accumulator '" + c.target + "' has no register buffer here",
                     "allocate it in register (with init) before accumulating into it");
      Buffer& t = *it->second.buf[kRegister];
      if (t.shape != shape)
        return error("TL0901", tloc,
                     "accumulator '" + c.target + "' is " + shape_str(t.shape) + " but " + c.op + " produces " + shape_str(shape));
      for (size_t i = 0; i < vals.size(); ++i) t.data[i] = rnd(t.dtype, acc(t.data[i], vals[i]));
      return true;
    }
  }
  return false;
}

// A 2-D buffer transposed in place (its shape swapped): a score tile held with keys along its rows
// (`Compute Mask St^T at [..]`) is masked / modified as the (queries, keys) tile it is the transpose of.
static bool is_binary_op(const std::string& op) {
  return op == "Add" || op == "Subtract" || op == "Multiply" || op == "Divide" || op == "Max";
}

static void transpose_in_place(Buffer& b) {
  const int64_t r = b.rows(), c = b.cols();
  std::vector<double> t(b.data.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[size_t(j * r + i)] = b.data[size_t(i * c + j)];
  b.data.swap(t);
  b.shape = {c, r};
}

bool Machine::exec_compute(const Stmt& s) {
  const auto& op = s.compute.op;
  const bool tile_op = op == "Mask" || op == "Modify" || op == "Derivative" || op == "Gradient";
  for (size_t i = 0; i < s.compute.operands.size(); ++i)
    if (s.compute.operands[i].transposed && op != "GEMM" && !tile_op && !(i == 1 && is_binary_op(op)))
      return error("TL0901", s.compute.operands[i].loc.line ? s.compute.operands[i].loc : s.loc,
                   "^T on an operand of " + op, "^T is for GEMM operands, the vector of an element-wise op, and the tile of Mask / Modify / Derivative");
  if (tile_op && !s.compute.operands.empty() && s.compute.operands[0].transposed) {
    // the tile (and a Derivative's scores) as the (queries, keys) tile, then back
    std::vector<Buffer*> bufs;
    for (const auto& o : s.compute.operands) {
      if (o.expr.kind != Expr::Kind::Name) continue;
      Buffer* b = tensor(o.expr.name);
      if (!b || b->shape.size() != 2)
        return error("TL0901", o.loc.line ? o.loc : s.loc, op + " of '" + o.expr.name + "^T' needs a 2-D register tile");
      if (std::find(bufs.begin(), bufs.end(), b) == bufs.end()) bufs.push_back(b);
    }
    for (Buffer* b : bufs) transpose_in_place(*b);
    const bool ok = op == "Mask" ? (s.compute.mask.kind == MaskSpec::Kind::Named ? compute_named_mask(s) : compute_mask(s))
                  : op == "Modify" ? compute_modify(s) : op == "Gradient" ? compute_gradient(s) : compute_derivative(s);
    for (Buffer* b : bufs) transpose_in_place(*b);
    return ok;
  }
  if (op == "GEMM") return compute_gemm(s);
  // Every other op makes one temporary the size of an operand (its result) before storing it.
  double temp = 0;
  for (const auto& o : s.compute.operands)
    if (o.expr.kind == Expr::Kind::Name)
      if (const Buffer* b = tensor(o.expr.name)) temp = std::max(temp, double(b->data.size()));
  if (!fits(temp * sizeof(double), s.loc, "the result of " + op)) return false;
  if (op == "Add" || op == "Subtract" || op == "Multiply" || op == "Divide" || op == "Max") return compute_binary(s);
  if (op == "Exp" || op == "Exp2" || op == "Log" || op == "Log2" || op == "Convert") return compute_unary(s);
  if (op == "RowMax" || op == "RowSum") return compute_reduce(s);
  if (op == "Rescale" || op == "Normalize") return compute_rowwise(s);
  if (op == "Mask" && s.compute.mask.kind == MaskSpec::Kind::Named) return compute_named_mask(s);
  if (op == "Mask") return compute_mask(s);
  if (op == "Modify") return compute_modify(s);
  if (op == "Derivative") return compute_derivative(s);
  if (op == "Gradient") return compute_gradient(s);
  return error("TL0903", s.loc, "unknown Compute op '" + op + "'");
}


bool Machine::compute_gemm(const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.size() != 2) return error("TL0901", s.loc, "GEMM takes 2 operands, found " + std::to_string(c.operands.size()));
  Buffer* a = nullptr;
  if (c.operands[0].transposed && c.operands[0].expr.kind == Expr::Kind::Name) {
    // A transposed A operand is read from shared memory (docs/tl.md, GEMM): a register tile is
    // staged there first (`Copy P from register to shared`).
    const std::string& n = c.operands[0].expr.name;
    auto it = slots_.find(n);
    if (it == slots_.end() || !it->second.buf[kShared])
      return error("TL0901", c.operands[0].loc.line ? c.operands[0].loc : s.loc,
                   "'" + n + "^T', a transposed A operand, is read from shared memory, and '" + n + "' has no shared buffer here",
                   "allocate `" + n + " in shared` and copy it there first (`Copy " + n + " from register to shared`)");
    a = &*it->second.buf[kShared];
    if (!shared_read_ok(n, a, s.loc)) return false;
  } else {
    a = operand_tensor(c.operands[0], s, "the first operand");
  }
  if (!a) return false;
  Buffer* b = operand_tensor(c.operands[1], s, "the second operand");
  if (!b) return false;
  if (a->shape.size() != 2 || b->shape.size() != 2)
    return error("TL0901", s.loc, "GEMM operands must be 2-D tiles, found " + shape_str(a->shape) + " and " + shape_str(b->shape));
  bool ta = c.operands[0].transposed, tb = c.operands[1].transposed;
  int64_t m = ta ? a->cols() : a->rows(), ka = ta ? a->rows() : a->cols();
  int64_t kb = tb ? b->cols() : b->rows(), n = tb ? b->rows() : b->cols();
  if (ka != kb) {
    auto nm = [&](int i) { return c.operands[i].expr.name + (c.operands[i].transposed ? "^T" : ""); };
    return error("TL0901", s.loc,
                 "GEMM operand shapes disagree: " + nm(0) + " is (" + std::to_string(m) + ", " + std::to_string(ka) + ") and " +
                     nm(1) + " is (" + std::to_string(kb) + ", " + std::to_string(n) + ")",
                 "the inner dimensions must agree; transposes are written explicitly (Q, K^T)");
  }
  if (c.result == ComputeStmt::Result::InPlace)
    return error("TL0901", s.loc, "GEMM needs `and get C` or `and accumulate C`");
  if (!count(double(m) * double(n) * double(ka), s.loc)) return false;
  if (double(m) * double(n) > double(kMaxBufferElems))
    return error("TL0902", s.loc, "the GEMM result (" + std::to_string(m) + ", " + std::to_string(n) + ") is too large for the interpreter",
                 "tiles hold at most " + std::to_string(kMaxBufferElems) + " elements");
  if (!fits(double(m) * double(n) * sizeof(double), s.loc, "the GEMM result")) return false;
  std::vector<double> vals(size_t(m * n), 0.0);
  const double* ad = a->data.data();
  const double* bd = b->data.data();
  int64_t ac = a->cols(), bc = b->cols();
  if (tb) {
    // B^T (Q K^T): each element a dot product of two contiguous rows, summed over t in order, as
    // the loop below sums it (the same roundings, so the same values), without a strided walk
    std::vector<double> acol(ta ? size_t(ka) : 0);
    for (int64_t i = 0; i < m; ++i) {
      const double* arow = ad + i * ac;
      if (ta) {
        for (int64_t t = 0; t < ka; ++t) acol[size_t(t)] = ad[t * ac + i];
        arow = acol.data();
      }
      double* row = vals.data() + i * n;
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) {  // four independent sums at once (one sum alone waits on each add)
        const double *b0 = bd + j * bc, *b1 = b0 + bc, *b2 = b1 + bc, *b3 = b2 + bc;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t t = 0; t < ka; ++t) {
          const double x = arow[t];
          s0 += x * b0[t];
          s1 += x * b1[t];
          s2 += x * b2[t];
          s3 += x * b3[t];
        }
        row[j] = s0, row[j + 1] = s1, row[j + 2] = s2, row[j + 3] = s3;
      }
      for (; j < n; ++j) {
        const double* brow = bd + j * bc;
        double acc = 0;
        for (int64_t t = 0; t < ka; ++t) acc += arow[t] * brow[t];
        row[j] = acc;
      }
    }
    return store_result(s, nullptr, {m, n}, std::move(vals), plus);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t t = 0; t < ka; ++t) {
      double av = ta ? ad[t * ac + i] : ad[i * ac + t];
      double* row = vals.data() + i * n;
      const double* brow = bd + t * bc;
      for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
    }
  return store_result(s, nullptr, {m, n}, std::move(vals), plus);
}

bool Machine::compute_binary(const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.size() != 2)
    return error("TL0901", s.loc, c.op + " takes 2 operands, found " + std::to_string(c.operands.size()));
  Bin op = c.op == "Add" ? Bin::Add : c.op == "Subtract" ? Bin::Sub : c.op == "Multiply" ? Bin::Mul
         : c.op == "Divide" ? Bin::Div : Bin::Max;
  Buffer* x = operand_tensor(c.operands[0], s, "the first operand");
  if (!x) return false;
  std::vector<double> vals(x->data.size());
  if (!count(double(vals.size()), s.loc)) return false;
  if (is_tensor(c.operands[1])) {
    Buffer* y = tensor(c.operands[1].expr.name);
    if (!shared_read_ok(c.operands[1].expr.name, y, c.operands[1].loc.line ? c.operands[1].loc : s.loc)) return false;
    if (c.operands[1].transposed) {  // a column vector: one value per column, read down the rows
      if (x->shape.size() != 2 || y->shape.size() != 1 || y->shape[0] != x->cols())
        return error("TL0901", s.loc,
                     c.op + " " + c.operands[0].expr.name + ", " + c.operands[1].expr.name + "^T: a column vector of " +
                         std::to_string(x->shape.size() == 2 ? x->cols() : 0) + " values needs a 2-D first operand; they are " +
                         shape_str(x->shape) + " and " + shape_str(y->shape));
      const size_t cols = size_t(x->cols());
      for (size_t i = 0; i < vals.size(); ++i) vals[i] = apply(op, x->data[i], y->data[i % cols]);
    } else if (y->shape == x->shape) {
      for (size_t i = 0; i < vals.size(); ++i) vals[i] = apply(op, x->data[i], y->data[i]);
    } else if (x->shape.size() == 2 && y->shape.size() == 1 && y->shape[0] == x->rows()) {
      int64_t cols = x->cols();
      for (size_t i = 0; i < vals.size(); ++i) vals[i] = apply(op, x->data[i], y->data[i / size_t(cols)]);
    } else {
      return error("TL0901", s.loc,
                   c.op + " shapes disagree: " + c.operands[0].expr.name + " is " + shape_str(x->shape) + " and " +
                       c.operands[1].expr.name + " is " + shape_str(y->shape),
                   "the second operand must have the first's shape, be a row vector with one value per row, or be a scalar");
    }
  } else {
    auto y = ev_scalar(c.operands[1].expr);
    if (!y) return false;
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = apply(op, x->data[i], *y);
  }
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

bool Machine::compute_unary(const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.size() != 1)
    return error("TL0901", s.loc, c.op + " takes 1 operand, found " + std::to_string(c.operands.size()));
  Buffer* x = operand_tensor(c.operands[0], s, "the operand");
  if (!x) return false;
  if (!count(double(x->data.size()), s.loc)) return false;
  std::vector<double> vals(x->data);
  if (c.op == "Exp") for (double& v : vals) v = std::exp(v);
  else if (c.op == "Exp2") for (double& v : vals) v = std::exp2(v);
  else if (c.op == "Log") for (double& v : vals) v = std::log(v);
  else if (c.op == "Log2") for (double& v : vals) v = std::log2(v);
  // Convert: the values are unchanged; the store rounds them to the destination's dtype.
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

bool Machine::compute_reduce(const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.size() != 1)
    return error("TL0901", s.loc, c.op + " takes 1 operand, found " + std::to_string(c.operands.size()));
  Buffer* x = operand_tensor(c.operands[0], s, "the operand");
  if (!x) return false;
  if (x->shape.size() != 2)
    return error("TL0901", s.loc, c.op + " reduces the rows of a 2-D tile; '" + c.operands[0].expr.name + "' is " + shape_str(x->shape));
  if (c.result == ComputeStmt::Result::InPlace)
    return error("TL0901", s.loc, c.op + " needs `and get NAME` or `and accumulate NAME`");
  if (!count(double(x->data.size()), s.loc)) return false;
  bool is_max = c.op == "RowMax";
  int64_t rows = x->rows(), cols = x->cols();
  std::vector<double> vals(size_t(rows), is_max ? -kInf : 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double v = x->data[size_t(i * cols + j)];
      vals[i] = is_max ? nan_max(vals[i], v) : vals[i] + v;
    }
  return store_result(s, nullptr, {rows}, std::move(vals), is_max ? nan_max : plus);
}

bool Machine::compute_rowwise(const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.size() != 2)
    return error("TL0901", s.loc, c.op + " takes 2 operands, found " + std::to_string(c.operands.size()));
  Buffer* x = operand_tensor(c.operands[0], s, "the first operand");
  if (!x) return false;
  int64_t rows = x->rows(), cols = x->cols();
  std::vector<double> f(static_cast<size_t>(rows));  // per-row factor (Rescale) or divisor (Normalize)
  if (is_tensor(c.operands[1])) {
    Buffer* a = tensor(c.operands[1].expr.name);
    if (!shared_read_ok(c.operands[1].expr.name, a, c.operands[1].loc.line ? c.operands[1].loc : s.loc)) return false;
    if (a->shape != std::vector<int64_t>{rows})
      return error("TL0901", s.loc,
                   c.op + " needs a row vector of " + std::to_string(rows) + " values; '" + c.operands[1].expr.name +
                       "' is " + shape_str(a->shape));
    f = a->data;
  } else {
    auto v = ev_scalar(c.operands[1].expr);
    if (!v) return false;
    f.assign(size_t(rows), *v);
  }
  if (!count(double(x->data.size()), s.loc)) return false;
  bool norm = c.op == "Normalize";
  std::vector<double> vals(x->data.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      size_t k = size_t(i * cols + j);
      if (norm) vals[k] = f[i] == 0 ? 0.0 : x->data[k] / f[i];  // l = 0: every key masked, row 0
      else vals[k] = x->data[k] * f[i];
    }
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

bool Machine::compute_mask(const Stmt& s) {
  const auto& c = s.compute;
  if (c.operands.size() != 1)
    return error("TL0901", s.loc, "Mask takes 1 operand (the score tile), found " + std::to_string(c.operands.size()));
  Buffer* x = operand_tensor(c.operands[0], s, "the operand");
  if (!x) return false;
  if (x->shape.size() != 2)
    return error("TL0901", s.loc, "Mask needs a 2-D score tile; '" + c.operands[0].expr.name + "' is " + shape_str(x->shape));
  if (c.at.size() != 2)
    return error("TL0901", s.loc, "Mask needs the tile coordinate of the scores: `at [row_tile, col_tile]`");
  auto r = ev_int(c.at[0]);
  auto k = ev_int(c.at[1]);
  if (!r || !k) return false;
  const int64_t lim = int64_t(1) << 31;
  if (*r < -lim || *r > lim || *k < -lim || *k > lim)
    return error("TL0901", s.loc, "Mask tile coordinate out of range");
  spec::AttentionProblem mp = prob_;  // the reference's visible() masks like the kernel's tile mask
  const bool plain = c.mask.kind == MaskSpec::Kind::Bounds || c.mask.kind == MaskSpec::Kind::Named;
  mp.mask = plain ? MaskSpec::Kind::None : c.mask.kind;  // visible() always applies the bounds
  mp.seqlen_k = block_seqlen_k();  // a KV cache's sequence: its own key count
  mp.seqlen_q = block_seqlen_q();  // a ragged batch: the sequence's own query count
  if (c.mask.kind == MaskSpec::Kind::Window) {
    auto wl = ev_int(c.mask.left);
    auto wr = ev_int(c.mask.right);
    if (!wl || !wr) return false;
    if (std::llabs(*wl) > lim || std::llabs(*wr) > lim) return error("TL0901", s.loc, "window bound out of range");
    mp.window_left = *wl;
    mp.window_right = *wr;
  }
  if (!count(double(x->data.size()), s.loc)) return false;
  int64_t rows = x->rows(), cols = x->cols();
  int64_t q0 = *r * rows, k0 = *k * cols;
  std::vector<double> vals(x->data);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (!mp.visible((q0 + i) / pack_, k0 + j)) vals[size_t(i * cols + j)] = -kInf;  // visible() includes bounds; row -> query
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

}  // namespace qattn::tl::interp
