// TL interpreter, part 1: the entry point, the program header (Dims, Consts, Grid, Kernel mask),
// the global tensors and the problem they describe, the grid loop, and the verdict against the
// reference (FP64: relative error; Storage: FlashAttention's rule against a naive low-precision
// attention).
#include <cmath>
#include <limits>
#include <sstream>

#include "tl/interp_impl.h"
#include "tl/numerics.h"

namespace qattn::tl {
namespace interp {
namespace {

const char* kGlobals[] = {"Q", "K", "V", "O", "LSE"};
const char* kBackwardGlobals[] = {"Q", "K", "V", "O", "LSE", "dO", "dQ", "dK", "dV"};

// The kernel arguments of a forward / backward program (docs/tl.md, "The backward pass").
bool is_global_name(const std::string& n, bool backward) {
  if (backward) {
    for (const char* g : kBackwardGlobals)
      if (n == g) return true;
    return false;
  }
  for (const char* g : kGlobals)
    if (n == g) return true;
  return false;
}

// Visits every statement, loop bodies included.
template <class Fn>
void each_stmt(const std::vector<Stmt>& body, Fn&& fn) {
  for (const auto& s : body) {
    fn(s);
    if (s.kind == Stmt::Kind::For) each_stmt(s.loop.body, fn);
  }
}


}  // namespace

std::string fmt(double x) {
  std::ostringstream os;
  os.precision(3);
  os << std::scientific << x;
  return os.str();
}

int64_t written_pairs(const Global& g, const std::vector<double>& ref, std::vector<double>& got, std::vector<double>& want) {
  int64_t unwritten = 0;
  for (size_t i = 0; i < g.data.size(); ++i) {
    if (!g.written[i]) { ++unwritten; continue; }
    got.push_back(g.data[i]);
    want.push_back(ref[i]);
  }
  return unwritten;
}

bool Machine::error(const char* code, SrcLoc loc, std::string msg, std::string hint) {
  diags_.error(code, loc, std::move(msg), std::move(hint));
  return false;
}

double Machine::rnd(DType t, double x) const {
  return cfg_.precision == Precision::Storage ? round_to(t, x) : x;
}

bool Machine::setup_header(const Program& p) {
  bool ok = true;
  const Stmt* kernel = nullptr;
  for (const auto& s : p.stmts)
    if (s.kind == Stmt::Kind::Kernel && !kernel) kernel = &s;
  if (kernel) {
    kernel_loc_ = kernel->loc;
    if (!kernel->kernel.name.empty()) kernel_name_ = kernel->kernel.name;
    backward_ = kernel->kernel.backward;
    combine_ = kernel->kernel.combine;
  }
  for (const auto& s : p.stmts)  // a Merge (run after the grid: interp_merge.cc)
    if (s.kind == Stmt::Kind::Merge && !merge_) merge_ = &s;
  if (merge_ && (backward_ || combine_))
    return error("TL0903", merge_->loc, std::string("a Merge in a ") + (backward_ ? "backward" : "combine") + " program",
                 "a Merge ends a forward program that splits the keys");
  // Dims, with values from the program (fixed) or the configuration.
  std::vector<std::string> missing;
  SrcLoc missing_loc;
  for (const auto& s : p.stmts) {
    if (s.kind != Stmt::Kind::Dim) continue;
    for (const auto& it : s.dim.items) {
      if (header_env_.ints.count(it.name)) continue;  // declared twice: the checker reports it
      auto given = cfg_.dims.find(it.name);
      int64_t v = 0;
      if (it.value) {
        auto fixed = eval_int(*it.value, header_env_, &diags_);
        if (!fixed) { ok = false; continue; }
        v = *fixed;
        if (given != cfg_.dims.end() && given->second != v) {
          ok = error("TL0904", it.loc,
                     "Dim " + it.name + " is fixed to " + std::to_string(v) + " but the run gives " +
                         std::to_string(given->second),
                     "leave " + it.name + " out of --dims or give it the value " + std::to_string(v));
          continue;
        }
      } else if (given != cfg_.dims.end()) {
        v = given->second;
      } else {
        if (missing.empty()) missing_loc = it.loc;
        missing.push_back(it.name);
        continue;
      }
      if (v < 0 || v > (int64_t(1) << 30)) {
        ok = error("TL0904", it.loc, "Dim " + it.name + " = " + std::to_string(v) + " is out of range",
                   "problem dimensions are between 0 and 2^30");
        continue;
      }
      header_env_.ints[it.name] = v;
    }
  }
  if (!missing.empty()) {
    std::string names, example;
    for (const auto& m : missing) {
      names += (names.empty() ? "" : ", ") + m;
      example += (example.empty() ? "" : ",") + m + "=VALUE";
    }
    ok = error("TL0904", missing_loc, "no value for Dim " + names, "give the problem sizes with --dims " + example);
  }
  for (const auto& [name, v] : cfg_.dims) {
    bool declared = false;
    for (const auto& s : p.stmts)
      if (s.kind == Stmt::Kind::Dim)
        for (const auto& it : s.dim.items) declared = declared || it.name == name;
    if (!declared)
      ok = error("TL0904", {}, "the run gives '" + name + "', which the program does not declare as a Dim",
                 "remove it from --dims or check its spelling");
  }
  if (!ok) return false;
  // The launch-time window, as the C ABI passes it: an unbounded side (-1) is seqlen_q + seqlen_k.
  {
    const int64_t sides[2] = {cfg_.window_left.value_or(kDefaultWindowLeft), cfg_.window_right.value_or(kDefaultWindowRight)};
    const char* names[2] = {"window_left", "window_right"};
    const auto dim = [&](const char* n) {
      auto it = header_env_.ints.find(n);
      return it == header_env_.ints.end() ? int64_t(0) : it->second;
    };
    for (int i = 0; i < 2; ++i) {
      if (sides[i] < -1 || sides[i] > (int64_t(1) << 30))
        return error("TL0904", kernel_loc_, std::string(names[i]) + " = " + std::to_string(sides[i]) + " is out of range",
                     "a window side is -1 (unbounded) or between 0 and 2^30");
      header_env_.ints[names[i]] = sides[i] < 0 ? dim("seqlen_q") + dim("seqlen_k") : sides[i];
    }
  }
  // Consts in source order.
  for (const auto& s : p.stmts) {
    if (s.kind != Stmt::Kind::Const) continue;
    for (const auto& it : s.cnst.items) {
      auto v = eval_int(it.value, header_env_, &diags_);
      if (!v) return false;
      header_env_.ints[it.name] = *v;
    }
  }
  if (!eval_grid(p.stmts, grid_)) return false;
  // The kernel's mask: the reference's contract (the bounds always apply, and a Named mask is not
  // a kernel mask: both are None to the reference).
  if (kernel) {
    const MaskSpec& m = kernel->kernel.mask;
    const bool plain = m.kind == MaskSpec::Kind::Bounds || m.kind == MaskSpec::Kind::Named;
    prob_.mask = plain ? MaskSpec::Kind::None : m.kind;
    if (m.kind == MaskSpec::Kind::Window) {
      auto l = eval_int(m.left, header_env_, &diags_);
      auto r = eval_int(m.right, header_env_, &diags_);
      if (!l || !r) return false;
      if (*l < -(int64_t(1) << 31) || *l > (int64_t(1) << 31) || *r < -(int64_t(1) << 31) || *r > (int64_t(1) << 31))
        return error("TL0901", m.loc.line ? m.loc : kernel->loc, "window bound out of range");
      prob_.window_left = *l;
      prob_.window_right = *r;
    }
  }
  return true;
}

bool Machine::eval_view(const AllocateStmt& a, const std::string& what, std::vector<int64_t>& view) {
  for (const auto& e : a.shape) {
    auto v = eval_int(e, header_env_, &diags_);
    if (!v) return false;
    if (*v < 1 || *v > (int64_t(1) << 30)) return error("TL0901", e.loc, what + " has a dimension of size " + std::to_string(*v));
    view.push_back(*v);
  }
  return true;
}

// A Phase's workspaces: the globals it allocates that are not kernel arguments (docs/tl.md, "Phases"),
// one (rows[, cols]) matrix per (batch, query head), poisoned until a phase writes them.
bool Machine::setup_workspaces(const Program& p) {
  for (const auto& ph : p.stmts) {
    if (ph.kind != Stmt::Kind::Phase) continue;
    for (const auto& s : ph.loop.body) {
      if (s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Global) continue;
      const auto& a = s.alloc;
      if (is_global_name(a.name, backward_) || globals_.count(a.name)) continue;
      Global g;
      g.name = a.name;
      g.loc = s.loc;
      g.workspace = true;
      g.dtype = a.dtype.value_or(DType::F32);
      if (a.shape.empty() || a.shape.size() > 2)
        return error("TL0901", s.loc, "workspace " + a.name + " must have 1 or 2 dimensions");
      if (!eval_view(a, "workspace " + a.name, g.view)) return false;
      globals_[a.name] = std::move(g);
    }
  }
  return true;
}

bool Machine::setup_globals(const Program& p) {
  if (combine_) return setup_globals_combine(p);
  for (const auto& s : p.stmts) {
    if (s.kind != Stmt::Kind::Allocate || s.alloc.space != Space::Global) continue;
    const auto& a = s.alloc;
    if (!is_global_name(a.name, backward_)) continue;  // an auxiliary input (setup_variants)
    if (globals_.count(a.name)) continue;  // duplicate: the checker reports it
    Global g;
    g.name = a.name;
    g.loc = s.loc;
    g.output = backward_ ? (a.name == "dQ" || a.name == "dK" || a.name == "dV") : (a.name == "O" || a.name == "LSE");
    g.dtype = a.dtype.value_or(a.name == "LSE" ? DType::F32 : DType::F16);
    size_t rank = a.name == "LSE" ? 1 : 2;
    if (a.shape.size() != rank)
      return error("TL0901", s.loc,
                   "global " + a.name + " must have " + (rank == 1 ? "1 dimension (seqlen_q)" : "2 dimensions (rows, cols)") +
                       ", found " + std::to_string(a.shape.size()));
    if (!eval_view(a, "global " + a.name, g.view)) return false;
    if (g.output && !backward_ && a.offset.size() == 3) {  // a part's O / LSE of split keys: [b, s, head]
      auto it = header_env_.ints.find("splits");
      if (it == header_env_.ints.end() || it->second < 1 || it->second > (int64_t(1) << 16))
        return error("TL0904", s.loc,
                     "global " + a.name + " holds the parts of split keys but splits is " +
                         (it == header_env_.ints.end() ? std::string("not given") : std::to_string(it->second)),
                     "give the number of parts with the other Dims: --dims ...,splits=3");
      g.parts = it->second;
    }
    for (const auto& at : s.attrs) {  // `{pack: G}` (the checker allows it on Q, O, LSE)
      if (at.key != "pack" || !at.value) continue;
      auto v = eval_int(*at.value, header_env_, &diags_);
      if (!v) return false;
      if (*v < 1 || *v > (int64_t(1) << 20))
        return error("TL0901", (at.loc.line ? at.loc : s.loc), "`pack` of global " + a.name + " is " + std::to_string(*v),
                     "pack the query heads that share a kv head: `{pack: heads_q / heads_kv}`");
      g.pack = *v;
    }
    globals_[a.name] = std::move(g);
  }
  if (!setup_workspaces(p) || !setup_view_v(p)) return false;  // (V as a view of K: K's first columns)
  if (merge_ && !setup_merge_globals()) return false;            // (the merged O and LSE: interp_merge.cc)
  for (const char* n : {"Q", "K", "V", "O"})
    if (!globals_.count(n))
      return error("TL0901", kernel_loc_, std::string("the program does not allocate ") + n + " in global",
                   "the kernel's arguments Q, K, V and O are declared with `Allocate NAME in global (rows, cols) DTYPE with offset [b, h]`");
  if (backward_) {
    for (const char* n : {"dO", "LSE", "dQ", "dK", "dV"})
      if (!globals_.count(n))
        return error("TL0901", kernel_loc_, std::string("the backward program does not allocate ") + n + " in global",
                     "a backward program reads Q, K, V, O, dO, LSE and writes dQ, dK, dV (docs/tl.md, \"The backward pass\")");
    each_stmt(p.stmts, [&](const Stmt& s) {
      if (s.kind == Stmt::Kind::Copy && s.copy.accumulate)
        if (auto it = globals_.find(s.copy.name); it != globals_.end() && it->second.output) it->second.accumulated = true;
    });
  }
  Global &q = globals_["Q"], &k = globals_["K"], &v = globals_["V"], &o = globals_["O"];
  auto get = [&](const char* n, int64_t dflt) {
    auto it = header_env_.ints.find(n);
    return it == header_env_.ints.end() ? dflt : it->second;
  };
  prob_.batch = get("batch", 1);
  prob_.heads_q = get("heads_q", get("heads", 1));
  prob_.heads_kv = get("heads_kv", prob_.heads_q);
  prob_.seqlen_q = q.view[0];
  prob_.d_qk = q.view[1];
  prob_.seqlen_k = k.view[0];
  prob_.d_v = v.view[1];
  auto mismatch = [&](const Global& g, const std::vector<int64_t>& want, const char* what) {
    return error("TL0901", g.loc,
                 "global " + g.name + " is " + shape_str(g.view) + " but " + what + " make it " + shape_str(want),
                 "Q (seqlen_q, d_qk), K (seqlen_k, d_qk), V (seqlen_k, d_v), O (seqlen_q, d_v), LSE (seqlen_q)");
  };
  if (k.view[1] != prob_.d_qk) return mismatch(k, {prob_.seqlen_k, prob_.d_qk}, "Q's columns");
  if (v.view[0] != prob_.seqlen_k) return mismatch(v, {prob_.seqlen_k, prob_.d_v}, "K's rows");
  if (o.view != std::vector<int64_t>{prob_.seqlen_q, prob_.d_v}) return mismatch(o, {prob_.seqlen_q, prob_.d_v}, "Q's rows and V's columns");
  if (auto it = globals_.find("LSE"); it != globals_.end() && it->second.view[0] != prob_.seqlen_q)
    return mismatch(it->second, {prob_.seqlen_q}, "Q's rows");
  if (backward_) {
    if (globals_["dO"].view != o.view) return mismatch(globals_["dO"], o.view, "O");
    if (globals_["dQ"].view != q.view) return mismatch(globals_["dQ"], q.view, "Q");
    if (globals_["dK"].view != k.view) return mismatch(globals_["dK"], k.view, "K");
    if (globals_["dV"].view != v.view) return mismatch(globals_["dV"], v.view, "V");
  }
  prob_.softmax_scale = cfg_.softmax_scale.value_or(1.0 / std::sqrt(double(prob_.d_qk)));
  if (auto why = spec::validate(prob_); !why.empty()) return error("TL0901", kernel_loc_, "bad problem: " + why);
  if (prob_.flops_madd() > kMaxReferenceMadds)
    return error("TL0902", kernel_loc_,
                 "problem too large for the interpreter: " + fmt(prob_.flops_madd()) + " multiply-adds (limit " +
                     fmt(kMaxReferenceMadds) + ")",
                 "run with smaller --dims (the interpreter checks the algorithm; small ragged sizes suffice)");
  double total = 0;
  for (auto& [name, g] : globals_) {
    g.heads = (name == "K" || name == "V" || name == "dK" || name == "dV") ? prob_.heads_kv : prob_.heads_q;
    if (g.pack > 1 && g.heads % g.pack != 0)
      return error("TL0901", g.loc,
                   "global " + name + " is packed by " + std::to_string(g.pack) + ", which does not divide heads_q = " +
                       std::to_string(g.heads),
                   "pack the query heads that share a kv head: `{pack: heads_q / heads_kv}`");
    pack_ = std::max(pack_, g.pack);
    total += double(prob_.batch) * double(g.all_parts()) * double(g.heads) * double(g.view_elems());
  }
  if (total > double(kMaxGlobalElems))
    return error("TL0902", kernel_loc_, "problem too large for the interpreter: " + fmt(total) + " tensor elements",
                 "run with smaller --dims");
  // Their memory: 8 bytes an element; an output element also has its written flag and, in the
  // verdict, the reference's and the naive attention's values and the two compared copies.
  double bytes = 0;
  for (const auto& [name, g] : globals_)
    bytes += double(prob_.batch) * double(g.all_parts()) * double(g.heads) * double(g.view_elems()) * (g.output ? 8 + 1 + 4 * 8 : 8);
  if (!fits(bytes, kernel_loc_, "the global tensors with the reference's copies")) return false;
  globals_charge_ = Charge(&live_bytes_, int64_t(bytes));
  env_.scalars["softmax_scale"] = prob_.softmax_scale;
  const double softcap = cfg_.softcap.value_or(kDefaultSoftcap);
  if (!(softcap > 0) || !std::isfinite(softcap))
    return error("TL0904", kernel_loc_, "softcap = " + fmt(softcap) + " is not a finite number > 0",
                 "give the softcap as a positive number (--softcap 30)");
  env_.scalars["softcap"] = softcap;
  return true;
}

void Machine::make_inputs(const Program& p) {
  if (combine_) return make_inputs_combine();
  auto in = spec::random_inputs(prob_, cfg_.seed);
  std::vector<double>* src[] = {&in.q, &in.k, &in.v};
  const char* names[] = {"Q", "K", "V"};
  for (int i = 0; i < 3; ++i) {
    Global& g = globals_[names[i]];
    g.data = std::move(*src[i]);
    for (double& x : g.data) x = rnd(g.dtype, x);
  }
  make_view_inputs();  // V as a view of K: K's first columns, before the cache's pages see them
  make_kv_inputs();
  if (backward_) {
    // The backward's inputs: dO fresh from the seed (stream 3); O and LSE what the forward stores,
    // the exact attention of these Q, K, V rounded to their dtypes.
    Global& dout = globals_["dO"];
    dout.data = spec::random_normal(prob_.o_size(), cfg_.seed, 3);
    for (double& x : dout.data) x = rnd(dout.dtype, x);
    const spec::ScoreVariant variant = cfg_.reference_variant ? cfg_.reference_variant(aux_) : declared_variant(p);
    auto fwd = spec::reference_attention(prob_, globals_["Q"].data, globals_["K"].data, globals_["V"].data,
                                         variant.empty() ? nullptr : &variant);
    Global &o = globals_["O"], &lse = globals_["LSE"];
    o.data = std::move(fwd.o);
    for (double& x : o.data) x = rnd(o.dtype, x);
    lse.data = std::move(fwd.lse);
    for (double& x : lse.data) x = rnd(lse.dtype, x);
  }
  for (auto& [name, g] : globals_) {
    if (g.workspace) {  // poison: a row no phase wrote reads NaN
      size_t n = size_t(prob_.batch * g.heads * g.view_elems());
      g.data.assign(n, std::numeric_limits<double>::quiet_NaN());
      g.written.assign(n, 0);
    }
    if (!g.output) continue;
    size_t n = size_t(prob_.batch * g.all_parts() * g.heads * g.view_elems());
    // poison, except what `and accumulate` adds to: zero at launch (the C ABI's contract)
    g.data.assign(n, g.accumulated ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    g.written.assign(n, 0);
  }
  make_ragged_inputs();
}

bool Machine::setup(const Program& p) {
  if (!setup_header(p)) return false;
  if (!setup_globals(p)) return false;
  if (!setup_variants(p)) return false;
  if (!setup_kv_cache(p)) return false;
  if (!setup_ragged(p)) return false;
  make_inputs(p);
  return true;
}

// The extents of the Grid lines among `stmts` (the program's, or a Phase's), at the header's values.
bool Machine::eval_grid(const std::vector<Stmt>& stmts, std::vector<GridVar>& grid) {
  for (const auto& s : stmts) {
    if (s.kind != Stmt::Kind::Grid) continue;
    for (const auto& it : s.grid.items) {
      auto v = eval_int(it.extent, header_env_, &diags_);
      if (!v) return false;
      if (*v < 0) return error("TL0901", it.loc, "Grid " + it.var + " has a negative extent " + std::to_string(*v));
      grid.push_back({it.var, *v});
    }
  }
  return true;
}

bool Machine::run_grid(const Program& p) {
  // The Phases first, each over its own Grid (a kernel launched before the main one).
  for (const auto& s : p.stmts) {
    if (s.kind != Stmt::Kind::Phase) continue;
    std::vector<GridVar> grid;
    if (!eval_grid(s.loop.body, grid)) return false;
    in_phase_ = true;
    const bool ok = run_blocks(s.loop.body, grid);
    in_phase_ = false;
    if (!ok) return false;
  }
  if (!run_blocks(p.stmts, grid_)) return false;
  return !merge_ || run_merge(p);  // every part is stored: the merge of each tile
}

bool Machine::run_blocks(const std::vector<Stmt>& body, const std::vector<GridVar>& grid) {
  std::vector<int64_t> idx(grid.size(), 0);
  for (const auto& g : grid)
    if (g.extent == 0) return true;  // an empty grid launches nothing
  Env base = header_env_;
  base.scalars = env_.scalars;
  while (true) {
    slots_.clear();
    frames_.clear();
    env_ = base;
    for (size_t i = 0; i < grid.size(); ++i) env_.ints[grid[i].name] = idx[i];
    if (!count(kStmtCost, kernel_loc_)) return false;
    if (!exec_block(body, true)) return false;
    ++blocks_;
    size_t d = 0;
    for (; d < idx.size(); ++d) {
      if (++idx[d] < grid[d].extent) break;
      idx[d] = 0;
    }
    if (d == idx.size()) return true;
  }
}

RunResult Machine::verdict(const Program& p) {
  if (backward_) return verdict_backward(p);
  if (combine_) return verdict_combine();
  RunResult r;
  r.ran = true;
  r.blocks = blocks_;
  const Global& v = globals_["V"];
  const Global* op = &globals_["O"];
  const Global* lse = globals_.count("LSE") ? &globals_["LSE"] : nullptr;
  Global merged_o, merged_lse;  // split keys: the parts merged by their LSE (docs/tl.md, "Splitting the keys")
  int64_t stray = 0;  // packed ragged outputs: elements written outside their sequence
  if (op->parts > 0) {
    if (!lse || lse->parts != op->parts || op->view.size() != 2 || lse->ragged != op->ragged) {
      error("TL0901", op->loc, "O holds the parts of split keys but LSE does not", "give LSE the offset [b, s, head] too");
      r.ran = false;
      r.summary = "not verified: split parts without their LSE";
      return r;
    }
    if (op->ragged.empty()) merge_parts(*op, *lse, prob_.batch, merged_o, merged_lse);
    else stray += merge_ragged_parts(*op, *lse, merged_o, merged_lse);  // per part: rows of their own sequence
    op = &merged_o;
    lse = &merged_lse;
  }
  // A Merge: O and LSE are what its body merged; the parts it read are merged here in fp64 as well
  // and compared too, so that a failure says whether the forward's parts or the Merge is wrong.
  Global parts_o, parts_lse;
  const bool parts = merge_ && globals_.count("O_part") && globals_.count("LSE_part") && globals_["O_part"].parts > 0 &&
                     globals_["LSE_part"].parts == globals_["O_part"].parts;
  if (parts) merge_parts(globals_["O_part"], globals_["LSE_part"], prob_.batch, parts_o, parts_lse);
  const Global& o = *op;
  const spec::ScoreVariant variant = cfg_.reference_variant ? cfg_.reference_variant(aux_) : declared_variant(p);
  const spec::ScoreVariant* vp = variant.empty() ? nullptr : &variant;
  const spec::ScoreVariant kv_variant = ref_variant(variant);  // a KV cache: each sequence's keys
  if (!kv_variant.empty()) vp = &kv_variant;
  const spec::AttentionProblem rp = ref_problem();
  auto ref = spec::reference_attention(rp, ref_q(), ref_k(), ref_v(), vp);
  if (*ref_failed_) {
    r.ran = false;
    r.summary = "not verified: a declaration could not be evaluated for the reference (see the diagnostics)";
    return r;
  }
  // Written elements only; the rest are counted.
  std::vector<double> og, orf, lg, lrf;
  auto pairs = [&](const Global& g, const std::vector<double>& rf, std::vector<double>& got, std::vector<double>& want) {
    return g.ragged.empty() ? written_pairs(g, rf, got, want) : ragged_pairs(g, rf, got, want, stray);
  };
  r.unwritten += pairs(o, ref.o, og, orf);
  r.max_abs_err = spec::max_abs_diff(og, orf);
  r.rel_err = spec::rel_frobenius(og, orf);
  if (lse) {
    r.unwritten += pairs(*lse, ref.lse, lg, lrf);
    r.lse_max_abs_err = spec::max_abs_diff(lg, lrf);
  }
  std::ostringstream sum;
  sum << kernel_name_ << ": batch=" << prob_.batch << " heads_q=" << prob_.heads_q << " heads_kv=" << prob_.heads_kv
      << " seqlen_q=" << prob_.seqlen_q << " seqlen_k=" << prob_.seqlen_k << " d_qk=" << prob_.d_qk << " d_v=" << prob_.d_v
      << " mask=" << spec::to_string(prob_.mask);
  if (globals_["O"].parts > 0) sum << " splits=" << globals_["O"].parts << " (merged by their LSE)";
  if (parts) sum << " splits=" << globals_["O_part"].parts << " (merged by the Merge block: " << merge_blocks_ << " tiles)";
  if (prob_.mask == spec::MaskKind::Window) sum << "(" << prob_.window_left << ", " << prob_.window_right << ")";
  sum << " scale=" << prob_.softmax_scale << " seed=" << cfg_.seed << " blocks=" << blocks_ << "\n";
  bool ok_o, ok_lse = true;
  if (cfg_.precision == Precision::FP64) {
    r.tolerance = 1e-6;
    r.lse_tolerance = 1e-6;
    ok_o = r.rel_err <= r.tolerance;
    if (lse) ok_lse = r.lse_max_abs_err <= r.lse_tolerance;
    sum << "precision fp64: O rel_err=" << fmt(r.rel_err) << " (max_abs_err=" << fmt(r.max_abs_err)
        << "), bound " << fmt(r.tolerance);
  } else {
    // FlashAttention's rule: within twice the error of a naive attention in the same precision.
    DType pd = v.dtype, od = o.dtype;
    auto naive = spec::naive_attention_lowp(
        rp, ref_q(), ref_k(), ref_v(), [pd](double x) { return round_to(pd, x); },
        [od](double x) { return round_to(od, x); }, vp);
    double naive_err = spec::max_abs_diff(naive.o, ref.o);
    bool fp8 = pd == DType::F8E4M3 || pd == DType::F8E5M2 || od == DType::F8E4M3 || od == DType::F8E5M2;
    double atol = fp8 ? 1e-3 : 1e-5;
    r.tolerance = 2 * naive_err + atol;
    ok_o = r.max_abs_err <= r.tolerance;
    if (lse) {
      // the absolute term scales with |LSE| (an fp32 log-sum-exp of 30 has a resolution of 2e-6):
      // 1e-5 relative to the largest finite reference value, at least 1e-5
      double lse_max = 1;
      for (double x : ref.lse)
        if (std::isfinite(x)) lse_max = std::max(lse_max, std::fabs(x));
      r.lse_tolerance = 2 * spec::max_abs_diff(naive.lse, ref.lse) + 1e-5 * lse_max;
      ok_lse = r.lse_max_abs_err <= r.lse_tolerance;
    }
    sum << "precision storage (P " << to_string(pd) << ", O " << to_string(od) << "): O max_abs_err="
        << fmt(r.max_abs_err) << " (rel_err=" << fmt(r.rel_err) << "), bound " << fmt(r.tolerance) << " = 2 * naive "
        << fmt(naive_err) << " + " << fmt(atol);
  }
  if (lse) sum << "; LSE max_abs_err=" << fmt(r.lse_max_abs_err) << ", bound " << fmt(r.lse_tolerance);
  if (r.unwritten) sum << "; " << r.unwritten << " output elements never written";
  if (stray) sum << "; " << stray << " output elements written outside their sequence";
  r.summary = sum.str();
  finish_verdict(r, ok_o, ok_lse, merge_ ? "the reference (O as the Merge block merged it)" : "the reference",
                 merge_ ? "the reference (LSE as the Merge block merged it)" : "the reference",
                 merge_ ? "every row of the merged O and LSE must be copied to global by the Merge block: check its final Copies"
                        : "every element of O (and LSE) must be copied to global by some block: check the Grid extents and the final Copy",
                 "run with --precision fp64 to separate algorithm bugs from precision loss");
  if (parts) {  // the parts the Merge read, merged in fp64 (as the split verdict does without a Merge)
    std::vector<double> pg, prf, plg, plrf;
    const int64_t unwritten = written_pairs(parts_o, ref.o, pg, prf) + written_pairs(parts_lse, ref.lse, plg, plrf);
    const bool fp64 = cfg_.precision == Precision::FP64;
    const double err = fp64 ? spec::rel_frobenius(pg, prf) : spec::max_abs_diff(pg, prf), lerr = spec::max_abs_diff(plg, plrf);
    const bool good = unwritten == 0 && err <= r.tolerance && lerr <= r.lse_tolerance;
    r.summary += "; the parts merged in fp64: O " + std::string(fp64 ? "rel_err " : "max_abs_err ") + fmt(err) +
                 ", LSE max_abs_err " + fmt(lerr) + (unwritten ? ", " + std::to_string(unwritten) + " elements unwritten" : "");
    if (!good) {
      r.passed = false;
      diags_.error("TL0801", kernel_loc_,
                   "the parts the forward stored, merged by their LSE in fp64, differ from the reference" +
                       (unwritten ? " (" + std::to_string(unwritten) + " elements unwritten)" : std::string()),
                   "each part attends to its own key tiles (the loop bounds) and stores O and LSE at its part index");
    }
  }
  if (stray) {
    r.passed = false;
    diags_.error("TL0801", kernel_loc_, std::to_string(stray) + " output elements were written outside their sequence",
                 "a ragged output's rows past seqlen_q belong to the next sequence: bound the stored rows by the "
                 "sequence's `Let seqlen_q` and take its first row from the same table as Q");
  }
  return r;
}

void Machine::finish_verdict(RunResult& r, bool ok_o, bool ok_lse, const char* o_ref, const char* lse_ref,
                             const std::string& hint_unwritten, const std::string& hint_wrong) {
  r.passed = ok_o && ok_lse && r.unwritten == 0;
  if (r.passed) return;
  std::string why;
  if (r.unwritten) why = std::to_string(r.unwritten) + " output elements were never written";
  if (!ok_o)
    why += (why.empty() ? "" : "; ") + std::string("O differs from ") + o_ref + ": " +
           (cfg_.precision == Precision::FP64 ? "rel_err " + fmt(r.rel_err) : "max_abs_err " + fmt(r.max_abs_err)) + " > " +
           fmt(r.tolerance);
  if (!ok_lse)
    why += (why.empty() ? "" : "; ") + std::string("LSE differs from ") + lse_ref + ": max_abs_err " + fmt(r.lse_max_abs_err) +
           " > " + fmt(r.lse_tolerance);
  diags_.error("TL0801", kernel_loc_, why, r.unwritten ? hint_unwritten : hint_wrong);
}

// The backward's verdict: dQ, dK, dV against the fp64 gradients (FP64: relative error 1e-6 each;
// Storage: FlashAttention's rule, twice a naive same-precision backward's error plus atol).
RunResult Machine::verdict_backward(const Program& p) {
  RunResult r;
  r.ran = true;
  r.blocks = blocks_;
  const spec::ScoreVariant variant = cfg_.reference_variant ? cfg_.reference_variant(aux_) : declared_variant(p);
  const spec::ScoreVariant* vp = variant.empty() ? nullptr : &variant;
  const Global &q = globals_["Q"], &k = globals_["K"], &v = globals_["V"], &dout = globals_["dO"];
  auto ref = spec::reference_attention_backward(prob_, q.data, k.data, v.data, dout.data, vp);
  if (*ref_failed_) {
    r.ran = false;
    r.summary = "not verified: a declaration could not be evaluated for the reference (see the diagnostics)";
    return r;
  }
  std::optional<spec::AttentionGrads> naive;
  if (cfg_.precision == Precision::Storage) {
    const DType in = q.dtype;
    naive = spec::naive_attention_backward_lowp(prob_, q.data, k.data, v.data, dout.data,
                                                [in](double x) { return round_to(in, x); }, vp);
  }
  struct Out { const char* name; const std::vector<double>* ref; const std::vector<double>* naive; };
  const Out outs[] = {{"dQ", &ref.dq, naive ? &naive->dq : nullptr},
                      {"dK", &ref.dk, naive ? &naive->dk : nullptr},
                      {"dV", &ref.dv, naive ? &naive->dv : nullptr}};
  std::ostringstream sum;
  sum << kernel_name_ << " (backward): batch=" << prob_.batch << " heads_q=" << prob_.heads_q << " heads_kv=" << prob_.heads_kv
      << " seqlen_q=" << prob_.seqlen_q << " seqlen_k=" << prob_.seqlen_k << " d_qk=" << prob_.d_qk << " d_v=" << prob_.d_v
      << " mask=" << spec::to_string(prob_.mask);
  if (prob_.mask == spec::MaskKind::Window) sum << "(" << prob_.window_left << ", " << prob_.window_right << ")";
  sum << " scale=" << prob_.softmax_scale << " seed=" << cfg_.seed << " blocks=" << blocks_ << "\n";
  sum << (cfg_.precision == Precision::FP64 ? "precision fp64:" : "precision storage:");
  std::string why;
  bool ok = true;
  for (const Out& out : outs) {
    const Global& g = globals_[out.name];
    std::vector<double> got, want;
    int64_t unwritten = 0;
    for (size_t i = 0; i < g.data.size(); ++i) {
      if (!g.accumulated && !g.written[i]) { ++unwritten; continue; }  // an accumulated output starts at 0
      got.push_back(g.data[i]);
      want.push_back((*out.ref)[i]);
    }
    r.unwritten += unwritten;
    const double err = spec::max_abs_diff(got, want), rel = spec::rel_frobenius(got, want);
    double bound;
    bool good;
    if (cfg_.precision == Precision::FP64) {
      bound = 1e-6;
      good = rel <= bound;
      sum << " " << out.name << " rel_err=" << fmt(rel) << " (bound " << fmt(bound) << ");";
    } else {
      // atol: 1e-5 of the largest gradient element, at least 1e-5 (fp32 accumulation of many tiles)
      double gmax = 1;
      for (double x : *out.ref) gmax = std::max(gmax, std::fabs(x));
      const double naive_err = spec::max_abs_diff(*out.naive, *out.ref);
      bound = 2 * naive_err + 1e-5 * gmax;
      good = err <= bound;
      sum << " " << out.name << " max_abs_err=" << fmt(err) << " (bound " << fmt(bound) << " = 2 * naive " << fmt(naive_err)
          << " + " << fmt(1e-5 * gmax) << ");";
    }
    if (std::string(out.name) == "dQ") r.max_abs_err = err, r.rel_err = rel, r.tolerance = bound;
    if (!std::isfinite(bound)) good = false;
    if (!good)
      why += (why.empty() ? "" : "; ") + std::string(out.name) + " differs from the reference gradient: " +
             (cfg_.precision == Precision::FP64 ? "rel_err " + fmt(rel) : "max_abs_err " + fmt(err)) + " > " + fmt(bound);
    if (unwritten)
      why += (why.empty() ? "" : "; ") + std::to_string(unwritten) + " elements of " + out.name + " were never written";
    ok = ok && good && unwritten == 0;
  }
  verdict_aux_grads(p, sum, why, ok);
  r.passed = ok;
  r.summary = sum.str();
  if (!ok)
    diags_.error("TL0801", kernel_loc_, why,
                 r.unwritten ? "every element of dK and dV must be copied to global by some block (dQ is accumulated): "
                               "check the Grid extents and the final Copies"
                             : "run with --precision fp64 to separate algorithm bugs from precision loss; check the D term "
                               "(rowsum(dO * O)), the transposes and the softmax_scale factors");
  return r;
}

// The gradients of auxiliary inputs (`Compute Gradient`) against the derivative of the loss
// L = sum(dO * O) in each entry of T, by a central difference of order 4 over fp64 forwards of the
// reference with that entry moved (independent of the symbolic derivative and of dS): at most
// kAuxGradEntries entries of each T, evenly spaced. FP64: 1e-6 of the largest entry plus the
// difference's own rounding; storage:
// each entry within 4 eps(O) times the sum of its contributions' magnitudes, plus 1e-5 max(1, max
// |ref|): dS carries the rounding of the stored O (the D term) and of dO, errors of relative size
// eps that the sums over a tile need not cancel, while the contributions themselves largely do
// (ALiBi's dS sums to 0 over a row), so a bound relative to |dT| would not hold.
void Machine::verdict_aux_grads(const Program& p, std::ostringstream& sum, std::string& why, bool& ok) {
  constexpr int64_t kAuxGradEntries = 48;
  const Global &q = globals_["Q"], &k = globals_["K"], &v = globals_["V"], &dout = globals_["dO"];
  for (auto& [name, got_all] : aux_grads_) {
    spec::AuxTensor& t = aux_.at(name.substr(1));
    const int64_t n = int64_t(t.data.size());
    const int64_t step = std::max<int64_t>(1, (n + kAuxGradEntries - 1) / kAuxGradEntries);
    double lscale = 0;  // sum |dO * O|: the size of the loss's rounding, which the difference divides by h
    auto loss = [&]() {
      const spec::ScoreVariant variant = cfg_.reference_variant ? cfg_.reference_variant(aux_) : declared_variant(p);
      auto fwd = spec::reference_attention(prob_, q.data, k.data, v.data, variant.empty() ? nullptr : &variant);
      double l = 0, a = 0;
      for (size_t i = 0; i < fwd.o.size(); ++i) l += dout.data[i] * fwd.o[i], a += std::fabs(dout.data[i] * fwd.o[i]);
      lscale = std::max(lscale, a);
      return l;
    };
    std::vector<double> got, want, mags;
    for (int64_t e = 0; e < n; e += step) {
      const double x = t.data[size_t(e)], h = 1e-3 * std::max(1.0, std::fabs(x));
      double f[4];
      const double at[4] = {x - 2 * h, x - h, x + h, x + 2 * h};
      for (int i = 0; i < 4; ++i) {
        t.data[size_t(e)] = at[i];
        f[i] = loss();
      }
      t.data[size_t(e)] = x;
      want.push_back((f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h));
      got.push_back(got_all[size_t(e)]);
      mags.push_back(aux_grad_abs_[name][size_t(e)]);
    }
    if (*ref_failed_) {
      ok = false;
      why += (why.empty() ? "" : "; ") + std::string("the reference of ") + name + " could not be evaluated";
      continue;
    }
    double gmax = 0;
    for (double w : want) gmax = std::max(gmax, std::fabs(w));
    const double err = spec::max_abs_diff(got, want), rel = spec::rel_frobenius(got, want);
    double bound;
    bool good;
    if (cfg_.precision == Precision::FP64) {
      // relative 1e-6 of the largest entry, and at least the difference's own rounding (10 eps
      // sum |dO * O| / h): a saturated softmax (ALiBi with large slopes) leaves gradients near 0
      const double floor = 10 * 2.3e-16 * lscale / 1e-3;
      bound = 1e-6 * gmax + floor;
      good = err <= bound;
      sum << " " << name << " rel_err=" << fmt(rel) << " (max_abs_err " << fmt(err) << ", bound " << fmt(bound) << " = 1e-6 max |"
          << name << "| + " << fmt(floor) << ", " << got.size() << " of " << n << " entries);";
    } else {
      const double eps = std::ldexp(1.0, -(globals_["O"].dtype == DType::BF16 ? 8 : 11)), atol = 1e-5 * std::max(1.0, gmax);
      double worst = 0;  // the largest error / bound over the entries
      bound = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double b = 4 * eps * mags[i] + atol, r = std::fabs(got[i] - want[i]) / b;
        if (!(r <= worst)) worst = r, bound = b;
      }
      good = worst <= 1;
      sum << " " << name << " max_abs_err=" << fmt(err) << " (" << fmt(worst) << " of its bound: 4 eps sum |contributions| + "
          << fmt(atol) << ", " << got.size() << " of " << n << " entries);";
    }
    if (!std::isfinite(err)) good = false;
    if (!good) {
      ok = false;
      why += (why.empty() ? "" : "; ") + name + " differs from the derivative of the loss in " + name.substr(1) + ": max_abs_err " +
             fmt(err) + " > " + fmt(bound);
    }
  }
}

}  // namespace interp

RunResult run(const Program& p, const RunConfig& cfg, support::DiagSink& diags) {
  interp::Machine m(cfg, diags);
  RunResult r;
  if (!m.setup(p) || !m.run_grid(p)) {
    r.summary = "not run: see the diagnostics";
    return r;
  }
  return m.verdict(p);
}

}  // namespace qattn::tl
