// TL interpreter, combine programs (`Kernel NAME combine`, docs/tl.md "Combining partial results"):
// the global tensors (O_part and LSE_part, the partial results of `splits` disjoint key sets; O and
// LSE, their merge), random partial results with empty parts, and the verdict against the merge
// computed in fp64 (FP64: relative error; Storage: twice the error of the same merge in fp32
// rounded to O's dtype, plus atol).
#include <cmath>
#include <limits>
#include <sstream>

#include "tl/interp_impl.h"
#include "tl/numerics.h"

namespace qattn::tl::interp {
namespace {

constexpr double kEmptyLse = -std::numeric_limits<double>::infinity();


}  // namespace

void merge_parts(const Global& o, const Global& lse, int64_t batch, Global& mo, Global& mlse) {
  const int64_t parts = o.parts, heads = o.heads, rows = o.view[0], d = o.view[1];
  mo = o;
  mlse = lse;
  mo.parts = mlse.parts = 0;
  mo.data.assign(size_t(batch * heads * rows * d), 0.0);
  mo.written.assign(mo.data.size(), 0);
  mlse.data.assign(size_t(batch * heads * rows), 0.0);
  mlse.written.assign(mlse.data.size(), 0);
  std::vector<const double*> po(static_cast<size_t>(parts), nullptr);
  std::vector<double> pl(static_cast<size_t>(parts), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < rows; ++r) {
        bool lse_written = true;
        for (int64_t s = 0; s < parts; ++s) {
          const size_t mat = size_t((b * parts + s) * heads + h);
          po[size_t(s)] = &o.data[(mat * size_t(rows) + size_t(r)) * size_t(d)];
          const size_t li = mat * size_t(rows) + size_t(r);
          pl[size_t(s)] = lse.data[li];
          lse_written = lse_written && lse.written[li];
        }
        const size_t out = size_t(b * heads + h) * size_t(rows) + size_t(r);
        merge_row(po, pl, d, [](double x) { return x; }, &mo.data[out * size_t(d)], mlse.data[out]);
        mlse.written[out] = lse_written;
        for (int64_t c = 0; c < d; ++c) {  // a part's row counts with its LSE: without it the merge is unknown
          bool w = lse_written;
          for (int64_t s = 0; s < parts && w; ++s)
            w = o.written[(size_t((b * parts + s) * heads + h) * size_t(rows) + size_t(r)) * size_t(d) + size_t(c)];
          mo.written[out * size_t(d) + size_t(c)] = w;
        }
      }
}

bool Machine::setup_globals_combine(const Program& p) {
  auto get = [&](const char* n, int64_t dflt) {
    auto it = header_env_.ints.find(n);
    return it == header_env_.ints.end() ? dflt : it->second;
  };
  prob_.batch = get("batch", 1);
  prob_.heads_q = prob_.heads_kv = get("heads_q", get("heads", 1));
  splits_ = get("splits", 1);
  if (prob_.batch < 1 || prob_.heads_q < 1 || splits_ < 1)
    return error("TL0904", kernel_loc_,
                 "a combine program needs batch, heads_q and splits >= 1 (batch=" + std::to_string(prob_.batch) +
                     ", heads_q=" + std::to_string(prob_.heads_q) + ", splits=" + std::to_string(splits_) + ")",
                 "give them with --dims batch=2,heads_q=4,seqlen_q=5,splits=3");
  for (const auto& s : p.stmts) {
    if (s.kind == Stmt::Kind::For) {  // the parts' views sit in the loop over the splits
      for (const auto& b : s.loop.body)
        if (b.kind == Stmt::Kind::Allocate && b.alloc.space == Space::Global && !globals_.count(b.alloc.name) &&
            (b.alloc.name == "O_part" || b.alloc.name == "LSE_part")) {
          Global g;
          g.name = b.alloc.name;
          g.loc = b.loc;
          g.parts = splits_;
          g.dtype = b.alloc.dtype.value_or(g.name == "LSE_part" ? DType::F32 : DType::F16);
          for (const auto& e : b.alloc.shape) {
            auto v = eval_int(e, header_env_, &diags_);
            if (!v) return false;
            if (*v < 1 || *v > (int64_t(1) << 30))
              return error("TL0901", e.loc, "global " + g.name + " has a dimension of size " + std::to_string(*v));
            g.view.push_back(*v);
          }
          globals_[g.name] = std::move(g);
        }
      continue;
    }
    if (s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Global) continue;
    const auto& a = s.alloc;
    if ((a.name != "O" && a.name != "LSE") || globals_.count(a.name)) continue;
    Global g;
    g.name = a.name;
    g.loc = s.loc;
    g.output = true;
    g.dtype = a.dtype.value_or(a.name == "LSE" ? DType::F32 : DType::F16);
    if (!eval_view(a, "global " + a.name, g.view)) return false;
    globals_[a.name] = std::move(g);
  }
  for (const char* n : {"O_part", "LSE_part", "O", "LSE"})
    if (!globals_.count(n))
      return error("TL0901", kernel_loc_, std::string("the combine program does not allocate ") + n + " in global",
                   "a combine program reads O_part and LSE_part (allocated in the loop over the splits) and writes O and LSE");
  const Global &op = globals_["O_part"], &lp = globals_["LSE_part"], &o = globals_["O"], &lse = globals_["LSE"];
  if (op.view.size() != 2 || o.view != op.view || lp.view.size() != 1 || lse.view != lp.view || lp.view[0] != o.view[0])
    return error("TL0901", kernel_loc_,
                 "the combine's globals do not describe one merge: O_part " + shape_str(op.view) + ", O " + shape_str(o.view) +
                     ", LSE_part " + shape_str(lp.view) + ", LSE " + shape_str(lse.view),
                 "O_part and O are (seqlen_q, d_v), LSE_part and LSE (seqlen_q)");
  prob_.seqlen_q = prob_.seqlen_k = o.view[0];
  prob_.d_qk = prob_.d_v = o.view[1];
  double total = 0, bytes = 0;
  for (auto& [name, g] : globals_) {
    g.heads = prob_.heads_q;
    const double n = double(prob_.batch) * double(std::max<int64_t>(g.parts, 1)) * double(g.heads) * double(g.view_elems());
    total += n;
    bytes += n * (g.output ? 8 + 1 + 4 * 8 : 8);
  }
  if (total > double(kMaxGlobalElems))
    return error("TL0902", kernel_loc_, "problem too large for the interpreter: " + fmt(total) + " tensor elements",
                 "run with smaller --dims");
  if (!fits(bytes, kernel_loc_, "the global tensors with the reference's copies")) return false;
  globals_charge_ = Charge(&live_bytes_, int64_t(bytes));
  return true;
}

// O_part standard normal (seed stream 1), LSE_part 3 x standard normal (stream 2); about one part
// in eight is empty (LSE_part = -inf, O_part = 0, what a forward stores for a part without visible
// keys), and the last row of (batch 0, head 0) has every part empty.
void Machine::make_inputs_combine() {
  Global &op = globals_["O_part"], &lp = globals_["LSE_part"];
  const int64_t rows = lp.view[0], d = op.view[1];
  op.data = spec::random_normal(size_t(prob_.batch * splits_ * prob_.heads_q * rows * d), cfg_.seed, 1);
  lp.data = spec::random_normal(size_t(prob_.batch * splits_ * prob_.heads_q * rows), cfg_.seed, 2);
  for (size_t i = 0; i < lp.data.size(); ++i) {
    const int64_t row = int64_t(i) % rows, bsh = int64_t(i) / rows;  // (b, s, h) of the row
    const int64_t h = bsh % prob_.heads_q, b = bsh / (prob_.heads_q * splits_);
    const bool empty = lp.data[i] > 1.15 || (b == 0 && h == 0 && row == rows - 1);
    lp.data[i] = empty ? kEmptyLse : rnd(lp.dtype, 3 * lp.data[i]);
    for (int64_t c = 0; c < d; ++c) {
      double& x = op.data[size_t(int64_t(i) * d + c)];
      x = empty ? 0.0 : rnd(op.dtype, x);
    }
  }
  for (const char* n : {"O", "LSE"}) {
    Global& g = globals_[n];
    const size_t count = size_t(prob_.batch * g.heads * g.view_elems());
    g.data.assign(count, std::numeric_limits<double>::quiet_NaN());
    g.written.assign(count, 0);
  }
}

RunResult Machine::verdict_combine() {
  RunResult r;
  r.ran = true;
  r.blocks = blocks_;
  const Global &op = globals_["O_part"], &lp = globals_["LSE_part"], &o = globals_["O"], &lse = globals_["LSE"];
  const int64_t rows = lp.view[0], d = op.view[1];
  const size_t n_o = o.data.size(), n_l = lse.data.size();
  std::vector<double> ref_o(n_o), ref_l(n_l), naive_o(n_o), naive_l(n_l);
  const DType od = o.dtype;
  for (int64_t b = 0; b < prob_.batch; ++b)
    for (int64_t h = 0; h < prob_.heads_q; ++h)
      for (int64_t row = 0; row < rows; ++row) {
        std::vector<const double*> parts;
        std::vector<double> l;
        for (int64_t s = 0; s < splits_; ++s) {
          const int64_t bsh = (b * splits_ + s) * prob_.heads_q + h;
          parts.push_back(&op.data[size_t((bsh * rows + row) * d)]);
          l.push_back(lp.data[size_t(bsh * rows + row)]);
        }
        const size_t at = size_t((b * prob_.heads_q + h) * rows + row);
        merge_row(parts, l, d, [](double x) { return x; }, &ref_o[at * size_t(d)], ref_l[at]);
        merge_row(parts, l, d, [](double x) { return round_to(DType::F32, x); }, &naive_o[at * size_t(d)], naive_l[at]);
        for (int64_t c = 0; c < d; ++c) naive_o[at * size_t(d) + size_t(c)] = round_to(od, naive_o[at * size_t(d) + size_t(c)]);
      }
  std::vector<double> og, orf, lg, lrf;
  r.unwritten += written_pairs(o, ref_o, og, orf);
  r.unwritten += written_pairs(lse, ref_l, lg, lrf);
  r.max_abs_err = spec::max_abs_diff(og, orf);
  r.rel_err = spec::rel_frobenius(og, orf);
  r.lse_max_abs_err = spec::max_abs_diff(lg, lrf);
  std::ostringstream sum;
  sum << kernel_name_ << " (combine): batch=" << prob_.batch << " heads_q=" << prob_.heads_q << " seqlen_q=" << rows
      << " splits=" << splits_ << " d_v=" << d << " seed=" << cfg_.seed << " blocks=" << blocks_ << "\n";
  bool ok_o, ok_l;
  if (cfg_.precision == Precision::FP64) {
    r.tolerance = r.lse_tolerance = 1e-6;
    ok_o = r.rel_err <= r.tolerance;
    ok_l = r.lse_max_abs_err <= r.lse_tolerance;
    sum << "precision fp64: O rel_err=" << fmt(r.rel_err) << " (max_abs_err=" << fmt(r.max_abs_err) << "), bound "
        << fmt(r.tolerance);
  } else {
    const double naive_err = spec::max_abs_diff(naive_o, ref_o);
    r.tolerance = 2 * naive_err + 1e-5;
    ok_o = r.max_abs_err <= r.tolerance;
    double lse_max = 1;
    for (double x : ref_l)
      if (std::isfinite(x)) lse_max = std::max(lse_max, std::fabs(x));
    r.lse_tolerance = 2 * spec::max_abs_diff(naive_l, ref_l) + 1e-5 * lse_max;
    ok_l = r.lse_max_abs_err <= r.lse_tolerance;
    sum << "precision storage (O_part " << to_string(op.dtype) << ", O " << to_string(od)
        << "): O max_abs_err=" << fmt(r.max_abs_err) << ", bound " << fmt(r.tolerance) << " = 2 * naive " << fmt(naive_err)
        << " + 1e-5";
  }
  sum << "; LSE max_abs_err=" << fmt(r.lse_max_abs_err) << ", bound " << fmt(r.lse_tolerance);
  if (r.unwritten) sum << "; " << r.unwritten << " output elements never written";
  if (!std::isfinite(r.tolerance) || !std::isfinite(r.lse_tolerance)) ok_o = ok_l = false;
  r.summary = sum.str();
  finish_verdict(r, ok_o, ok_l, "the merged partial results", "the merged LSE",
                 "every row of O and LSE must be copied to global by some block: check the Grid and the final Copies",
                 "each part's weight is exp(LSE_part - m) with m the running max; rescale O and l by exp(m_old - m_new) "
                 "when m grows; LSE = m + log(l)");
  return r;
}

}  // namespace qattn::tl::interp
