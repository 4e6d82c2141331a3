// Backward programs: the element-wise, row and conversion Computes and the Reshape (lower_impl.h);
// the GEMMs: lower.cc (mma.sync) and wgmma.cc (Hopper).
#include "backend/bwd/lower_impl.h"

namespace qattn::backend::bwd::detail {
using tl::Stmt;

bool Lower::is_tensor(const tl::Operand& o) const {
  return o.expr.kind == tl::Expr::Kind::Name && (regs_.count(o.expr.name) || shared_.count(o.expr.name));
}

void Lower::compute(Out& w, const Stmt& s) {
  const auto& c = s.compute;
  w.line(ref(s));
  if (c.op == "GEMM") return gemm(w, s);
  if (c.op == "Mask") return mask(w, s);
  if (c.op == "Modify" || c.op == "Derivative") return score_op(w, s);
  if (c.op == "Gradient") return gradient(w, s);
  const std::string x = c.operands[0].expr.name;
  if (!regs_.count(x)) {
    fail("XL0303", s.loc, "'" + x + "' has no register tile here", "");
    return;
  }
  RegBuf& rx = regs_[x];
  // an `{at_use}` vector: scaled in place by a constant (folded into its reads) or read by column
  for (size_t k = 0; k < c.operands.size(); ++k) {
    const auto& o = c.operands[k];
    if (o.expr.kind != tl::Expr::Kind::Name || !regs_.count(o.expr.name) || !regs_.at(o.expr.name).at_use) continue;
    const bool scale = k == 0 && c.op == "Multiply" && c.result == tl::ComputeStmt::Result::InPlace && c.operands.size() == 2 &&
                       !is_tensor(c.operands[1]);
    const bool by_col = k == 1 && o.transposed && c.operands.size() == 2 && c.op != "GEMM";
    if (!scale && !by_col) {
      fail("XL0301", o.loc.line ? o.loc : s.loc, "'" + o.expr.name + "' is `{at_use}`: it is read by column (`" + o.expr.name +
                                                   "^T`) or scaled in place by a constant, nothing else",
           "remove `{at_use}` from its Allocate");
      return;
    }
    if (!regs_.at(o.expr.name).at_use_loaded) {  // its values are the ring slot's of this iteration only
      fail("XL0301", o.loc.line ? o.loc : s.loc, "'" + o.expr.name + "' is `{at_use}`: it is used before its `Copy " + o.expr.name +
                                                   " from shared to register` in this iteration of the loop (or outside the loop)",
           "copy it from its shared ring in the loop body before it is used, or remove `{at_use}`");
      return;
    }
    if (scale) {
      RegBuf& v = regs_[o.expr.name];
      v.at_use_scale = (v.at_use_scale.empty() ? "" : v.at_use_scale + " * ") + "(" + cfloat(c.operands[1].expr) + ")";
      w.line("// (folded into the reads of " + o.expr.name + ")");
      return;
    }
  }
  if (c.target.size() && regs_.count(c.target) && regs_.at(c.target).at_use) {
    fail("XL0301", s.loc, "'" + c.target + "' is `{at_use}`: nothing writes it but its Copy from shared memory", "remove `{at_use}`");
    return;
  }
  // the result: in place, a new tensor (get) or an existing one (accumulate)
  auto target = [&](int rows, int cols, const std::string& like) -> RegBuf* {
    if (c.result == tl::ComputeStmt::Result::InPlace) return &rx;
    if (c.result == tl::ComputeStmt::Result::Accumulate) return rg(c.target, s);
    RegBuf r;
    r.var = "r" + id(c.target);
    r.rows = rows;
    r.cols = cols;
    r.dtype = c.target_dtype.value_or(tl::DType::F32);
    r.wm = rx.wm;  // the first operand's layout
    r.layout = rx.layout;
    regs_[c.target] = r;
    if (!like.empty()) w.line("Tensor " + r.var + " = make_fragment_like<float>(" + like + ");");
    return &regs_[c.target];
  };
  if (c.op == "Convert") {
    const tl::DType dt = c.target_dtype.value_or(tl::DType::F32);
    RegBuf r;
    r.var = "r" + id(c.target);
    r.rows = rx.rows;
    r.cols = rx.cols;
    r.dtype = dt;
    r.wm = rx.wm;
    r.layout = rx.layout;
    regs_[c.target] = r;
    w.line("Tensor " + r.var + " = qattn::convert<" + (dt == tl::DType::F32 ? std::string("float") : std::string("Element")) + ">(" +
           rx.var + ");");
    return;
  }
  if (c.op == "RowSum" || c.op == "RowMax") {
    const bool accumulate = c.result == tl::ComputeStmt::Result::Accumulate;
    if (!rx.layout.empty()) {
      fail("XL0301", s.loc, "a row reduction of '" + x + "', whose warpgroups hold halves of its columns, is not lowered",
           "reduce a tile that a GEMM split along its rows made");
      return;
    }
    RegBuf* z;
    if (accumulate) {
      z = rg(c.target, s);
      if (!z) return;
    } else {
      RegBuf r;
      r.var = "r" + id(c.target);
      r.rows = rx.rows;
      r.wm = rx.wm;
      regs_[c.target] = r;
      z = &regs_[c.target];
      w.line("Tensor " + z->var + " = qattn::rows_for<" + std::to_string(rx.rows) + ">(" + mma(rx.rows, rx.wm) + ");");
    }
    if (!same_rows(rx, *z, s)) return;
    if (warps_n(rx.rows, rx.wm) == 1) {
      w.line(std::string("qattn::") + (c.op == "RowSum" ? "row_sum<" : "row_max<") + (accumulate ? "true" : "false") + ">(" + rx.var +
             ", " + z->var + ");");
      return;
    }
    // the row is spread over warps along N: each warp's partial, then the partials through shared memory
    if (accumulate) {
      fail("XL0301", s.loc, "an accumulating row reduction over a tile split across warps along N is not lowered",
           "reduce into a new vector (`and get`) and add it");
      return;
    }
    row_scratch_bytes_ = std::max<int64_t>(row_scratch_bytes_, (int64_t(warps_n(rx.rows, rx.wm)) * rx.rows * 4 + 127) / 128 * 128);
    if (auto cu = col_use_.find(c.target); cu != col_use_.end() && !row_use_.count(c.target) && cu->second.second == rx.rows) {
      // read only by column (`Z^T`) of a (CR, rows) tile: the partials meet straight in its columns
      const auto [cr, cc] = cu->second;
      const std::string part = z->var + "_part";
      w.line("Tensor " + part + " = make_fragment_like(" + z->var + ");  // each warp's partial");
      w.line(std::string("qattn::") + (c.op == "RowSum" ? "row_sum<" : "row_max<") + "false>(" + rx.var + ", " + part + ");");
      z->var += "_cols";
      z->col_rows = cr, z->col_cols = cc;
      w.line("Tensor " + z->var + " = qattn::cols_for<" + std::to_string(cr) + ", " + std::to_string(cc) + ">(" + mma(cr) + ");  // " +
             c.target + " by column of a (" + std::to_string(cr) + ", " + std::to_string(cc) + ") tile");
      w.line("qattn::rows_across_warps_to_cols<" + std::to_string(rx.rows) + ", " + std::to_string(warps_m(rx.rows, rx.wm)) + ", " +
             std::to_string(warps_n(rx.rows, rx.wm)) + ", " + (c.op == "RowMax" ? "true" : "false") + ", " + std::to_string(cr) + ">(" +
             mma(rx.rows, rx.wm) + ", " + part + ", " + mma(cr) + ", " + z->var + ", reinterpret_cast<float*>(smem + kSmemRowScratch), tid);");
      return;
    }
    w.line(std::string("qattn::") + (c.op == "RowSum" ? "row_sum<" : "row_max<") + "false>(" + rx.var + ", " + z->var + ");");
    w.line("qattn::rows_across_warps<" + std::to_string(rx.rows) + ", " + std::to_string(warps_m(rx.rows, rx.wm)) + ", " +
           std::to_string(warps_n(rx.rows, rx.wm)) + ", " + (c.op == "RowMax" ? "true" : "false") + ">(" + mma(rx.rows, rx.wm) + ", " +
           z->var + ", reinterpret_cast<float*>(smem + kSmemRowScratch), tid);  // " + std::to_string(warps_n(rx.rows, rx.wm)) +
           " warps per row");
    return;
  }
  if (c.op == "Exp" || c.op == "Exp2" || c.op == "Log" || c.op == "Log2") {
    RegBuf* z = target(rx.rows, rx.cols, rx.var);
    if (!z) return;
    w.line("qattn::map<qattn::op::" + c.op + ">(" + rx.var + ", " + z->var + ");");
    return;
  }
  if (c.op == "Rescale" || c.op == "Normalize") {
    const auto& y = c.operands[1];
    if (!is_tensor(y)) {
      if (c.op == "Rescale") w.line("qattn::rescale_scalar(" + rx.var + ", " + cfloat(y.expr) + ");");
      else fail("XL0301", s.loc, "Normalize by a scalar is not lowered", "");
      return;
    }
    const RegBuf* ry = rg(y.expr.name, s);
    if (!ry || !same_rows(rx, *ry, s)) return;
    w.line(std::string("qattn::") + (c.op == "Rescale" ? "rescale(" : "normalize(") + rx.var + ", " + ry->var + ");");
    return;
  }
  const char* fn = op_functor(c.op);
  if (!fn) {
    fail("XL0301", s.loc, "Compute " + c.op + " is not lowered in a backward program", "");
    return;
  }
  const auto& y = c.operands[1];
  RegBuf* z = target(rx.rows, rx.cols, rx.var);
  if (!z) return;
  const std::string op = std::string("qattn::op::") + fn;
  if (!is_tensor(y)) {
    w.line("qattn::ew_scalar<" + op + ">(" + rx.var + ", " + cfloat(y.expr) + ", " + z->var + ");");
    return;
  }
  const RegBuf* ryp = rg(y.expr.name, s);
  if (!ryp) return;
  const RegBuf& ry = *ryp;
  if (y.transposed) {  // `X op Y^T`: Y by column, one value per column of X
    if (!same_rows(rx, *z, s)) return;
    if (mma_of(rx) != mma(rx.rows)) {
      fail("XL0202", s.loc, "'" + x + "' is not laid out with its warps along the rows: a column vector of it is not lowered", "");
      return;
    }
    if (ry.at_use) {
      if (ry.col_rows != rx.rows || ry.col_cols != rx.cols) {
        fail("XL0202", s.loc, "'" + y.expr.name + "^T' is read by column of a (" + std::to_string(ry.col_rows) + ", " +
                                  std::to_string(ry.col_cols) + ") tile elsewhere; '" + x + "' is (" + std::to_string(rx.rows) + ", " +
                                  std::to_string(rx.cols) + ")", "");
        return;
      }
      w.line("qattn::ew_cols_smem<" + op + ", " + std::to_string(rx.rows) + ", " + std::to_string(rx.cols) + ">(" + mma(rx.rows) + ", " +
             rx.var + ", " + shared_.at(y.expr.name).var + ", " + z->var + ", tid" +
             (ry.at_use_scale.empty() ? "" : ", " + ry.at_use_scale) + ");  // " + y.expr.name + " read from shared (`{at_use}`)");
      return;
    }
    std::string cv = ry.var;
    if (!ry.col_rows) {  // a row vector of another tile (D from RowSum): into this tile's columns, through shared memory
      cv = ry.var + "_cols";
      row_scratch_bytes_ = std::max<int64_t>(row_scratch_bytes_, (int64_t(ry.rows) * 4 + 127) / 128 * 128);
      w.line("Tensor " + cv + " = qattn::cols_for<" + std::to_string(rx.rows) + ", " + std::to_string(rx.cols) + ">(" + mma(rx.rows) + ");");
      w.line("qattn::rows_to_cols<" + std::to_string(ry.rows) + ", " + std::to_string(rx.rows) + ">(" + mma(ry.rows, ry.wm) + ", " + ry.var +
             ", " + mma(rx.rows) + ", " + cv + ", reinterpret_cast<float*>(smem + kSmemRowScratch), tid);  // " + y.expr.name +
             " by row -> by column");
    } else if (ry.col_rows != rx.rows || ry.col_cols != rx.cols) {
      fail("XL0202", s.loc, "'" + y.expr.name + "^T' is read by column of a (" + std::to_string(ry.col_rows) + ", " +
                                std::to_string(ry.col_cols) + ") tile elsewhere; '" + x + "' is (" + std::to_string(rx.rows) + ", " +
                                std::to_string(rx.cols) + ")", "");
      return;
    }
    w.line("qattn::ew_cols<" + op + ">(" + rx.var + ", " + cv + ", " + z->var + ");");
    return;
  }
  if (!same_rows(rx, ry, s) || !same_rows(rx, *z, s)) return;
  if (ry.cols == 0 && rx.cols > 0) w.line("qattn::ew_rows<" + op + ">(" + rx.var + ", " + ry.var + ", " + z->var + ");");
  else w.line("qattn::ew<" + op + ">(" + rx.var + ", " + ry.var + ", " + z->var + ");");
}

void Lower::reshape(Out& w, const Stmt& s) {
  w.line(ref(s));
  RegBuf* rp = rg(s.reshape.name, s);
  if (!rp) return;
  RegBuf& r = *rp;
  if (warps_n(r.rows, r.wm) > 1) {
    fail("XL0202", s.loc, "Reshape of " + s.reshape.name + " (" + std::to_string(r.rows) + " rows) to an A operand: its tile is split over " +
                              std::to_string(warps_n(r.rows, r.wm)) + " warps along the columns, so no warp holds whole rows of it",
         "copy it to shared memory and back (`Copy " + s.reshape.name + " from register to shared`, `Copy " + s.reshape.name +
             " from shared to register`) instead of the Reshape, or give its tile all WARPS along the rows (BM = 16 * WARPS)");
    return;
  }
  r.from_shared = false;
  if (wg_) {  // the converted accumulator is this warpgroup's wgmma A fragment as it is
    if (!r.layout.empty()) {
      fail("XL0202", s.loc, "Reshape of " + s.reshape.name + ": its warpgroups hold halves of its columns, not whole rows", "");
      return;
    }
    r.a_view = r.var;
    w.line("// (the wgmma A fragment is the converted accumulator itself: no data moves)");
    return;
  }
  r.a_view = r.var + "_a";
  w.line("Tensor " + r.a_view + " = make_tensor(" + r.var + ".data(), " + arch_.reshape_fn + "(" + r.var +
         ".layout()));  // (MMA, MMA_M, MMA_K): the A-operand view, no data moves");
}

}  // namespace qattn::backend::bwd::detail
