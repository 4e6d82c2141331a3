// The TL checker on packed ragged batches with GQA packing (docs/tl.md, "Ragged batches", "GQA
// packing"): `{ragged: cu_seqlens_q, pack: heads_q / heads_kv}` on the global Q, O and LSE
// (tests/tl/varlen_packed.tl) is accepted, in either order of the two attributes, without LSE and
// with one table for queries and keys. The inconsistent combinations are still refused: `{pack}` on
// some of Q, O, LSE or by another G (TL0412), `{ragged}` on some of them (TL0416), a packed K / V
// (TL0412), K / V ragged and paged at once (TL0416), a packed ragged view at the query head's offset
// with the Grid over heads_q (TL0601: the range analysis samples ragged programs at the Dims'
// values), Score / Mask declarations in a packed ragged program (TL0412). Split keys over ragged
// queries and a KV cache: O / LSE at [b, split, head] accepted, Q there or O at [b, head, split] refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checker_test_util.h"

namespace qattn::tl {
namespace {

using test::line_of;
using test::replace;
using test::run;

std::string packed() {
  std::ifstream in(std::filesystem::path(QATTN_SOURCE_DIR) / "tests" / "tl" / "varlen_packed.tl", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kQ = "Allocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q, pack: heads_q / heads_kv}";
const char* kO = "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q, pack: heads_q / heads_kv}";
const char* kLse = "Allocate LSE in global (seqlen_q) fp32 with offset [b, kv_head] {ragged: cu_seqlens_q, pack: heads_q / heads_kv}";
const char* kK = "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k}";

TEST(checkerVarlen, RaggedAndPackedIsAccepted) {
  const std::string t = packed();
  ASSERT_NE(t.find(kQ), std::string::npos);
  auto r = run(t);
  EXPECT_TRUE(r.ok) << r.rendered;
  EXPECT_TRUE(r.diags.empty()) << r.rendered;
  // the attributes in the other order
  std::string swapped = replace(t, kQ, "Allocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head] {pack: heads_q / heads_kv, ragged: cu_seqlens_q}");
  r = run(swapped);
  EXPECT_TRUE(r.ok) << r.rendered;
  // without LSE (O only): still consistent
  std::string no_lse = replace(t, std::string(kLse) + "\n", "");
  no_lse = replace(no_lse, "Copy LSE (BM) in coordinate [m_block] from register to global\n", "");
  r = run(no_lse);
  EXPECT_TRUE(r.ok) << r.rendered;
  // one table for queries and keys (self-attention)
  std::string one = replace(t, "Let seqlen_k = cu_seqlens_k[b + 1] - cu_seqlens_k[b]", "Let seqlen_k = cu_seqlens_q[b + 1] - cu_seqlens_q[b]");
  one = replace(one, kK, "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q}");
  one = replace(one, "Allocate V in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k}",
                "Allocate V in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q}");
  r = run(one);
  EXPECT_TRUE(r.ok) << r.rendered;
}

TEST(checkerVarlen, PackOnSomeViewsIsRefused) {
  const std::string t = packed();
  struct Case { const char* what; const char* from; const char* to; const char* at; };
  const Case cases[] = {
      {"O ragged, not packed", kO, "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q}", "Allocate O in global"},
      {"LSE ragged, not packed", kLse, "Allocate LSE in global (seqlen_q) fp32 with offset [b, kv_head] {ragged: cu_seqlens_q}",
       "Allocate LSE in global"},
      {"Q ragged, not packed", kQ, "Allocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q}",
       "Allocate Q in global"},
      {"O packed by another G", kO, "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q, pack: heads_q}",
       "Allocate O in global"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string bad = replace(t, c.from, c.to);
    auto r = run(bad);
    EXPECT_FALSE(r.ok) << r.rendered;
    EXPECT_CODE_AT(r, "TL0412", bad, c.at);
    EXPECT_FALSE(r.has("TL0416")) << r.rendered;  // the views are all ragged: the pack alone is wrong
  }
}

TEST(checkerVarlen, RaggedOnSomeViewsIsRefused) {
  const std::string t = packed();
  struct Case { const char* what; const char* from; const char* to; const char* at; };
  const Case cases[] = {
      {"O packed, not ragged", kO, "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {pack: heads_q / heads_kv}", "Allocate O in global"},
      {"LSE packed, not ragged", kLse, "Allocate LSE in global (seqlen_q) fp32 with offset [b, kv_head] {pack: heads_q / heads_kv}",
       "Allocate LSE in global"},
      {"O by the keys' table", kO,
       "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k, pack: heads_q / heads_kv}", "Allocate O in global"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string bad = replace(t, c.from, c.to);
    auto r = run(bad);
    EXPECT_FALSE(r.ok) << r.rendered;
    EXPECT_CODE_AT(r, "TL0416", bad, c.at);
    EXPECT_FALSE(r.has("TL0412")) << r.rendered;  // packed alike: the rows' sequences are wrong
  }
}

TEST(checkerVarlen, PackedKeysAndPerHeadOffsetsAreRefused) {
  const std::string t = packed();
  // K and V are never packed: each kv head's keys serve the whole group
  std::string k = replace(t, kK, "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k, pack: heads_q / heads_kv}");
  auto r = run(k);
  EXPECT_FALSE(r.ok);
  EXPECT_CODE_AT(r, "TL0412", k, "Allocate K in global");
  // the unpacked Grid over query heads with a packed view: the offset passes heads_q / G
  std::string heads = replace(t, "Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_kv, b = 0: batch",
                              "Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_q, b = 0: batch");
  r = run(heads);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.has("TL0601")) << r.rendered;
  // K / V paged and ragged at once stays refused beside the pack
  std::string paged = replace(t, "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d", "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d, page_size, pages");
  paged = replace(paged, "Allocate cu_seqlens_k in global (batch + 1) int32",
                  "Allocate cu_seqlens_k in global (batch + 1) int32\nAllocate block_table in global (batch, pages) int32");
  paged = replace(paged, kK, "Allocate K in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k, paged: block_table}");
  paged = replace(paged, "Allocate V in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k}",
                  "Allocate V in global (seqlen_k, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_k, paged: block_table}");
  r = run(paged);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.has("TL0416")) << r.rendered;
  EXPECT_NE(r.rendered.find("either ragged"), std::string::npos) << r.rendered;
}

TEST(checkerVarlen, DeclarationsInAPackedRaggedProgramAreRefused) {
  const std::string t = packed();
  std::string decl = replace(t, "Allocate cu_seqlens_q in global (batch + 1) int32",
                             "Allocate cu_seqlens_q in global (batch + 1) int32\nMask local = kv_idx > q_idx - 8");
  auto r = run(decl);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.has("TL0412")) << r.rendered;
}

// Split keys over ragged queries and a KV cache (tests/tl/varlen_split_cache.tl): a ragged O / LSE at
// [b, split, kv_head] (split the Grid variable over splits) is accepted; a ragged Q at that offset, or
// O with the part index last, is refused (TL0416).
TEST(checkerVarlen, RaggedSplitOverACacheIsAccepted) {
  std::ifstream in(std::filesystem::path(QATTN_SOURCE_DIR) / "tests" / "tl" / "varlen_split_cache.tl", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string t = ss.str();
  auto r = run(t);
  EXPECT_TRUE(r.ok) << r.rendered;
  EXPECT_TRUE(r.diags.empty()) << r.rendered;
  const std::string q = "Allocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head]";
  const std::string q_split = replace(t, q, "Allocate Q in global (seqlen_q, d) bf16 with offset [b, split, kv_head]");
  r = run(q_split);
  EXPECT_FALSE(r.ok);
  EXPECT_CODE_AT(r, "TL0416", q_split, "Allocate Q in global");
  EXPECT_NE(r.rendered.find("keeps its offset [b, head]"), std::string::npos) << r.rendered;
  const std::string o = "Allocate O in global (seqlen_q, d) bf16 with offset [b, split, kv_head]";
  const std::string o_last = replace(t, o, "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head, split]");
  r = run(o_last);
  EXPECT_FALSE(r.ok);
  EXPECT_CODE_AT(r, "TL0416", o_last, "Allocate O in global");
  // the middle index a Grid variable, but not the one over splits
  const std::string o_head = replace(t, o, "Allocate O in global (seqlen_q, d) bf16 with offset [b, m_block, kv_head]");
  r = run(o_head);
  EXPECT_FALSE(r.ok);
  EXPECT_CODE_AT(r, "TL0416", o_head, "Allocate O in global");
}

}  // namespace
}  // namespace qattn::tl
