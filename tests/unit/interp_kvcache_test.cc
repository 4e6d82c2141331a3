// The TL interpreter on a KV cache (docs/tl.md, "KV caches"): tests/tl/kv_cache.tl passes on ragged
// sizes (pages smaller and larger than the key tile, key counts that cross tiles and pages, an
// empty and a full sequence); planted edits fail with TL0801: the key count read for the wrong
// batch entry, K read through another sequence's pages, the key count bound after the K / V views, the last
// key tile skipped. Rows no key occupies
// hold NaN, so a program that reads one as a value fails.
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

}  // namespace
}  // namespace qattn::tl
