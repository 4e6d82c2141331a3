// The TL interpreter on split keys over ragged queries and a paged KV cache (docs/tl.md, "Ragged
// batches", "Ragged and split"; tests/tl/varlen_split_cache.tl): the ragged O and LSE at
// [b, split, kv_head] hold the parts one after another, (splits, total_q, heads_q, d) and (splits,
// heads_q, total_q). Passes at several sizes (heads 8/2 and 4/1, one part and several, decoding and
// prefill chunks); planted bugs fail with TL0801: the parts' loop bounds overlapping by a tile, O (and
// LSE) without the part index while the Grid splits (the parts overwrite each other), a causal Mask
// aligned top-left, O stored for the next sequence.
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

const char* kFile = "varlen_split_cache.tl";

struct Size { int64_t batch, hq, hkv, sq, sk, splits; };

RunConfig dims(Precision prec, Size z, uint64_t seed = 3) {
  RunConfig c;
  c.dims = {{"batch", z.batch}, {"heads_q", z.hq},        {"heads_kv", z.hkv},          {"seqlen_q", z.sq},
            {"seqlen_k", z.sk}, {"d", 128},               {"page_size", 16},            {"pages", (z.sk + 15) / 16 + 1},
            {"splits", z.splits}};
  c.precision = prec;
  c.seed = seed;
  return c;
}


std::string with(const std::string& from, const std::string& to) { return testutil::corpus_with(kFile, from, to); }

TEST(VarlenSplit, UnmodifiedProgramPasses) {
  EXPECT_TRUE(check_codes(slurp(kCorpus / kFile)).empty());
  const Size sizes[] = {{4, 8, 2, 20, 300, 3}, {4, 8, 2, 1, 300, 7}, {5, 4, 1, 20, 200, 1},
                        {3, 4, 1, 1, 520, 7},  {6, 8, 2, 33, 256, 4}, {1, 8, 2, 20, 130, 2}};
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (Size z : sizes) {
      SCOPED_TRACE("batch=" + std::to_string(z.batch) + " heads=" + std::to_string(z.hq) + "/" + std::to_string(z.hkv) +
                   " seqlen_q=" + std::to_string(z.sq) + " seqlen_k=" + std::to_string(z.sk) + " splits=" + std::to_string(z.splits));
      Outcome o = run_text(slurp(kCorpus / kFile), dims(prec, z));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
      EXPECT_EQ(o.r.unwritten, 0) << o.r.summary;
      EXPECT_NE(o.r.summary.find("splits=" + std::to_string(z.splits) + " (merged by their LSE)"), std::string::npos) << o.r.summary;
    }
}

struct Planted {
  const char* what;
  const char* from;
  const char* to;
};

TEST(VarlenSplit, PlantedBugsFail) {
  const Planted bugs[] = {
      {"the parts overlap by a tile", "(split + 1) * tiles_per_split) {overlap}", "(split + 1) * tiles_per_split + 1) {overlap}"},
      {"O without the part index", "Allocate O in global (seqlen_q, d) bf16 with offset [b, split, kv_head]",
       "Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head]"},
      {"the Mask aligned top-left", "  Compute Mask S at [m_block, j] with causal\n", "  Compute Mask S at [m_block, j] with causal_top_left\n"},
      {"O stored for the next sequence", "Allocate O in global (seqlen_q, d) bf16 with offset [b, split, kv_head]",
       "Allocate O in global (seqlen_q, d) bf16 with offset [(b + 1) % batch, split, kv_head]"},
  };
  for (const auto& b : bugs)
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(with(b.from, b.to), dims(prec, {4, 8, 2, 20, 300, 3}));
      EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
}

TEST(VarlenSplit, PartsWithoutTheirIndexOverwriteEachOther) {
  // O and LSE both at [b, kv_head] while the Grid splits: each row keeps the last part's result.
  std::string t = slurp(kCorpus / kFile);
  int n = 0;
  for (size_t at = 0; (at = t.find("with offset [b, split, kv_head]", at)) != std::string::npos; ++n)
    t.replace(at, 31, "with offset [b, kv_head]");
  ASSERT_EQ(n, 2);  // O, LSE
  for (Precision prec : {Precision::FP64, Precision::Storage}) {
    Outcome o = run_text(t, dims(prec, {4, 8, 2, 20, 300, 3}));
    EXPECT_FALSE(o.r.passed) << o.r.summary << o.diags;
    EXPECT_TRUE(o.has("TL0801")) << o.diags;
  }
  Outcome one = run_text(t, dims(Precision::FP64, {4, 8, 2, 20, 300, 1}));  // one part: nothing to overwrite
  EXPECT_TRUE(one.r.passed) << one.r.summary << one.diags;
}

}  // namespace
}  // namespace qattn::tl
