// The TL interpreter on a KV cache (docs/tl.md, "KV caches"): tests/tl/kv_cache.tl passes on ragged
// sizes (pages smaller and larger than the key tile, key counts that cross tiles and pages, an
// empty and a full sequence); planted edits fail with TL0801: the key count read for the wrong
// batch entry, K read through another sequence's pages, the key count bound after the K / V views, the last
// key tile skipped. Rows no key occupies
// hold NaN, so a program that reads one as a value fails.
// DeepSeek's absorbed MLA (tests/tl/mla_absorbed_paged.tl, mla_absorbed_cache.tl): V is the first dv
// columns of the latent cache K (`{view: K}`, no global V); the reference computes with V = K[:, :dv]
// of each sequence's keys, paged, contiguous or packed ragged; a dropped Rescale of O and an independent global V
// (the reference's V then differs from K's columns, which the program reads) fail.
#include <gtest/gtest.h>

#include "interp_test_util.h"
#include "tl/interp.h"

namespace qattn::tl {
namespace {

using testutil::kCorpus;
using testutil::Outcome;
using testutil::run_text;
using testutil::slurp;

std::string kv_with(const std::string& from, const std::string& to) { return testutil::corpus_with("kv_cache.tl", from, to); }

RunConfig kv_dims(Precision prec, int64_t sq, int64_t sk, int64_t page_size, uint64_t seed = 3) {
  RunConfig c;
  c.dims = {{"batch", 4}, {"heads_q", 4}, {"heads_kv", 2}, {"seqlen_q", sq}, {"seqlen_k", sk}, {"d", 16},
            {"page_size", page_size}, {"pages", (sk + page_size - 1) / page_size}};
  c.precision = prec;
  c.seed = seed;
  return c;
}

TEST(KvCache, UnmodifiedProgramPassesOnRaggedSizes) {
  struct Size { int64_t sq, sk, ps; };
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (Size z : {Size{1, 96, 16}, Size{1, 70, 8}, Size{4, 50, 32}, Size{7, 33, 64}, Size{1, 17, 1}}) {
      SCOPED_TRACE("seqlen_q=" + std::to_string(z.sq) + " seqlen_k=" + std::to_string(z.sk) + " page_size=" + std::to_string(z.ps));
      Outcome o = run_text(slurp(kCorpus / "kv_cache.tl"), kv_dims(prec, z.sq, z.sk, z.ps));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
    }
}

TEST(KvCache, TableLargerThanTheCacheAndPagesLeftOverPass) {
  RunConfig c = kv_dims(Precision::FP64, 2, 40, 16);
  c.dims["pages"] = 5;  // 80 rows of table for 40 keys
  Outcome o = run_text(slurp(kCorpus / "kv_cache.tl"), c);
  EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
}

struct Planted {
  const char* what;
  const char* from;
  const char* to;
};

TEST(KvCache, PlantedBugsFail) {
  const Planted bugs[] = {
      {"the key count of another entry", "\nLet seqlen_k = cache_seqlens[b]", "\nLet seqlen_k = cache_seqlens[kv_head]"},
      {"K paged by the wrong row", "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head]",
       "Allocate K in global (seqlen_k, d) bf16 with offset [(b + 1) % batch, kv_head]"},
      {"the key count bound after K and V (their views span the whole cache)",
       "\nLet seqlen_k = cache_seqlens[b]\nAllocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head] {pack: heads_q / heads_kv}\n"
       "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head] {paged: block_table}\n"
       "Allocate V in global (seqlen_k, d) bf16 with offset [b, kv_head] {paged: block_table}\n",
       "\nAllocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head] {pack: heads_q / heads_kv}\n"
       "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head] {paged: block_table}\n"
       "Allocate V in global (seqlen_k, d) bf16 with offset [b, kv_head] {paged: block_table}\nLet seqlen_k = cache_seqlens[b]\n"},
      {"the last key tile skipped", "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: seqlen_k / BN"},
  };
  for (const auto& b : bugs)
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(kv_with(b.from, b.to), kv_dims(prec, 3, 70, 16));
      EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
}

TEST(KvCache, TooSmallATableIsADiagnostic) {
  RunConfig c = kv_dims(Precision::FP64, 1, 64, 16);
  c.dims["pages"] = 3;  // 48 rows for 64 keys
  Outcome o = run_text(slurp(kCorpus / "kv_cache.tl"), c);
  EXPECT_FALSE(o.r.ran);
  EXPECT_TRUE(o.has("TL0901")) << o.diags;
}

// ---- absorbed MLA: V = the first dv columns of K -----------------------------------------------

// An absorbed-MLA golden program at d = 96, dv = 64 (dv < d: a V read from other columns of K, or
// from other data, differs), with an optional edit.
std::string mla_small(const char* file, const std::string& from = "", const std::string& to = "") {
  std::string t = testutil::corpus_with(file, "d = 576, dv = 512", "d = 96, dv = 64");
  if (from.empty()) return t;
  const size_t at = t.find(from, t.find("\nKernel "));  // (not in the heading comment)
  EXPECT_NE(at, std::string::npos) << file << " no longer contains: " << from;
  if (at != std::string::npos) t.replace(at, from.size(), to);
  return t;
}

// page_size 0: the contiguous cache (mla_absorbed_cache.tl has no pages).
RunConfig mla_dims(Precision prec, int64_t sq, int64_t sk, int64_t page_size, uint64_t seed = 2) {
  RunConfig c;
  c.dims = {{"batch", 4}, {"heads_q", 8}, {"heads_kv", 2}, {"seqlen_q", sq}, {"seqlen_k", sk}};
  if (page_size > 0) c.dims["page_size"] = page_size, c.dims["pages"] = (sk + page_size - 1) / page_size;
  c.precision = prec;
  c.seed = seed;
  return c;
}

struct MlaCase { const char* file; int64_t sq, sk, ps; };
const MlaCase kMlaCases[] = {{"mla_absorbed_paged.tl", 1, 150, 32}, {"mla_absorbed_paged.tl", 3, 70, 16},
                             {"mla_absorbed_paged.tl", 2, 33, 64}, {"mla_absorbed_cache.tl", 1, 130, 0},
                             {"mla_absorbed_cache.tl", 5, 64, 0}};

TEST(KvCache, AbsorbedMlaReadsVFromK) {
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (const MlaCase& z : kMlaCases) {
      SCOPED_TRACE(std::string(z.file) + " seqlen_q=" + std::to_string(z.sq) + " seqlen_k=" + std::to_string(z.sk) +
                   (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(mla_small(z.file), mla_dims(prec, z.sq, z.sk, z.ps));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
      EXPECT_NE(o.r.summary.find("d_qk=96 d_v=64"), std::string::npos) << o.r.summary;  // d_v from the view
      if (prec == Precision::FP64) EXPECT_LT(o.r.rel_err, 1e-12) << o.r.summary;
    }
  // At DeepSeek's width: 576 columns, the first 512 the values.
  Outcome full = run_text(slurp(kCorpus / "mla_absorbed_paged.tl"), mla_dims(Precision::Storage, 1, 100, 32));
  EXPECT_TRUE(full.r.passed) << full.r.summary << full.diags;
  EXPECT_NE(full.r.summary.find("d_qk=576 d_v=512"), std::string::npos) << full.r.summary;
}

TEST(KvCache, AbsorbedMlaPlantedBugsFail) {
  const Planted bugs[] = {
      {"the Rescale of O dropped", "  Compute Rescale O, alpha\n", ""},
      // the program still reads V through the view (K's columns); the reference now has this V
      {"an independent global V beside the view", "Allocate O in global",
       "Allocate V in global (seqlen_k, dv) bf16 with offset [b, kv_head] {paged: block_table}\nAllocate O in global"},
      {"the view's key count of another entry", "\nLet seqlen_k = cache_seqlens[b]", "\nLet seqlen_k = cache_seqlens[kv_head]"},
  };
  for (const auto& b : bugs)
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(mla_small("mla_absorbed_paged.tl", b.from, b.to), mla_dims(prec, 2, 70, 16));
      EXPECT_TRUE(o.r.ran) << o.diags;
      EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
  // The contiguous cache: the dropped Rescale, and an independent V there too.
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"  Compute Rescale O, alpha\n", ""},
                                 {"Allocate O in global", "Allocate V in global (seqlen_k, dv) bf16 with offset [b, kv_head]\nAllocate O in global"}}) {
    SCOPED_TRACE(from + " -> " + to);
    Outcome o = run_text(mla_small("mla_absorbed_cache.tl", from, to), mla_dims(Precision::FP64, 3, 90, 0));
    EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
    EXPECT_TRUE(o.has("TL0801")) << o.diags;
  }
}

// Packed ragged keys (tests/tl/varlen.tl made absorbed: dv < d, V a view of the ragged K): V is each
// sequence's K rows' first dv columns, packed as K is.
TEST(KvCache, AbsorbedMlaOverRaggedKeys) {
  std::string t = slurp(kCorpus / "varlen.tl");
  const std::pair<const char*, const char*> edits[] = {
      {"Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d\n", "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d, dv\n"},
      {"Allocate V in global (seqlen_k, d) bf16 with offset [b, head / (heads_q / heads_kv)] {ragged: cu_seqlens_k}\n", ""},
      {"Allocate O in global (seqlen_q, d)", "Allocate O in global (seqlen_q, dv)"},
      {"Allocate V in shared (BN, d) bf16", "Allocate V in shared (BN, dv) bf16 {view: K}"},
      {"Allocate V in register (BN, d)", "Allocate V in register (BN, dv)"},
      {"Allocate O in register (BM, d)", "Allocate O in register (BM, dv)"},
      {"  Copy V (BN, d) in coordinate [j, 0] from global to shared\n", ""},
      {"Copy O (BM, d) in coordinate", "Copy O (BM, dv) in coordinate"}};
  for (const auto& [from, to] : edits) {
    const size_t at = t.find(from, t.find("\nKernel "));
    ASSERT_NE(at, std::string::npos) << "varlen.tl no longer contains: " << from;
    t.replace(at, std::string(from).size(), to);
  }
  RunConfig c;
  c.dims = {{"batch", 4}, {"heads_q", 4}, {"heads_kv", 2}, {"seqlen_q", 30}, {"seqlen_k", 45}, {"d", 24}, {"dv", 16}};
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    c.precision = prec;
    Outcome o = run_text(t, c);
    EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
    EXPECT_NE(o.r.summary.find("d_qk=24 d_v=16"), std::string::npos) << o.r.summary;
  }
  c.precision = Precision::FP64;
  const size_t at = t.find("  Compute Rescale O, alpha\n");
  ASSERT_NE(at, std::string::npos);
  Outcome bug = run_text(t.erase(at, std::string("  Compute Rescale O, alpha\n").size()), c);
  EXPECT_FALSE(bug.r.passed) << bug.r.summary;
  EXPECT_TRUE(bug.has("TL0801")) << bug.diags;
}

}  // namespace
}  // namespace qattn::tl
