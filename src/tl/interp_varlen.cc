// TL interpreter, part 7: packed ragged batches (docs/tl.md, "Ragged batches"). `{ragged: T}` on the
// global Q / O / LSE and K / V stores the sequences one after another, (total, heads, d), sequence b
// from row T[b]; `Let seqlen_q = T[b + 1] - T[b]` (and seqlen_k) gives each block its sequence's
// counts. The counts are drawn here (a full sequence, from three entries on an empty one and, from
// four on, one of a single query: decoding beside prefill chunks), the tables filled with their
// running sums, and the packed tensors given spare rows of NaN past the last sequence. With
// `{pack: G}` too (GQA packing) a view's row r is query r / G of head kv_head * G + r % G (View::at).
// The outputs are checked per sequence: every row of a sequence written, by a block of that
// sequence, and nothing written past the last one. A split forward's ragged O / LSE (offset
// [b, split, head]) hold the parts one after another, (splits, total, heads, d) / (splits, heads,
// total); those checks hold per part, and the verdict merges each row's parts by their LSE in fp64
// (merge_ragged_parts) before comparing with the sequence's reference.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "tl/interp_impl.h"

namespace qattn::tl::interp {
namespace {
constexpr int64_t kSpareRows = 2;  // NaN rows past the last sequence of each packed tensor
}  // namespace

bool Machine::setup_ragged(const Program& p) {
  for (const auto& s : p.stmts)
    if (s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Global && globals_.count(s.alloc.name))
      for (const auto& a : s.attrs)
        if (a.key == "ragged" && a.value && a.value->kind == Expr::Kind::Name) {
          Global& g = globals_[s.alloc.name];
          g.ragged = a.value->name;
          (g.name == "K" || g.name == "V" ? k_cu_ : q_cu_) = g.ragged;
          if (g.parts > 0 && merge_)
            return error("TL0903", merge_->loc, "a Merge block over the ragged parts of split keys is not interpreted",
                         "merge the parts with a combine program, or give O and LSE `[b, split, head]` without `ragged`");
        }
  if (v_view_of_k_) globals_["V"].ragged = globals_["K"].ragged;  // V as a view of K: K's rows
  if (q_cu_.empty() && k_cu_.empty()) return true;
  ragged_ = true;
  uint64_t rng = cfg_.seed * 0x9E3779B97F4A7C15ull + 0x7A6Eull;
  // entry 0 full, entry empty_at empty (of three entries or more), entry one_at a single row (a decoding
  // sequence beside prefill chunks: the queries' entry 3, whose keys are drawn), the others in 1 .. cap
  auto draw = [&](int64_t cap, int64_t empty_at, int64_t one_at) {
    std::vector<int64_t> n(size_t(prob_.batch));
    for (int64_t b = 0; b < prob_.batch; ++b) {
      if (b == 0 || (b == empty_at && prob_.batch > empty_at + 1)) {
        n[size_t(b)] = b == 0 ? cap : 0;
        continue;
      }
      const int64_t r = 1 + int64_t(mix(rng) % uint64_t(cap));  // (drawn for one_at too: the others' counts stay)
      n[size_t(b)] = b == one_at ? 1 : r;
    }
    return n;
  };
  auto fill = [&](const std::string& t, const std::vector<int64_t>& lens) -> bool {
    auto it = aux_.find(t);
    if (it == aux_.end() || it->second.shape != std::vector<int64_t>{prob_.batch + 1})
      return error("TL0901", kernel_loc_, "the cumulative counts '" + t + "' are not an int32 (batch + 1) input");
    it->second.data[0] = 0;
    for (int64_t b = 0; b < prob_.batch; ++b) it->second.data[size_t(b + 1)] = it->second.data[size_t(b)] + double(lens[size_t(b)]);
    return true;
  };
  const bool shared = !q_cu_.empty() && q_cu_ == k_cu_;  // one table for both: self-attention
  if (!q_cu_.empty()) {
    q_len_ = draw(shared ? std::min(prob_.seqlen_q, prob_.seqlen_k) : prob_.seqlen_q, 1, 3);
    if (!fill(q_cu_, q_len_)) return false;
  }
  if (!k_cu_.empty()) {
    std::vector<int64_t> rows = shared ? q_len_ : draw(prob_.seqlen_k, 2, -1);
    if (!kv_lengths_.empty())  // `Let seqlen_k = seqused_k[b]` too: each sequence stores at least that many keys
      for (size_t b = 0; b < rows.size(); ++b)
        rows[b] = kv_len_[b] + int64_t(mix(rng) % uint64_t(prob_.seqlen_k - kv_len_[b] + 1));
    else
      kv_len_ = rows;
    if (!shared && !fill(k_cu_, rows)) return false;
    for (const char* n : {"K", "V"}) globals_[n].total = 0;  // set in make_ragged_inputs
  }
  double extra = 0;
  for (const auto& [n, g] : globals_)
    if (!g.ragged.empty())
      extra += double(g.all_parts()) * double(g.heads) * double(g.view.size() == 2 ? g.view[1] : 1) * double(kSpareRows);
  return fits(extra * sizeof(double), kernel_loc_, "the packed tensors");
}

void Machine::make_ragged_inputs() {
  if (!ragged_) return;
  for (auto& [name, g] : globals_) {
    if (g.ragged.empty()) continue;
    const double* cu = aux_.at(g.ragged).data.data();
    const int64_t rows = g.view[0], cols = g.view.size() == 2 ? g.view[1] : 1, heads = g.heads;
    g.total = int64_t(cu[prob_.batch]) + kSpareRows;
    const size_t n = size_t(g.all_parts() * g.total * heads * cols);  // the parts one after another
    if (g.output) {
      g.data.assign(n, std::numeric_limits<double>::quiet_NaN());
      g.written.assign(n, 0);
      g.writer.assign(n, -1);
      continue;
    }
    // an input: the reference keeps (batch, heads, rows, cols), zero past each sequence's keys
    const bool kv = name == "K" || name == "V";
    std::vector<double>& ref = name == "Q" ? ref_q_ : name == "K" ? ref_k_ : ref_v_;
    ref = g.data;
    std::vector<double> packed(n, std::numeric_limits<double>::quiet_NaN());
    for (int64_t b = 0; b < prob_.batch; ++b) {
      const int64_t len = int64_t(cu[b + 1] - cu[b]), start = int64_t(cu[b]);
      const int64_t used = kv && !kv_len_.empty() ? kv_len_[size_t(b)] : len;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const size_t src = size_t(((b * heads + h) * rows + r) * cols + c);
            if (r < len) packed[size_t(((start + r) * heads + h) * cols + c)] = g.data[src];
            if (kv && r >= used) ref[src] = 0.0;
          }
    }
    g.data = std::move(packed);
  }
}

bool Machine::ragged_view(const Stmt& s, View& v, int64_t b, int64_t h) {
  Global& g = *v.g;
  const int64_t groups = g.heads / g.pack;  // a packed view's offset counts groups of `pack` heads
  if (b < 0 || b >= prob_.batch || h < 0 || h >= groups)
    return error("TL0901", s.loc,
                 "offset [" + std::to_string(b) + ", " + std::to_string(h) + "] of global " + g.name + " is outside (batch, heads" +
                     (g.pack > 1 ? " / pack" : "") + ") = (" + std::to_string(prob_.batch) + ", " + std::to_string(groups) + ")",
                 g.pack > 1 ? "a packed view is indexed by its head group: `with offset [b, kv_head]`, `Grid kv_head = 0: heads_kv`"
                            : "");
  auto start = aux_read(g.ragged, {b});
  auto rows = ev_int(s.alloc.shape[0]);
  if (!start || !rows) return start ? false : error("TL0901", s.loc, "'" + g.ragged + "' has no entry " + std::to_string(b));
  const int64_t first = std::clamp<int64_t>(int64_t(*start), 0, g.total);
  v.start = first;
  v.batch = b;
  v.head = h;
  // never past the packed tensor; packed (`{pack: G}`): G rows per query, one of each head of the group
  v.limit = std::clamp<int64_t>(*rows, 0, std::min(g.view[0], g.total - first)) * g.pack;
  return true;
}

int64_t Machine::ragged_pairs(const Global& g, const std::vector<double>& ref, std::vector<double>& got, std::vector<double>& want,
                              int64_t& stray) const {
  const double* cu = aux_.at(g.ragged).data.data();
  const int64_t rows = g.view[0], cols = g.view.size() == 2 ? g.view[1] : 1, heads = g.heads;
  const bool vec = g.view.size() == 1;
  int64_t unwritten = 0;
  std::vector<uint8_t> owned(g.written.size(), 0);
  for (int64_t b = 0; b < prob_.batch; ++b) {
    const int64_t start = int64_t(cu[b]), len = int64_t(cu[b + 1] - cu[b]);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < len; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = vec ? size_t(h * g.total + start + r) : size_t(((start + r) * heads + h) * cols + c);
          owned[i] = 1;
          if (!g.written[i]) {
            ++unwritten;
            continue;
          }
          if (g.writer[i] != b) ++stray;
          got.push_back(g.data[i]);
          want.push_back(ref[size_t(((b * heads + h) * rows + r) * cols + c)]);
        }
  }
  for (size_t i = 0; i < g.written.size(); ++i)
    if (g.written[i] && !owned[i]) ++stray;  // past the last sequence
  return unwritten;
}

int64_t Machine::merge_ragged_parts(const Global& o, const Global& lse, Global& mo, Global& mlse) const {
  const double* cu = aux_.at(o.ragged).data.data();
  const int64_t parts = o.parts, heads = o.heads, d = o.view[1], total = o.total, used = int64_t(cu[prob_.batch]);
  const size_t o_part = size_t(total * heads * d), l_part = size_t(heads * total);  // one part's elements
  auto shell = [&](const Global& from, Global& to, size_t n) {
    to.name = from.name;
    to.dtype = from.dtype;
    to.output = true;
    to.heads = from.heads;
    to.view = from.view;
    to.pack = from.pack;
    to.loc = from.loc;
    to.ragged = from.ragged;
    to.total = total;
    to.data.assign(n, kNaN);
    to.written.assign(n, 0);
    to.writer.assign(n, -1);
  };
  shell(o, mo, o_part);
  shell(lse, mlse, l_part);
  int64_t stray = 0;
  for (int64_t s = 0; s < parts; ++s)  // rows past the last sequence: no block's
    for (int64_t q = used; q < total; ++q)
      for (int64_t h = 0; h < heads; ++h) {
        stray += lse.written[size_t(s) * l_part + size_t(h * total + q)];
        for (int64_t c = 0; c < d; ++c) stray += o.written[size_t(s) * o_part + size_t((q * heads + h) * d + c)];
      }
  std::vector<const double*> po(size_t(parts), nullptr);
  std::vector<double> pl(size_t(parts), 0.0);
  for (int64_t b = 0; b < prob_.batch; ++b) {
    const int64_t start = int64_t(cu[b]), len = int64_t(cu[b + 1] - cu[b]);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q = start; q < start + len; ++q) {
        const size_t li = size_t(h * total + q), oi = size_t((q * heads + h) * d);
        bool lse_written = true, lse_own = true;
        for (int64_t s = 0; s < parts; ++s) {
          po[size_t(s)] = &o.data[size_t(s) * o_part + oi];
          pl[size_t(s)] = lse.data[size_t(s) * l_part + li];
          lse_written = lse_written && lse.written[size_t(s) * l_part + li];
          lse_own = lse_own && lse.writer[size_t(s) * l_part + li] == b;
        }
        merge_row(po, pl, d, [](double x) { return x; }, &mo.data[oi], mlse.data[li]);
        mlse.written[li] = lse_written;
        mlse.writer[li] = lse_own ? int32_t(b) : -2;
        for (int64_t c = 0; c < d; ++c) {  // a part's row counts with its LSE: without it the merge is unknown
          bool w = lse_written, own = lse_own;
          for (int64_t s = 0; s < parts; ++s) {
            w = w && o.written[size_t(s) * o_part + oi + size_t(c)];
            own = own && o.writer[size_t(s) * o_part + oi + size_t(c)] == b;
          }
          mo.written[oi + size_t(c)] = w;
          mo.writer[oi + size_t(c)] = own ? int32_t(b) : -2;
        }
      }
  }
  return stray;
}

}  // namespace qattn::tl::interp
