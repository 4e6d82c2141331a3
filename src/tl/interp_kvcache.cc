// TL interpreter, part 6: a KV cache (docs/tl.md, "KV caches"). `Let seqlen_k = T[b]` gives each
// batch entry its own key count (random here, a full and an empty sequence among them); `{paged: T}`
// stores K and V in a shuffled pool of pages (one spare page never referenced) that the block table
// maps. Every cache element no key occupies (rows past a sequence's count, the spare page) holds
// NaN: a program that reads one as a value fails the verdict. The reference sees each sequence's
// keys only, with the causal / window alignment seqlen_k - seqlen_q of that sequence.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "tl/interp_impl.h"

namespace qattn::tl::interp {

bool Machine::setup_kv_cache(const Program& p) {
  for (const auto& s : p.stmts) {
    if (s.kind == Stmt::Kind::Let && s.let.name == "seqlen_k" && s.let.value.kind == Expr::Kind::Index)
      kv_lengths_ = s.let.value.name;
    if (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Global && (s.alloc.name == "K" || s.alloc.name == "V"))
      for (const auto& a : s.attrs)
        if (a.key == "paged" && a.value && a.value->kind == Expr::Kind::Name) kv_table_ = a.value->name;
  }
  if (kv_lengths_.empty() && kv_table_.empty()) return true;
  uint64_t rng = cfg_.seed * 0x2545F4914F6CDD1Dull + 0xCAC4Eull;
  const int64_t cap = prob_.seqlen_k;
  kv_len_.assign(size_t(prob_.batch), cap);
  if (!kv_lengths_.empty()) {
    auto it = aux_.find(kv_lengths_);
    if (it == aux_.end() || it->second.shape != std::vector<int64_t>{prob_.batch})
      return error("TL0901", kernel_loc_, "the key counts '" + kv_lengths_ + "' are not an int32 (batch) input");
    for (int64_t b = 0; b < prob_.batch; ++b) {  // entry 0 full, entry 1 empty (of 3 or more), the rest random
      const int64_t n = b == 0 ? cap : (b == 1 && prob_.batch >= 3) ? 0 : 1 + int64_t(mix(rng) % uint64_t(cap));
      kv_len_[size_t(b)] = n;
      it->second.data[size_t(b)] = double(n);
    }
  }
  if (!kv_table_.empty()) {
    auto it = aux_.find(kv_table_);
    auto ps = header_env_.ints.find("page_size");
    if (it == aux_.end() || it->second.shape.size() != 2 || it->second.shape[0] != prob_.batch)
      return error("TL0901", kernel_loc_, "the block table '" + kv_table_ + "' is not an int32 (batch, pages) input");
    if (ps == header_env_.ints.end() || ps->second < 1)
      return error("TL0901", kernel_loc_, "a paged K / V needs a positive Dim page_size", "give it with --dims page_size=16");
    const int64_t pages = it->second.shape[1], page_size = ps->second;
    if (pages * page_size < cap)
      return error("TL0901", kernel_loc_,
                   "the block table holds " + std::to_string(pages) + " pages of " + std::to_string(page_size) +
                       " rows, fewer than seqlen_k = " + std::to_string(cap),
                   "give pages >= cdiv(seqlen_k, page_size)");
    const int64_t pool = prob_.batch * pages + 1;  // one spare page
    std::vector<int64_t> perm(static_cast<size_t>(pool));
    for (int64_t i = 0; i < pool; ++i) perm[size_t(i)] = i;
    for (int64_t i = pool - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(mix(rng) % uint64_t(i + 1))]);
    for (const char* n : {"K", "V"}) {
      Global& g = globals_[n];
      g.page_size = page_size;
      g.pages = pages;
      g.table.assign(perm.begin(), perm.begin() + pool - 1);
    }
    for (size_t i = 0; i + 1 < size_t(pool); ++i) it->second.data[i] = double(perm[i]);
    const double extra = 2.0 * double(pool * page_size - prob_.batch * cap) * double(prob_.heads_kv) * double(prob_.d_qk + prob_.d_v);
    if (!fits(extra * sizeof(double), kernel_loc_, "the page pool")) return false;
  }
  return true;
}

void Machine::make_kv_inputs() {
  if (kv_lengths_.empty() && kv_table_.empty()) return;
  for (const char* n : {"K", "V"}) {
    Global& g = globals_[n];
    const int64_t rows = g.view[0], cols = g.view[1], heads = g.heads;
    std::vector<double>& ref = (n[0] == 'K') ? ref_k_ : ref_v_;
    ref = g.data;  // BHSD
    for (int64_t b = 0; b < prob_.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t r = kv_len_[size_t(b)]; r < rows; ++r)
          std::fill_n(ref.begin() + ((b * heads + h) * rows + r) * cols, cols, 0.0);
    if (g.page_size == 0) {  // contiguous: poison the rows past each sequence's count
      for (size_t i = 0; i < g.data.size(); ++i)
        if (int64_t(i / size_t(cols)) % rows >= kv_len_[i / size_t(cols * rows * heads)]) g.data[i] = kNaN;
      continue;
    }
    std::vector<double> pool(size_t((prob_.batch * g.pages + 1) * heads * g.page_size * cols), kNaN);
    for (int64_t b = 0; b < prob_.batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        View v{&g, 0, -1, b, h};
        for (int64_t r = 0; r < kv_len_[size_t(b)]; ++r)
          for (int64_t c = 0; c < cols; ++c) pool[v.at(r, c, cols)] = g.data[size_t(((b * heads + h) * rows + r) * cols + c)];
      }
    g.data = std::move(pool);
  }
}

bool Machine::kv_view(const Stmt& s, View& v) {
  if (s.alloc.name != "K" && s.alloc.name != "V") return true;
  if (!kv_lengths_.empty()) {  // the view's rows as its shape says in this block (seqlen_k: the sequence's count)
    auto rows = ev_int(s.alloc.shape[0]);
    if (!rows) return false;
    v.limit = std::clamp<int64_t>(*rows, 0, v.g->view[0]);
  }
  if (v.g->page_size > 0) {
    v.batch = v.base / (v.g->heads * v.g->view_elems());
    v.head = (v.base / v.g->view_elems()) % v.g->heads;
  }
  return true;
}

std::optional<int64_t> Machine::kv_length_let(const Stmt& s) {
  // `T[b]`, or `T[b + 1] - T[b]` (the checker admits no other form)
  const Expr& v = s.let.value;
  const bool diff = v.kind == Expr::Kind::Binary && v.args.size() == 2;
  auto read = [&](const Expr& e) -> std::optional<int64_t> {
    if (e.kind != Expr::Kind::Index || e.args.size() != 1)
      return error("TL0901", s.loc, "`Let " + s.let.name + "` reads T[b] or T[b + 1] - T[b]"), std::nullopt;
    auto b = ev_int(e.args[0]);
    if (!b) return std::nullopt;
    auto x = aux_read(e.name, {*b});
    if (!x) return error("TL0901", s.loc, "'" + e.name + "' has no element " + std::to_string(*b)), std::nullopt;
    return int64_t(*x);
  };
  auto a = read(diff ? v.args[0] : v);
  if (!a) return std::nullopt;
  int64_t n = *a;
  if (diff) {
    auto b = read(v.args[1]);
    if (!b) return std::nullopt;
    n -= *b;
  }
  // as the lowerings: a count past the Dim's launch value (the cache, the longest sequence) is clamped
  return std::clamp<int64_t>(n, 0, s.let.name == "seqlen_q" ? prob_.seqlen_q : prob_.seqlen_k);
}

int64_t Machine::block_seqlen_k() const {
  auto it = env_.ints.find("seqlen_k");
  return it != env_.ints.end() && it->second <= prob_.seqlen_k ? it->second : prob_.seqlen_k;
}

int64_t Machine::block_seqlen_q() const {
  auto it = env_.ints.find("seqlen_q");
  return it != env_.ints.end() && it->second <= prob_.seqlen_q ? it->second : prob_.seqlen_q;
}

spec::AttentionProblem Machine::ref_problem() const {
  spec::AttentionProblem p = prob_;
  if (!kv_lengths_.empty() || ragged_) p.mask = spec::MaskKind::None;  // ref_variant applies it per sequence
  return p;
}

spec::ScoreVariant Machine::ref_variant(spec::ScoreVariant base) const {
  if (kv_lengths_.empty() && !ragged_) return base;
  spec::ScoreVariant v;
  v.score = base.score;
  v.keep = [base, pr = prob_, lens = kv_len_, qlens = q_len_](int64_t b, int64_t h, int64_t q, int64_t k) {
    spec::AttentionProblem p = pr;
    if (!lens.empty()) p.seqlen_k = lens[size_t(b)];
    if (!qlens.empty()) p.seqlen_q = qlens[size_t(b)];
    if (k >= p.seqlen_k || !p.visible(q, k)) return false;
    return !base.keep || base.keep(b, h, q, k);
  };
  return v;
}

}  // namespace qattn::tl::interp
