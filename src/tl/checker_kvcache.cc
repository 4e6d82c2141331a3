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

bool is_name(const Expr& e, const char* n) { return e.kind == Expr::Kind::Name && e.name == n; }
}  // namespace

bool Walker::kv_length_let(const Stmt& s) {
  const Expr& v = s.let.value;
  if (v.kind != Expr::Kind::Index && s.let.name != "seqlen_k") return false;  // an ordinary Let
  const SrcLoc at = pick(v.loc, s.loc);
  if (s.let.name != "seqlen_k" || v.kind != Expr::Kind::Index) {
    rep_.error("TL0416", at,
               s.let.name != "seqlen_k" ? "a Let reads the tensor '" + v.name + "': only `Let seqlen_k = T[b]` (a KV cache's "
                                                                                 "key count per sequence) may"
                                        : "`Let seqlen_k` narrows the Dim seqlen_k to one sequence's key count: its value "
                                          "is an element of an int32 (batch) input",
               kLenHint);
    return true;
  }
  auto dim = syms_.find("seqlen_k");
  const TensorInfo* t = info_.tensors.count(v.name) ? &info_.tensors.at(v.name) : nullptr;
  std::string why;
  if (dim == syms_.end() || dim->second.kind != SymKind::Dim) why = "seqlen_k is not a Dim of this program";
  else if (!loops_.empty()) why = "`Let seqlen_k` inside a loop";
  else if (backward() || combine()) why = "a KV cache is read by forward programs only";
  else if (!info_.kv_lengths.empty()) why = "a second `Let seqlen_k`";
  else if (!is_aux(v.name) || !t) why = "'" + v.name + "' is not an auxiliary global tensor declared before this line";
  else if (t->global_dtype != DType::I32 || t->global_shape.size() != 1 || !is_name(t->global_shape[0], "batch"))
    why = "'" + v.name + "' must be an int32 (batch) tensor";
  else if (v.args.size() != 1 || v.args[0].kind != Expr::Kind::Name || !syms_.count(v.args[0].name) ||
           syms_.at(v.args[0].name).kind != SymKind::Grid)
    why = "the index of '" + v.name + "' must be the Grid variable of the batch entry";
  else if (global_alloc_.count("K") || global_alloc_.count("V"))
    why = "`Let seqlen_k` after the global K / V: their views would not see it";
  if (!why.empty()) {
    rep_.error("TL0416", at, why, kLenHint);
    return true;
  }
  info_.kv_lengths = v.name;
  info_.kv_batch_var = v.args[0].name;
  return true;
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
  else if (s.alloc.offset.size() != 2) why = "a paged view keeps its offset [b, kv_head]: b selects the block table's row";
  if (!why.empty()) {
    rep_.error("TL0416", at, why, kPagedHint);
    return;
  }
  paged_[s.alloc.name] = &a;
}

void Walker::finish_kv_cache() {
  if (paged_.empty()) return;
  const bool k = paged_.count("K"), v = paged_.count("V");
  if (k != v) {
    const char* missing = k ? "V" : "K";
    rep_.error("TL0416", global_alloc_.count(missing) ? global_alloc_.at(missing) : pick(paged_.begin()->second->loc, SrcLoc{}),
               std::string("global ") + (k ? "K" : "V") + " is paged and " + missing + " is not: the cache holds both in the "
               "same pages", kPagedHint);
    return;
  }
  if (paged_.at("K")->value->name != paged_.at("V")->value->name) {
    rep_.error("TL0416", pick(paged_.at("V")->loc, SrcLoc{}), "K and V are paged by different block tables", kPagedHint);
    return;
  }
  info_.paged = paged_.at("K")->value->name;
}

}  // namespace qattn::tl::detail
