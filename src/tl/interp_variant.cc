// TL interpreter, part 4: attention variants. Auxiliary global tensors (random contents from
// spec::random_aux), `Compute Modify S at [r, c] with NAME` (a Score per element),
// `Compute Mask S at [r, c] with NAME` (a Mask per element; a tile its `full when` clause
// classifies as full gets only the bounds), the loop attribute `{skip: NAME}` (iterations whose
// tile pair its `empty when` clause classifies as empty do not run), and the reference's variant
// when the run configuration gives none: the declarations themselves, evaluated per element.
#include <cmath>
#include <limits>

#include "tl/interp_impl.h"
#include "tl/variant.h"

namespace qattn::tl::interp {
namespace {
const char* kArgs[] = {"Q", "K", "V", "O", "LSE", "dO", "dQ", "dK", "dV"};
}  // namespace

bool is_kernel_arg(const std::string& n) {
  for (const char* g : kArgs)
    if (n == g) return true;
  return false;
}

bool Machine::setup_variants(const Program& p) {
  uint64_t float_stream = 0;
  for (const auto& s : p.stmts) {
    if (s.kind == Stmt::Kind::Variant) {
      variants_[s.variant.name] = &s.variant;
      decls_.push_back(&s.variant);
      continue;
    }
    if (s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Global || is_kernel_arg(s.alloc.name)) continue;
    if (auto w = globals_.find(s.alloc.name); w != globals_.end() && w->second.workspace) continue;  // a Phase's output
    const auto& a = s.alloc;
    if (backward_ && a.name.size() > 1 && a.name[0] == 'd') {  // the gradient dT of an auxiliary input T, zero at launch
      auto t = aux_.find(a.name.substr(1));
      if (t != aux_.end() && !t->second.is_int) {
        aux_grads_[a.name].assign(t->second.data.size(), 0.0);
        aux_grad_abs_[a.name].assign(t->second.data.size(), 0.0);
        continue;
      }
    }
    const bool is_int = a.dtype && *a.dtype == DType::I32;
    if (!a.dtype || (!is_int && *a.dtype != DType::F32) || !a.offset.empty() || a.shape.empty() || a.shape.size() > 2)
      return error("TL0901", s.loc, "unknown global tensor '" + a.name + "'",
                   "the kernel's arguments are Q, K, V, O and LSE; auxiliary inputs are 1-D or 2-D fp32/int32 without offset");
    std::vector<int64_t> shape;
    int64_t n = 1;
    for (const auto& e : a.shape) {
      auto v = eval_int(e, header_env_, &diags_);
      if (!v) return false;
      if (*v < 1 || *v > (int64_t(1) << 24)) return error("TL0901", e.loc, "auxiliary tensor " + a.name + " has a dimension of " + std::to_string(*v));
      shape.push_back(*v);
      n *= *v;
    }
    if (n > (int64_t(1) << 24)) return error("TL0902", s.loc, "auxiliary tensor " + a.name + " too large for the interpreter");
    // int32 tensors share one seed (seg_q and seg_k agree where their lengths do); fp32 ones differ.
    uint64_t seed = cfg_.seed * 1000003u + (is_int ? 17u : 101u + float_stream++);
    if (!fits(double(n) * sizeof(double), s.loc, "auxiliary tensor " + a.name)) return false;
    aux_charges_.emplace_back(&live_bytes_, n * int64_t(sizeof(double)));
    aux_[a.name] = spec::random_aux(shape, is_int, seed);
  }
  return true;
}

std::optional<double> Machine::aux_read(const std::string& name, const int64_t* idx, size_t n) const {
  auto it = aux_.find(name);
  if (it == aux_.end() || it->second.shape.size() != n || n < 1 || n > 2) return std::nullopt;
  if (n == 1) return it->second.at({idx[0]});
  return it->second.at({idx[0], idx[1]});
}

std::optional<double> Machine::eval_decl(const Expr& e, const Env& env, const VLocals& locals) {
  VariantEnv ve;
  ve.env = &env;
  ve.locals = locals;
  ve.aux = [this](const std::string& n, const int64_t* i, size_t k) { return aux_read(n, i, k); };
  auto v = evaluate(e, ve, &diags_);
  if (!v) return std::nullopt;
  return v->v;
}

// 0 partial, 1 empty, 2 full (by the declaration's clauses; partial without them).
std::optional<int> Machine::tile_class(const VariantStmt& m, int64_t q_lo, int64_t q_hi, int64_t kv_lo, int64_t kv_hi) {
  const VLocals t = {{"q_lo", {double(q_lo), true}}, {"q_hi", {double(q_hi), true}},
                     {"kv_lo", {double(kv_lo), true}}, {"kv_hi", {double(kv_hi), true}}};
  if (m.empty_when) {
    auto e = eval_decl(*m.empty_when, env_, t);
    if (!e) return std::nullopt;
    if (*e != 0) return 1;
  }
  if (m.full_when) {
    auto f = eval_decl(*m.full_when, env_, t);
    if (!f) return std::nullopt;
    if (*f != 0) return 2;
  }
  return 0;
}

// The score tile of a Modify / Mask statement: its buffer and element origin.
Buffer* Machine::score_tile(const Stmt& s, int64_t& q0, int64_t& k0) {
  const auto& c = s.compute;
  const bool two = c.op == "Derivative" || c.op == "Gradient";
  if (c.operands.size() != (two ? 2u : 1u))
    return error("TL0901", s.loc, c.op + (two ? " takes 2 operands (the gradient, the scores)" : " takes 1 operand (the score tile)")), nullptr;
  Buffer* x = operand_tensor(c.operands[0], s, "the operand");
  if (!x) return nullptr;
  if (x->shape.size() != 2 || c.at.size() != 2)
    return error("TL0901", s.loc, c.op + " needs a 2-D score tile and its coordinate `at [r, c]`"), nullptr;
  auto r = ev_int(c.at[0]);
  auto k = ev_int(c.at[1]);
  if (!r || !k) return nullptr;
  const int64_t lim = int64_t(1) << 31;
  if (std::llabs(*r) > lim || std::llabs(*k) > lim) return error("TL0901", s.loc, c.op + " tile coordinate out of range"), nullptr;
  q0 = *r * x->rows();
  k0 = *k * x->cols();
  return x;
}

bool Machine::compute_modify(const Stmt& s) {
  const auto& c = s.compute;
  auto it = variants_.find(c.mask.name);
  if (c.mask.kind != MaskSpec::Kind::Named || it == variants_.end() || it->second->is_mask)
    return error("TL0901", s.loc, "Compute Modify needs a declared Score: `with NAME`");
  int64_t q0 = 0, k0 = 0;
  Buffer* x = score_tile(s, q0, k0);
  if (!x) return false;
  if (!count(double(x->data.size()) * 10, s.loc)) return false;
  std::vector<double> vals(x->data);
  const int64_t rows = x->rows(), cols = x->cols();
  const Expr bound = bind_names(it->second->expr, env_);  // the tile's names, once (not per element)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double& v = vals[size_t(i * cols + j)];
      auto r = eval_decl(bound, env_,
                         {{"score", {v, false}}, {"q_idx", {double(q0 + i), true}}, {"kv_idx", {double(k0 + j), true}}});
      if (!r) return false;
      v = *r;
    }
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

// The tiles of `Compute Derivative / Gradient X, Y at [r, c] ...`: the gradient X at element origin
// (q0, k0) and the scores Y of its shape; `cost` evaluations per element are charged.
bool Machine::gradient_tiles(const Stmt& s, double cost, Buffer*& x, Buffer*& y, int64_t& q0, int64_t& k0) {
  x = score_tile(s, q0, k0);
  if (!x) return false;
  y = operand_tensor(s.compute.operands[1], s, "the scores");
  if (!y) return false;
  if (y->shape != x->shape)
    return error("TL0901", s.loc, "Compute " + s.compute.op + ": the gradient " + shape_str(x->shape) + " and the scores " +
                                      shape_str(y->shape) + " differ in shape");
  return count(double(x->data.size()) * cost, s.loc);
}

// `Compute Derivative X, Y at [r, c] with NAME`: X *= (d NAME / d score)(score = Y), per element of
// the score tile at [r, c] (the derivative is derive_score's, evaluated like the declaration).
bool Machine::compute_derivative(const Stmt& s) {
  const auto& c = s.compute;
  auto it = variants_.find(c.mask.name);
  if (c.mask.kind != MaskSpec::Kind::Named || it == variants_.end() || it->second->is_mask)
    return error("TL0901", s.loc, "Compute Derivative needs a declared Score: `with NAME`");
  if (c.operands.size() != 2) return error("TL0901", s.loc, "Compute Derivative takes 2 operands (the gradient, the scores)");
  auto dit = derivatives_.find(c.mask.name);
  if (dit == derivatives_.end()) {
    std::string why;
    auto de = derive_score(it->second->expr, why);
    if (!de) return error("TL0903", s.loc, "Score '" + c.mask.name + "' has no derivative: " + why);
    dit = derivatives_.emplace(c.mask.name, std::move(*de)).first;
  }
  int64_t q0 = 0, k0 = 0;
  Buffer *x = nullptr, *y = nullptr;
  if (!gradient_tiles(s, 10, x, y, q0, k0)) return false;
  std::vector<double> vals(x->data);
  const int64_t rows = x->rows(), cols = x->cols();
  const Expr bound = bind_names(dit->second, env_);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t e = size_t(i * cols + j);
      if (vals[e] == 0) continue;  // no gradient here (a masked key): 0 whatever the derivative is
      auto r = eval_decl(bound, env_,
                         {{"score", {y->data[e], false}}, {"q_idx", {double(q0 + i), true}}, {"kv_idx", {double(k0 + j), true}}});
      if (!r) return false;
      vals[e] *= *r;
    }
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

// `Compute Gradient X, Y and accumulate dT at [r, c] with NAME`: dT[idx] += X * (d NAME / d T[idx])
// (score = Y), per element of the score tile at [r, c] (derive_aux's derivative and index, evaluated
// like the declaration, the index clamped as reads are); elements past seqlen_q / seqlen_k and those
// whose gradient is 0 (masked keys) add nothing.
bool Machine::compute_gradient(const Stmt& s) {
  const auto& c = s.compute;
  auto it = variants_.find(c.mask.name);
  if (c.mask.kind != MaskSpec::Kind::Named || it == variants_.end() || it->second->is_mask)
    return error("TL0901", s.loc, "Compute Gradient needs a declared Score: `with NAME`");
  if (c.operands.size() != 2) return error("TL0901", s.loc, "Compute Gradient takes 2 operands (the gradient, the scores)");
  auto g = aux_grads_.find(c.target);
  if (c.result != ComputeStmt::Result::Accumulate || g == aux_grads_.end())
    return error("TL0901", s.loc, "Compute Gradient accumulates into the gradient dT of an fp32 auxiliary input T");
  const spec::AuxTensor& t = aux_.at(c.target.substr(1));
  std::string why;
  auto de = derive_aux(it->second->expr, c.target.substr(1), why);
  if (!de) return error("TL0903", s.loc, "Score '" + c.mask.name + "' has no derivative in " + c.target.substr(1) + ": " + why);
  if (de->index.size() != t.shape.size())
    return error("TL0901", s.loc, c.target.substr(1) + " is read with " + std::to_string(de->index.size()) + " indices");
  int64_t q0 = 0, k0 = 0;
  Buffer *x = nullptr, *y = nullptr;
  if (!gradient_tiles(s, 20, x, y, q0, k0)) return false;
  const int64_t rows = x->rows(), cols = x->cols();
  const Expr bound = bind_names(de->derivative, env_);
  std::vector<Expr> idx;
  for (const auto& e : de->index) idx.push_back(bind_names(e, env_));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t e = size_t(i * cols + j);
      const int64_t q = q0 + i, k = k0 + j;
      if (x->data[e] == 0 || q < 0 || q >= prob_.seqlen_q || k < 0 || k >= block_seqlen_k()) continue;
      const VLocals at = {{"score", {y->data[e], false}}, {"q_idx", {double(q), true}}, {"kv_idx", {double(k), true}}};
      auto r = eval_decl(bound, env_, at);
      if (!r) return false;
      int64_t flat = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        auto v = eval_decl(idx[d], env_, at);
        if (!v) return false;
        const int64_t n = t.shape[d];
        flat = flat * n + std::clamp(int64_t(std::floor(*v)), int64_t(0), n - 1);
      }
      g->second[size_t(flat)] += x->data[e] * *r;
      aux_grad_abs_[c.target][size_t(flat)] += std::fabs(x->data[e] * *r);
    }
  return true;
}

bool Machine::compute_named_mask(const Stmt& s) {
  const auto& c = s.compute;
  auto it = variants_.find(c.mask.name);
  if (it == variants_.end() || !it->second->is_mask)
    return error("TL0901", s.loc, "'" + c.mask.name + "' is not a declared Mask");
  int64_t q0 = 0, k0 = 0;
  Buffer* x = score_tile(s, q0, k0);
  if (!x) return false;
  const int64_t rows = x->rows(), cols = x->cols();
  auto cls = tile_class(*it->second, q0, q0 + rows - 1, k0, k0 + cols - 1);
  if (!cls) return false;
  if (!count(double(x->data.size()) * (*cls == 2 ? 1 : 10), s.loc)) return false;
  std::vector<double> vals(x->data);
  const Expr bound = *cls == 2 ? Expr() : bind_names(it->second->expr, env_);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t kk = k0 + j;
      bool keep = kk >= 0 && kk < block_seqlen_k();
      if (keep && *cls != 2) {
        auto r = eval_decl(bound, env_, {{"q_idx", {double(q0 + i), true}}, {"kv_idx", {double(kk), true}}});
        if (!r) return false;
        keep = *r != 0;
      }
      if (!keep) vals[size_t(i * cols + j)] = -kInf;
    }
  return store_result(s, x, x->shape, std::move(vals), nullptr);
}

// `{skip: NAME}`: the tile pair of this iteration is the one the body's `Compute Mask X at [r, c]
// with NAME` masks; X's shape is that of the GEMM that produces it (A's rows, B^T's columns).
bool Machine::skip_iteration(const Stmt& loop, bool& skip) {
  skip = false;
  const Attr* a = nullptr;
  for (const auto& at : loop.attrs)
    if (at.key == "skip") a = &at;
  if (!a) return true;
  if (!a->value || a->value->kind != Expr::Kind::Name) return error("TL0903", a->loc, "`skip` names a Mask");
  auto it = variants_.find(a->value->name);
  if (it == variants_.end() || !it->second->is_mask)
    return error("TL0901", a->loc, "`skip: " + a->value->name + "` does not name a declared Mask");
  const Stmt* mask = nullptr;
  const Stmt* gemm = nullptr;
  for (const auto& b : loop.loop.body)
    if (b.kind == Stmt::Kind::Compute && b.compute.op == "Mask" && b.compute.mask.kind == MaskSpec::Kind::Named &&
        b.compute.mask.name == a->value->name)
      mask = &b;
  if (mask && mask->compute.operands.size() == 1 && mask->compute.operands[0].expr.kind == Expr::Kind::Name)
    for (const auto& b : loop.loop.body)
      if (b.kind == Stmt::Kind::Compute && b.compute.op == "GEMM" && b.compute.target == mask->compute.operands[0].expr.name &&
          b.compute.operands.size() == 2)
        gemm = &b;
  if (!mask || !gemm || mask->compute.at.size() != 2)
    return error("TL0903", a->loc, "cannot tell the tile pair of `skip`: the body needs `Compute GEMM A, B^T and get S` and "
                                   "`Compute Mask S at [r, c] with " + a->value->name + "`");
  const Operand& A = gemm->compute.operands[0];
  const Operand& B = gemm->compute.operands[1];
  Buffer* ab = A.expr.kind == Expr::Kind::Name ? tensor(A.expr.name) : nullptr;
  Buffer* bb = B.expr.kind == Expr::Kind::Name ? tensor(B.expr.name) : nullptr;
  if (!ab || !bb || ab->shape.size() != 2 || bb->shape.size() != 2)
    return error("TL0903", a->loc, "cannot tell the tile pair of `skip`: the GEMM's operands are not allocated 2-D tiles yet");
  int64_t rows = A.transposed ? ab->shape[1] : ab->shape[0];
  int64_t cols = B.transposed ? bb->shape[0] : bb->shape[1];
  if (mask->compute.operands[0].transposed) std::swap(rows, cols);  // `Mask St^T`: the GEMM made the transposed tile
  auto r = ev_int(mask->compute.at[0]);
  auto c = ev_int(mask->compute.at[1]);
  if (!r || !c) return false;
  auto cls = tile_class(*it->second, *r * rows, *r * rows + rows - 1, *c * cols, *c * cols + cols - 1);
  if (!cls) return false;
  skip = *cls == 1;
  return true;
}

// The reference's variant from the declarations: every Score in declaration order, then every
// Mask. Grid variables: the names in Q's offset are the batch and head; the others are 0; Lets are
// evaluated in program order.
spec::ScoreVariant Machine::declared_variant(const Program& p) {
  spec::ScoreVariant v;
  if (decls_.empty()) return v;
  std::string bname, hname;
  for (const auto& s : p.stmts)
    if (s.kind == Stmt::Kind::Allocate && s.alloc.name == "Q" && s.alloc.space == Space::Global && s.alloc.offset.size() == 2) {
      if (s.alloc.offset[0].kind == Expr::Kind::Name) bname = s.alloc.offset[0].name;
      if (s.alloc.offset[1].kind == Expr::Kind::Name) hname = s.alloc.offset[1].name;
    }
  auto env_for = [this, &p, bname, hname](int64_t b, int64_t h) -> const Env& {
    auto key = std::make_pair(b, h);
    auto it = ref_envs_.find(key);
    if (it != ref_envs_.end()) return it->second;
    Env e = header_env_;
    e.scalars = env_.scalars;
    for (const auto& g : grid_) e.ints[g.name] = 0;
    if (!bname.empty()) e.ints[bname] = b;
    if (!hname.empty()) e.ints[hname] = h;
    if (!kv_len_.empty() && b >= 0 && b < int64_t(kv_len_.size())) e.ints["seqlen_k"] = kv_len_[size_t(b)];
    if (!q_len_.empty() && b >= 0 && b < int64_t(q_len_.size())) e.ints["seqlen_q"] = q_len_[size_t(b)];
    for (const auto& s : p.stmts)
      if (s.kind == Stmt::Kind::Let && s.let.value.kind != Expr::Kind::Index)
        if (auto x = eval_int(s.let.value, e)) e.ints[s.let.name] = *x;
    return ref_envs_.emplace(key, std::move(e)).first->second;
  };
  // each declaration with the (batch, head)'s names bound once (bind_names), not looked up per element
  auto expr_for = [this, env_for](const VariantStmt* d, int64_t b, int64_t h) -> const Expr& {
    auto key = std::make_tuple(d, b, h);
    auto it = ref_exprs_.find(key);
    if (it != ref_exprs_.end()) return it->second;
    return ref_exprs_.emplace(key, bind_names(d->expr, env_for(b, h))).first->second;
  };
  std::vector<const VariantStmt*> scores, masks;
  for (const auto* d : decls_) (d->is_mask ? masks : scores).push_back(d);
  auto failed = ref_failed_;
  if (!scores.empty())
    v.score = [this, scores, env_for, expr_for, failed](int64_t b, int64_t h, int64_t q, int64_t k, double s) {
      for (const auto* d : scores) {
        auto r = eval_decl(expr_for(d, b, h), env_for(b, h), {{"score", {s, false}}, {"q_idx", {double(q), true}}, {"kv_idx", {double(k), true}}});
        if (!r) {
          *failed = true;
          return std::numeric_limits<double>::quiet_NaN();
        }
        s = *r;
      }
      return s;
    };
  if (!masks.empty())
    v.keep = [this, masks, env_for, expr_for, failed](int64_t b, int64_t h, int64_t q, int64_t k) {
      for (const auto* d : masks) {
        auto r = eval_decl(expr_for(d, b, h), env_for(b, h), {{"q_idx", {double(q), true}}, {"kv_idx", {double(k), true}}});
        if (!r) {
          *failed = true;
          return false;
        }
        if (*r == 0) return false;
      }
      return true;
    };
  return v;
}

}  // namespace qattn::tl::interp
