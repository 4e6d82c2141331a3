// TL checker: a KV cache (docs/tl.md, "KV caches"), TL0416. Two forms, usable together:
//   Let seqlen_k = cache_seqlens[b]          each sequence's key count, read from an int32 (batch) input;
//   Allocate K in global (seqlen_k, d) ... {paged: block_table}
//                                            K's (and V's) rows live in pages of page_size rows, row r of
//                                            sequence b in page block_table[b, r / page_size].
// Both tensors are auxiliary inputs (int32, no offset); the checks here are their shapes, where the
// statements sit and that K and V agree.
#include "tl/checker_internal.h"

namespace qattn::tl::detail {

namespace {
const char* kLenHint = "write `Allocate cache_seqlens in global (batch) int32` and, after the Grid and before the global "
                       "K and V, `Let seqlen_k = cache_seqlens[b]` with the Grid variable that selects the batch entry";
const char* kPagedHint = "declare `Dim ..., page_size, pages`, `Allocate block_table in global (batch, pages) int32` and "
                         "write `{paged: block_table}` on the global Allocate of both K and V";

const char* kRaggedHint = "packed ragged batches: `Allocate cu_seqlens_q in global (batch + 1) int32`, `Let seqlen_q = "
                          "cu_seqlens_q[b + 1] - cu_seqlens_q[b]` after the Grid, and `{ragged: cu_seqlens_q}` on the global Q, "
                          "O and LSE (cu_seqlens_k likewise for K and V)";

bool is_name(const Expr& e, const char* n) { return e.kind == Expr::Kind::Name && e.name == n; }

// `T[g]`, or `T[g + 1] - T[g]` (a cu_seqlens difference): the table and whether it is a difference;
// nullptr when the expression has neither form.
const Expr* length_read(const Expr& v, bool& diff) {
  diff = false;
  if (v.kind == Expr::Kind::Index) return &v;
  if (v.kind != Expr::Kind::Binary || v.op != "-" || v.args.size() != 2) return nullptr;
  const Expr &a = v.args[0], &b = v.args[1];
  if (a.kind != Expr::Kind::Index || b.kind != Expr::Kind::Index || a.name != b.name || a.args.size() != 1 ||
      b.args.size() != 1)
    return nullptr;
  const Expr &ia = a.args[0], &ib = b.args[0];
  const bool plus_one = ia.kind == Expr::Kind::Binary && ia.op == "+" && ia.args.size() == 2 &&
                        ia.args[1].kind == Expr::Kind::Number && ia.args[1].is_int && ia.args[1].value == 1 &&
                        ia.args[0].kind == Expr::Kind::Name && ib.kind == Expr::Kind::Name && ia.args[0].name == ib.name;
  if (!plus_one) return nullptr;
  diff = true;
  return &b;
}

bool reads_tensor(const Expr& e) {
  if (e.kind == Expr::Kind::Index) return true;
  for (const auto& a : e.args)
    if (reads_tensor(a)) return true;
  return false;
}

bool is_batch_plus_one(const Expr& e) {
  return e.kind == Expr::Kind::Binary && e.op == "+" && e.args.size() == 2 && is_name(e.args[0], "batch") &&
         e.args[1].kind == Expr::Kind::Number && e.args[1].is_int && e.args[1].value == 1;
}
}  // namespace

// True when `e` is a Grid variable whose extent is the Dim `dim`: `b = 0: batch` (the tables of
// counts, starts and pages have one row per batch entry, and any other index could read past them)
// or `split = 0: splits` (the part index of a split forward's ragged O and LSE, [b, split, head]).
bool Walker::grid_var_over(const Expr& e, const char* dim) const {
  if (e.kind != Expr::Kind::Name) return false;
  for (const auto& st : prog_.stmts)
    if (st.kind == Stmt::Kind::Grid)
      for (const auto& it : st.grid.items)
        if (it.var == e.name) return is_name(it.extent, dim);
  return false;
}

bool Walker::kv_length_let(const Stmt& s) {
  const Expr& v = s.let.value;
  const std::string& n = s.let.name;
  const bool length_dim = n == "seqlen_k" || n == "seqlen_q";
  if (!reads_tensor(v) && !length_dim) return false;  // an ordinary Let
  const SrcLoc at = pick(v.loc, s.loc);
  const char* hint = n == "seqlen_q" ? kRaggedHint : kLenHint;
  bool diff = false;
  const Expr* read = length_read(v, diff);
  if (!length_dim || !read) {
    rep_.error("TL0416", at,
               !length_dim ? "a Let reads an auxiliary tensor: only `Let seqlen_k = T[b]` / `Let seqlen_q = T[b + 1] - T[b]` "
                             "(a sequence's key or query count) may"
                           : "`Let " + n + "` narrows the Dim " + n + " to one sequence's count: its value is an element of an "
                             "int32 (batch) input, `T[b]`, or the difference of two (batch + 1) entries, `T[b + 1] - T[b]`",
               hint);
    return true;
  }
  auto dim = syms_.find(n);
  const TensorInfo* t = info_.tensors.count(read->name) ? &info_.tensors.at(read->name) : nullptr;
  const bool q = n == "seqlen_q";
  std::string why;
  if (dim == syms_.end() || dim->second.kind != SymKind::Dim) why = n + " is not a Dim of this program";
  else if (!loops_.empty()) why = "`Let " + n + "` inside a loop";
  else if (backward() || combine()) why = "per-sequence counts are read by forward programs only";
  else if (!(q ? info_.q_lengths : info_.kv_lengths).empty()) why = "a second `Let " + n + "`";
  else if (!is_aux(read->name) || !t) why = "'" + read->name + "' is not an auxiliary global tensor declared before this line";
  else if (t->global_dtype != DType::I32 || t->global_shape.size() != 1 ||
           !(diff ? is_batch_plus_one(t->global_shape[0]) : is_name(t->global_shape[0], "batch")))
    why = "'" + read->name + "' must be an int32 " + (diff ? "(batch + 1) tensor (cumulative counts)" : "(batch) tensor");
  else if (read->args.size() != 1 || read->args[0].kind != Expr::Kind::Name || !syms_.count(read->args[0].name) ||
           syms_.at(read->args[0].name).kind != SymKind::Grid || !grid_var_over(read->args[0], "batch"))
    why = "the index of '" + read->name + "' must be the Grid variable of the batch entry (`b = 0: batch`)";
  else if (!info_.kv_batch_var.empty() && info_.kv_batch_var != read->args[0].name)
    why = "the query and key counts are read at different Grid variables";
  else if (q ? (global_alloc_.count("Q") || global_alloc_.count("O") || global_alloc_.count("LSE"))
             : (global_alloc_.count("K") || global_alloc_.count("V")))
    why = "`Let " + n + "` after the global " + (q ? "Q / O / LSE" : "K / V") + ": their views would not see it";
  if (!why.empty()) {
    rep_.error("TL0416", at, why, hint);
    return true;
  }
  (q ? info_.q_lengths : info_.kv_lengths) = read->name;
  (q ? info_.q_lengths_diff : info_.kv_lengths_diff) = diff;
  info_.kv_batch_var = read->args[0].name;
  return true;
}

void Walker::check_ragged(const Stmt& s, const Attr& a) {
  const SrcLoc at = pick(a.loc, s.loc);
  std::string why;
  const std::string& n = s.alloc.name;
  const bool ok_name = n == "Q" || n == "K" || n == "V" || n == "O" || n == "LSE";
  const bool global = s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Global && ok_name;
  const TensorInfo* t = a.value && info_.tensors.count(a.value->name) ? &info_.tensors.at(a.value->name) : nullptr;
  if (!global || backward() || combine()) why = "`ragged` applies to the global Allocate of Q, K, V, O and LSE in a forward program";
  else if (!a.value || a.value->kind != Expr::Kind::Name) why = "`ragged` names the cumulative counts: `{ragged: cu_seqlens_q}`";
  else if (!is_aux(a.value->name) || !t) why = "'" + a.value->name + "' is not an auxiliary global tensor declared before this line";
  else if (t->global_dtype != DType::I32 || t->global_shape.size() != 1 || !is_batch_plus_one(t->global_shape[0]))
    why = "the cumulative counts '" + a.value->name + "' must be an int32 (batch + 1) tensor";
  else if (ragged_.count(n)) why = "`ragged` given twice for '" + n + "'";
  else if (!(s.alloc.offset.size() == 2 || (s.alloc.offset.size() == 3 && (n == "O" || n == "LSE") &&
                                              grid_var_over(s.alloc.offset[1], "splits"))) ||
           !grid_var_over(s.alloc.offset[0], "batch"))
    why = "a ragged view keeps its offset [b, head], b the Grid variable over batch: it selects the sequence's first row "
          "(a split forward's O and LSE: [b, split, head], split the Grid variable over splits)";
  else if ((n == "Q" || n == "O" || n == "LSE") ? info_.q_lengths.empty() : info_.kv_lengths.empty())
    why = std::string("a ragged ") + n + " needs its sequence's count first: `Let " +
          ((n == "Q" || n == "O" || n == "LSE") ? "seqlen_q" : "seqlen_k") + " = " + a.value->name + "[b + 1] - " +
          a.value->name + "[b]`";
  if (!why.empty()) {
    rep_.error("TL0416", at, why, kRaggedHint);
    ragged_refused_ = true;
    return;
  }
  ragged_[n] = &a;
}

void Walker::check_paged(const Stmt& s, const Attr& a) {
  const SrcLoc at = pick(a.loc, s.loc);
  std::string why;
  const bool kv = s.kind == Stmt::Kind::Allocate && s.alloc.space == Space::Global &&
                  (s.alloc.name == "K" || s.alloc.name == "V");
  const TensorInfo* t = a.value && info_.tensors.count(a.value->name) ? &info_.tensors.at(a.value->name) : nullptr;
  auto dim = syms_.find("page_size");
  if (!kv || backward() || combine()) why = "`paged` applies to the global Allocate of K and V in a forward program";
  else if (!a.value || a.value->kind != Expr::Kind::Name) why = "`paged` names the block table: `{paged: block_table}`";
  else if (!is_aux(a.value->name) || !t) why = "'" + a.value->name + "' is not an auxiliary global tensor declared before this line";
  else if (t->global_dtype != DType::I32 || t->global_shape.size() != 2 || !is_name(t->global_shape[0], "batch"))
    why = "the block table '" + a.value->name + "' must be an int32 (batch, pages) tensor";
  else if (dim == syms_.end() || dim->second.kind != SymKind::Dim) why = "a paged K / V needs the Dim page_size (rows per page)";
  else if (paged_.count(s.alloc.name)) why = "`paged` given twice for '" + s.alloc.name + "'";
  else if (s.alloc.offset.size() != 2 || !grid_var_over(s.alloc.offset[0], "batch"))
    why = "a paged view keeps its offset [b, kv_head], b the Grid variable over batch: it selects the block table's row";
  if (!why.empty()) {
    rep_.error("TL0416", at, why, kPagedHint);
    return;
  }
  paged_[s.alloc.name] = &a;
}

// The `{ragged}` views agree: Q, O, LSE by one table, K, V by one, the tables those of the Lets. A
// ragged Q, O, LSE may also be GQA-packed (`{pack: G}`, that all three agree is finish_pack's TL0412):
// row r of sequence b's view is query T[b] + r / G of head kv_head * G + r % G. K / V are never packed.
void Walker::finish_ragged() {
  if (!info_.q_lengths.empty() && !ragged_.count("Q")) {  // a per-sequence query count is the count of ragged rows
    rep_.error("TL0416", global_alloc_.count("Q") ? global_alloc_.at("Q") : SrcLoc{},
               "`Let seqlen_q` narrows the queries of packed ragged sequences, and Q is not ragged",
               "give Q, O and LSE `{ragged: " + info_.q_lengths + "}`, or remove the Let (padded batches have seqlen_q rows each)");
    return;
  }
  if (ragged_.empty() || ragged_refused_) return;  // a refused `{ragged}` said what is wrong already
  auto table = [&](const char* n) { return ragged_.count(n) ? ragged_.at(n)->value->name : std::string(); };
  // at the global Allocate that lacks (or has another) table, else at the first `{ragged}`
  auto where = [&](std::initializer_list<const char*> names, const std::string& want) {
    for (const char* n : names)
      if (global_alloc_.count(n) && table(n) != want) return global_alloc_.at(n);
    return pick(ragged_.begin()->second->loc, SrcLoc{});
  };
  auto fail_at = [&](SrcLoc at, const std::string& why) { rep_.error("TL0416", at, why, kRaggedHint); };
  auto fail = [&](const std::string& why) { fail_at(pick(ragged_.begin()->second->loc, SrcLoc{}), why); };
  const std::string q = table("Q"), o = table("O"), l = table("LSE"), k = table("K");
  const std::string v = v_is_view_of_k() ? k : table("V");  // V as a view of K: K's rows
  const std::string qs = q.empty() ? o.empty() ? l : o : q, ks = k.empty() ? v : k;
  if (q != o || (global_alloc_.count("LSE") && l != q))
    return fail_at(where({"Q", "O", "LSE"}, qs), "Q, O and LSE are rows of the same sequences: give all of them `{ragged: " + qs +
                                                     "}` or none");
  if (k != v) return fail_at(where({"K", "V"}, ks), "K and V are rows of the same sequences: give both `{ragged: " + ks + "}` or neither");
  if (!k.empty() && !paged_.empty()) return fail("K and V are either ragged (packed sequences) or paged, not both");
  if (!k.empty() && !split_outputs_.empty())
    return rep_.error("TL0416", where({"K"}, ""),
                      "the keys are split ([b, split, head] on O and LSE) but K and V are ragged (packed sequences): split "
                      "keys are supported over a KV cache only",
                      "split the keys of a KV cache (`Let seqlen_k = cache_seqlens[b]`, K and V `{paged: block_table}` or "
                      "at [b, kv_head] without `ragged`), or give O and LSE the offset [b, head] (no parts)");
  if (!q.empty() && info_.q_lengths != q)
    return fail("Q is ragged by '" + q + "' but `Let seqlen_q` reads '" + info_.q_lengths + "': the counts and the rows must come "
                "from the same table");
  if (!k.empty() && info_.kv_lengths_diff && info_.kv_lengths != k)
    return fail("K is ragged by '" + k + "' but `Let seqlen_k` reads '" + info_.kv_lengths + "'");
  info_.q_ragged = q;
  info_.kv_ragged = k;
}

void Walker::finish_kv_cache() {
  finish_ragged();
  if (paged_.empty()) return;
  const bool v_view = v_is_view_of_k();  // V is K's first columns: in K's pages
  const bool k = paged_.count("K"), v = v_view ? k : paged_.count("V");
  if (k != v) {
    const char* missing = k ? "V" : "K";
    rep_.error("TL0416", global_alloc_.count(missing) ? global_alloc_.at(missing) : pick(paged_.begin()->second->loc, SrcLoc{}),
               std::string("global ") + (k ? "K" : "V") + " is paged and " + missing + " is not: the cache holds both in the "
               "same pages", kPagedHint);
    return;
  }
  if (!v_view && paged_.at("K")->value->name != paged_.at("V")->value->name) {
    rep_.error("TL0416", pick(paged_.at("V")->loc, SrcLoc{}), "K and V are paged by different block tables", kPagedHint);
    return;
  }
  info_.paged = paged_.at("K")->value->name;
}

}  // namespace qattn::tl::detail
