// The TL interpreter on packed ragged batches (docs/tl.md, "Ragged batches"): tests/tl/varlen.tl
// passes on sizes whose sequences cross the query and key tiles (a full, an empty and random
// sequences; more keys than queries and fewer); planted edits fail with TL0801: the queries of
// another sequence, the last key tile skipped, the rows of O stored for the next sequence, the
// causal mask dropped (rows past a sequence's keys are other sequences' keys or NaN). Writes outside
// a block's own sequence are counted even when a later block overwrites them.
#include <gtest/gtest.h>

#include "interp_test_util.h"
#include "tl/interp.h"

namespace qattn::tl {
namespace {

using testutil::kCorpus;
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

}  // namespace
}  // namespace qattn::tl
