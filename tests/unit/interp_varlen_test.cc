// The TL interpreter on packed ragged batches (docs/tl.md, "Ragged batches"): tests/tl/varlen.tl
// passes on sizes whose sequences cross the query and key tiles (a full, an empty and random
// sequences; more keys than queries and fewer); planted edits fail with TL0801: the queries of
// another sequence, the last key tile skipped, the rows of O stored for the next sequence, the
// causal mask dropped (rows past a sequence's keys are other sequences' keys or NaN). Writes outside
// a block's own sequence are counted even when a later block overwrites them. With GQA packing too
// (tests/tl/varlen_packed.tl, `{ragged, pack}` on Q, O, LSE): passes at several sizes, the draws
// hold a one-query (decoding) sequence, and planted bugs fail: O not packed (the checker's TL0412,
// and the interpreter's rows land at the wrong heads), a Mask of the wrong alignment or none, a loop
// bound without the alignment, a Grid of cdiv(seqlen_q, BM) query tiles (rows never written). Ragged
// packed queries over a paged KV cache (tests/tl/kv_cache.tl made ragged) pass too.
#include <gtest/gtest.h>

#include "interp_test_util.h"
#include "tl/checker.h"
#include "tl/interp.h"

namespace qattn::tl {
namespace {

using testutil::kCorpus;
using testutil::check_codes;
using testutil::Outcome;
using testutil::run_text;
using testutil::slurp;

std::string varlen_with(const std::string& from, const std::string& to) { return testutil::corpus_with("varlen.tl", from, to); }

RunConfig dims(Precision prec, int64_t batch, int64_t sq, int64_t sk, uint64_t seed = 3) {
  RunConfig c;
  c.dims = {{"batch", batch}, {"heads_q", 4}, {"heads_kv", 2}, {"seqlen_q", sq}, {"seqlen_k", sk}, {"d", 16}};
  c.precision = prec;
  c.seed = seed;
  return c;
}

TEST(Varlen, UnmodifiedProgramPassesOnRaggedSizes) {
  struct Size { int64_t batch, sq, sk; };
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (Size z : {Size{3, 40, 40}, Size{5, 17, 70}, Size{4, 33, 9}, Size{1, 16, 16}, Size{6, 1, 31}}) {
      SCOPED_TRACE("batch=" + std::to_string(z.batch) + " seqlen_q=" + std::to_string(z.sq) + " seqlen_k=" + std::to_string(z.sk));
      Outcome o = run_text(slurp(kCorpus / "varlen.tl"), dims(prec, z.batch, z.sq, z.sk));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
    }
}

TEST(Varlen, OneTableForQueriesAndKeysPasses) {  // self-attention: cu_seqlens_q == cu_seqlens_k
  std::string t = varlen_with("Let seqlen_k = cu_seqlens_k[b + 1] - cu_seqlens_k[b]", "Let seqlen_k = cu_seqlens_q[b + 1] - cu_seqlens_q[b]");
  for (const char* n : {"K", "V"}) {
    const std::string from = std::string("Allocate ") + n + " in global (seqlen_k, d) bf16 with offset [b, head / (heads_q / heads_kv)] {ragged: cu_seqlens_k}";
    const size_t at = t.find(from);
    ASSERT_NE(at, std::string::npos);
    t.replace(at, from.size(), std::string("Allocate ") + n + " in global (seqlen_k, d) bf16 with offset [b, head / (heads_q / heads_kv)] {ragged: cu_seqlens_q}");
  }
  Outcome o = run_text(t, dims(Precision::FP64, 4, 30, 30));
  EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
}

struct Planted {
  const char* what;
  const char* from;
  const char* to;
};

TEST(Varlen, PlantedBugsFail) {
  const Planted bugs[] = {
      {"the queries of another sequence", "Allocate Q in global (seqlen_q, d) bf16 with offset [b, head]",
       "Allocate Q in global (seqlen_q, d) bf16 with offset [(b + 1) % batch, head]"},
      {"O stored for the next sequence", "Allocate O in global (seqlen_q, d) bf16 with offset [b, head]",
       "Allocate O in global (seqlen_q, d) bf16 with offset [(b + 1) % batch, head]"},
      {"the last key tile skipped", "for j = 0: cdiv(seqlen_k, BN)", "for j = 0: seqlen_k / BN"},
      {"the causal mask dropped", "  Compute Mask S at [m_block, j] with causal\n", "\n"},
      {"the grid sized for the shortest tile count", "Grid m_block = 0: cdiv(seqlen_q, BM)", "Grid m_block = 0: seqlen_q / BM"},
  };
  for (const auto& b : bugs)
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(varlen_with(b.from, b.to), dims(prec, 4, 37, 45));
      EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
}

TEST(Varlen, StoresOutsideTheSequenceAreCounted) {
  // Every block stores its rows for the next sequence too: the later, right stores overwrite the
  // values, but the elements were written by blocks of another sequence.
  Outcome o = run_text(varlen_with("Copy O (BM, d) in coordinate [m_block, 0] from register to global\n",
                                   "Copy O (BM, d) in coordinate [m_block, 0] from register to global\n"
                                   "Allocate O in global (seqlen_q, d) bf16 with offset [(b + 1) % batch, head] {ragged: cu_seqlens_q}\n"
                                   "Copy O (BM, d) in coordinate [m_block, 0] from register to global\n"),
                       dims(Precision::FP64, 4, 20, 20));
  EXPECT_FALSE(o.r.passed) << o.r.summary;
  EXPECT_NE(o.r.summary.find("written outside their sequence"), std::string::npos) << o.r.summary;
}

// ---- GQA-packed ragged batches (tests/tl/varlen_packed.tl) ----------------------------------

std::string packed_with(const std::string& from, const std::string& to) { return testutil::corpus_with("varlen_packed.tl", from, to); }

RunConfig packed_dims(Precision prec, int64_t batch, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, uint64_t seed = 3) {
  RunConfig c = dims(prec, batch, sq, sk, seed);
  c.dims["heads_q"] = hq;
  c.dims["heads_kv"] = hkv;
  return c;
}


struct PackedSize { int64_t batch, hq, hkv, sq, sk; };

TEST(VarlenPacked, UnmodifiedProgramPassesOnRaggedSizes) {
  // BM = 16: with G = 4 a tile holds 4 queries of 4 heads, so tiles end inside sequences of 9 and 40
  // queries; sequences of one query (seqlen_q = 1, and the draws' entry 3), more keys and fewer.
  const PackedSize sizes[] = {{4, 8, 2, 40, 40}, {5, 4, 1, 9, 50}, {6, 6, 2, 1, 31}, {4, 6, 2, 17, 70},
                              {3, 3, 3, 33, 9},  {1, 4, 2, 16, 16}, {7, 8, 1, 13, 29}};
  EXPECT_TRUE(check_codes(testutil::slurp(kCorpus / "varlen_packed.tl")).empty());
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (PackedSize z : sizes) {
      SCOPED_TRACE("batch=" + std::to_string(z.batch) + " heads=" + std::to_string(z.hq) + "/" + std::to_string(z.hkv) +
                   " seqlen_q=" + std::to_string(z.sq) + " seqlen_k=" + std::to_string(z.sk));
      Outcome o = run_text(slurp(kCorpus / "varlen_packed.tl"), packed_dims(prec, z.batch, z.hq, z.hkv, z.sq, z.sk));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
      EXPECT_EQ(o.r.unwritten, 0) << o.r.summary;
    }
}

TEST(VarlenPacked, TheDrawsMixDecodingWithPrefill) {
  // The tables the run filled (the reference_variant callback sees them; no variant: plain causal):
  // entry 0 the longest sequence, entry 1 empty, entry 3 a single query beside keys of its own.
  std::vector<double> cu_q, cu_k;
  RunConfig c = packed_dims(Precision::FP64, 5, 8, 2, 40, 40);
  c.reference_variant = [&](const spec::AuxMap& aux) {
    cu_q = aux.at("cu_seqlens_q").data;
    cu_k = aux.at("cu_seqlens_k").data;
    return spec::ScoreVariant{};
  };
  Outcome o = run_text(slurp(kCorpus / "varlen_packed.tl"), c);
  EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
  ASSERT_EQ(cu_q.size(), 6u);
  ASSERT_EQ(cu_k.size(), 6u);
  EXPECT_EQ(cu_q[1] - cu_q[0], 40);
  EXPECT_EQ(cu_q[2] - cu_q[1], 0);
  EXPECT_EQ(cu_q[4] - cu_q[3], 1);
  EXPECT_GE(cu_k[4] - cu_k[3], 1);  // the decoding sequence's keys
  EXPECT_GT(cu_q[5] - cu_q[4], 0);
}

TEST(VarlenPacked, OutputNotPackedIsRefusedAndFails) {
  // O without `{pack}`: the checker refuses (TL0412); interpreted anyway, O's rows land at the heads
  // of the first groups (kv_head indexes query heads), the other heads' rows are never written.
  const std::string t =
      packed_with("Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q, pack: heads_q / heads_kv}",
                  "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head] {ragged: cu_seqlens_q}");
  const auto codes = check_codes(t);
  EXPECT_NE(std::find(codes.begin(), codes.end(), "TL0412"), codes.end());
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    Outcome o = run_text(t, packed_dims(prec, 4, 8, 2, 23, 40));
    EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
    EXPECT_TRUE(o.has("TL0801")) << o.diags;
  }
}

TEST(VarlenPacked, PlantedBugsFail) {
  const Planted bugs[] = {
      {"the Mask aligned top-left", "  Compute Mask S at [m_block, j] with causal\n", "  Compute Mask S at [m_block, j] with causal_top_left\n"},
      {"the Mask bounds only", "  Compute Mask S at [m_block, j] with causal\n", "  Compute Mask S at [m_block, j] with bounds\n"},
      {"the Mask dropped", "  Compute Mask S at [m_block, j] with causal\n", "\n"},
      {"the Mask's rows taken as queries", "Compute Mask S at [m_block, j]", "Compute Mask S at [m_block * (heads_q / heads_kv), j]"},
      {"the loop bound without the alignment", "cdiv(cdiv((m_block + 1) * BM, heads_q / heads_kv) + seqlen_k - seqlen_q, BN)",
       "cdiv(cdiv((m_block + 1) * BM, heads_q / heads_kv), BN)"},
      {"the queries of another sequence", "Allocate Q in global (seqlen_q, d) bf16 with offset [b, kv_head]",
       "Allocate Q in global (seqlen_q, d) bf16 with offset [(b + 1) % batch, kv_head]"},
      {"O stored for the next sequence", "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head]",
       "Allocate O in global (seqlen_q, d) bf16 with offset [(b + 1) % batch, kv_head]"},
  };
  for (const auto& b : bugs)
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(packed_with(b.from, b.to), packed_dims(prec, 5, 8, 2, 37, 45));
      EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
}

TEST(VarlenPacked, RaggedQueriesOverAPagedCachePass) {
  // Chunked prefill over a paged KV cache with packed heads: tests/tl/kv_cache.tl with ragged queries.
  std::string t = testutil::corpus_with("kv_cache.tl", "Let seqlen_k = cache_seqlens[b]\n",
                                        "Allocate cu_seqlens_q in global (batch + 1) int32\n"
                                        "Let seqlen_q = cu_seqlens_q[b + 1] - cu_seqlens_q[b]\nLet seqlen_k = cache_seqlens[b]\n");
  const std::string pack = "{pack: heads_q / heads_kv}", both = "{ragged: cu_seqlens_q, pack: heads_q / heads_kv}";
  int packs = 0;
  for (size_t at = 0; (at = t.find(pack, at)) != std::string::npos; ++packs, at += both.size()) t.replace(at, pack.size(), both);
  ASSERT_EQ(packs, 3);  // Q, O, LSE
  EXPECT_TRUE(check_codes(t).empty());
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    RunConfig c = packed_dims(prec, 5, 8, 2, 20, 64);
    c.dims["page_size"] = 16;
    c.dims["pages"] = 4;
    Outcome o = run_text(t, c);
    EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
  }
}

TEST(VarlenPacked, TooFewQueryTilesLeaveRowsUnwritten) {
  // Grid m_block over cdiv(seqlen_q, BM): the checker cannot tell (a tile count is a schedule), the
  // interpreter finds the packed rows past seqlen_q rows of each sequence never written.
  const std::string t = packed_with("Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM)", "Grid m_block = 0: cdiv(seqlen_q, BM)");
  EXPECT_TRUE(check_codes(t).empty());
  Outcome o = run_text(t, packed_dims(Precision::FP64, 4, 8, 2, 40, 40));
  EXPECT_FALSE(o.r.passed) << o.r.summary;
  EXPECT_GT(o.r.unwritten, 0) << o.r.summary;
  EXPECT_NE(o.diags.find("never written"), std::string::npos) << o.diags;
}

}  // namespace
}  // namespace qattn::tl
