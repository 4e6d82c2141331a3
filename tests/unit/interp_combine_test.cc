// The TL interpreter on combine programs (docs/tl.md, "Combining partial results"): tests/tl/combine.tl
// passes on ragged sizes (row tiles that cross seqlen_q, one part and many, empty parts), and each
// planted edit of its merge (a missing rescale, the wrong weight, the LSE without its max, the
// running max never updated, an unwritten row) fails with TL0801; runtime errors for malformed
// offsets are diagnostics, not crashes. The golden expect-run lines are interp_test.cc's corpus.
// The forward that writes the parts (docs/tl.md, "Splitting the keys"): tests/tl/split_kv.tl passes
// with 1 part, a few, and more parts than key tiles (empty parts), its merge checked against the
// reference; planted edits of its key ranges or its part index fail.
// The merge in the kernel (docs/tl.md, "Merging the parts in the kernel"): tests/tl/split_merge.tl
// passes, and planted edits of its Merge body (a missing rescale, a part skipped, a forgotten store)
// fail the interpreter with TL0801 (those the checker accepts too).
#include <gtest/gtest.h>

#include <functional>

#include "interp_test_util.h"
#include "tl/checker.h"
#include "tl/interp.h"

namespace qattn::tl {
namespace {

using testutil::kCorpus;
using testutil::Outcome;
using testutil::run_text;
using testutil::slurp;

std::string combine_with(const std::string& from, const std::string& to) { return testutil::corpus_with("combine.tl", from, to); }

RunConfig combine_dims(Precision prec, int64_t seqlen_q, int64_t splits) {
  RunConfig c;
  c.dims = {{"batch", 2}, {"heads_q", 3}, {"seqlen_q", seqlen_q}, {"splits", splits}};
  c.precision = prec;
  c.seed = 5;
  return c;
}

TEST(Combine, UnmodifiedProgramPassesOnRaggedSizes) {
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (auto [sq, splits] : {std::pair<int64_t, int64_t>{1, 2}, {8, 1}, {9, 3}, {17, 16}}) {
      SCOPED_TRACE("seqlen_q=" + std::to_string(sq) + " splits=" + std::to_string(splits));
      Outcome o = run_text(slurp(kCorpus / "combine.tl"), combine_dims(prec, sq, splits));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
    }
}

struct Planted {
  const char* what;
  const char* from;
  const char* to;
};

TEST(Combine, PlantedBugsFail) {
  const Planted bugs[] = {
      {"O not rescaled when the max grows", "  Compute Rescale O, alpha\n", ""},
      {"l not rescaled when the max grows", "  Compute Rescale l, alpha\n", ""},
      {"a part's O not weighted", "  Compute Rescale O_part, w\n", ""},
      {"the weight against the old max", "Compute Subtract LSE_part, m_new and get w", "Compute Subtract LSE_part, m and get w"},
      {"the running max never updated", "  Compute Max m, m_new\nend", "end"},
      {"LSE without its max", "Compute Add LSE, m\n", ""},
      {"exp2 for exp", "  Compute Exp w\n", "  Compute Exp2 w\n"},
      {"the last part skipped", "for s = 0: splits", "for s = 0: splits - 1"},
      {"the O store forgotten", "Copy O (BM, d_v) in coordinate [m_block, 0] from register to global\n", ""},
  };
  for (const auto& b : bugs)
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(combine_with(b.from, b.to), combine_dims(prec, 9, 3));
      EXPECT_FALSE(o.r.passed) << o.r.summary;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
    }
}

TEST(Combine, MalformedOffsetsAreDiagnostics) {
  const Planted bugs[] = {
      {"a 2-index offset", "with offset [b, s, head]\n  Allocate LSE_part", "with offset [b, head]\n  Allocate LSE_part"},
      {"a split out of range", "with offset [b, s, head]\n  Allocate LSE_part", "with offset [b, s + 1, head]\n  Allocate LSE_part"},
      {"a head out of range", "Allocate LSE_part in global (seqlen_q) fp32 with offset [b, s, head]",
       "Allocate LSE_part in global (seqlen_q) fp32 with offset [b, s, head + 3]"},
  };
  for (const auto& b : bugs) {
    SCOPED_TRACE(b.what);
    Outcome o = run_text(combine_with(b.from, b.to), combine_dims(Precision::FP64, 9, 3));
    EXPECT_FALSE(o.r.ran);
    EXPECT_TRUE(o.has("TL0901")) << o.diags;
  }
}

TEST(Combine, MissingDimsAreDiagnostics) {
  RunConfig c;
  c.dims = {{"batch", 1}, {"heads_q", 1}, {"seqlen_q", 4}};  // no splits
  Outcome o = run_text(slurp(kCorpus / "combine.tl"), c);
  EXPECT_FALSE(o.r.ran);
  EXPECT_TRUE(o.has("TL0904")) << o.diags;
}

std::string split_with(const std::string& from, const std::string& to) { return testutil::corpus_with("split_kv.tl", from, to); }

RunConfig split_dims(Precision prec, int64_t sq, int64_t sk, int64_t page_size, int64_t splits, uint64_t seed = 11) {
  RunConfig c;
  c.dims = {{"batch", 3}, {"heads_q", 4}, {"heads_kv", 2}, {"seqlen_q", sq}, {"seqlen_k", sk}, {"d", 16},
            {"page_size", page_size}, {"pages", (sk + page_size - 1) / page_size}, {"splits", splits}};
  c.precision = prec;
  c.seed = seed;
  return c;
}

// Every size of a split program (96 keys are 6 tiles of 16: 1 part, 4 (parts of 2 tiles, the last
// empty), 6, 9 (3 empty parts); 33 keys over pages of 64), both precisions: `check` on each outcome.
void over_split_sizes(const char* file, const std::function<void(const Outcome&)>& check) {
  struct Size { int64_t sq, sk, ps, splits; };
  for (Precision prec : {Precision::FP64, Precision::Storage})
    for (Size z : {Size{1, 96, 16, 1}, Size{1, 96, 16, 4}, Size{3, 96, 32, 6}, Size{1, 70, 8, 9}, Size{5, 33, 64, 2}}) {
      SCOPED_TRACE("seqlen_q=" + std::to_string(z.sq) + " seqlen_k=" + std::to_string(z.sk) + " splits=" + std::to_string(z.splits));
      const Outcome o = run_text(slurp(kCorpus / file), split_dims(prec, z.sq, z.sk, z.ps, z.splits));
      EXPECT_TRUE(o.r.passed) << o.r.summary << o.diags;
      EXPECT_TRUE(o.codes.empty()) << o.diags;
      check(o);
    }
}

TEST(SplitKeys, UnmodifiedProgramPassesWithOneFewAndEmptyParts) {
  over_split_sizes("split_kv.tl", [](const Outcome&) {});
}

TEST(SplitKeys, PlantedKeyRangesAndPartIndicesFail) {
  const Planted bugs[] = {
      {"every part attends to every key (LSE off by log splits)", "for j = s * part: min((s + 1) * part, cdiv(seqlen_k, BN))",
       "for j = 0: cdiv(seqlen_k, BN)"},
      {"parts overlap by a tile", "min((s + 1) * part, cdiv(seqlen_k, BN))", "min((s + 1) * part + 1, cdiv(seqlen_k, BN))"},
      {"each part skips its last tile", "min((s + 1) * part, cdiv(seqlen_k, BN))", "min((s + 1) * part - 1, cdiv(seqlen_k, BN))"},
      {"the parts cut the capacity, not the sequence's keys, and stop at the first part",
       "for j = s * part: min((s + 1) * part, cdiv(seqlen_k, BN))", "for j = s * part: min(part, cdiv(seqlen_k, BN))"},
      {"every part writes part 0's result", "Allocate O in global (seqlen_q, d) bf16 with offset [b, s, kv_head]",
       "Allocate O in global (seqlen_q, d) bf16 with offset [b, 0, kv_head]"},
  };
  for (const auto& b : bugs) {
    SCOPED_TRACE(b.what);
    Outcome o = run_text(split_with(b.from, b.to), split_dims(Precision::FP64, 1, 96, 16, 3));
    EXPECT_FALSE(o.r.passed) << o.r.summary;
    EXPECT_TRUE(o.has("TL0801")) << o.diags;
  }
}

TEST(SplitKeys, MissingSplitsIsADiagnostic) {
  RunConfig c = split_dims(Precision::FP64, 1, 96, 16, 3);
  c.dims.erase("splits");
  Outcome o = run_text(slurp(kCorpus / "split_kv.tl"), c);
  EXPECT_FALSE(o.r.ran);
  EXPECT_TRUE(o.has("TL0904")) << o.diags;
}

std::string merge_with(const std::string& from, const std::string& to) { return testutil::corpus_with("split_merge.tl", from, to); }

TEST(Merge, UnmodifiedProgramPassesWithOneFewAndEmptyParts) {
  over_split_sizes("split_merge.tl", [](const Outcome& o) { EXPECT_EQ(o.r.unwritten, 0) << o.r.summary; });
}

// Bugs of the Merge body alone: the checker accepts the arithmetic ones (the merge's arithmetic is
// the interpreter's to verify); the interpreter fails each on the merged O or LSE, not on the parts.
TEST(Merge, PlantedBugsOfTheMergeFail) {
  struct Bug {
    const char* what;
    const char* from;
    const char* to;
    bool checked;  // the checker accepts it
  };
  const Bug bugs[] = {
      {"O not rescaled when the max grows", "    Compute Rescale O, alpha\n", "", true},
      {"l not rescaled when the max grows", "    Compute Rescale l, alpha\n", "", true},
      {"a part's O not weighted", "    Compute Rescale O_part, w\n", "", true},
      {"LSE without its max", "  Compute Add LSE, m\n", "", true},
      {"the last part skipped (TL0424)", "for t = 0: splits", "for t = 0: splits - 1", false},
      {"the merged LSE never stored (TL0406)", "  Copy LSE (BM) in coordinate [m_block] from register to global\nend", "end",
       false},
  };
  for (const auto& b : bugs) {
    const std::string text = merge_with(b.from, b.to);
    support::DiagSink cd("split_merge.tl");
    Program p = parse(text, cd, "split_merge.tl");
    EXPECT_EQ(check(p, cd), b.checked) << b.what << cd.render();
    for (Precision prec : {Precision::FP64, Precision::Storage}) {
      SCOPED_TRACE(std::string(b.what) + (prec == Precision::FP64 ? " (fp64)" : " (storage)"));
      Outcome o = run_text(text, split_dims(prec, 3, 96, 16, 3));  // 6 key tiles: 3 parts of 2
      EXPECT_TRUE(o.r.ran) << o.diags;
      EXPECT_FALSE(o.r.passed) << o.r.summary;
      EXPECT_TRUE(o.has("TL0801")) << o.diags;
      EXPECT_EQ(o.diags.find("the parts the forward stored"), std::string::npos) << o.diags;  // the parts are right
    }
  }
}

// The merged outputs start poisoned: a tile the Merge block does not store is unwritten, a failure.
TEST(Merge, UnstoredMergedRowsFail) {
  const std::string text = merge_with("  Copy O (BM, d) in coordinate [m_block, 0] from register to global\n  Copy LSE",
                                      "  Copy O (BM, d) in coordinate [m_block + 1, 0] from register to global\n  Copy LSE");
  Outcome o = run_text(text, split_dims(Precision::FP64, 3, 96, 16, 3));
  EXPECT_TRUE(o.r.ran) << o.diags;
  EXPECT_FALSE(o.r.passed) << o.r.summary;
  EXPECT_GT(o.r.unwritten, 0) << o.r.summary;
  EXPECT_TRUE(o.has("TL0801")) << o.diags;
}

// The parts' check is kept: a forward whose parts overlap fails even though the Merge is right.
TEST(Merge, WrongPartsFail) {
  const std::string text = merge_with("min((s + 1) * part, cdiv(seqlen_k, BN))", "min((s + 1) * part + 1, cdiv(seqlen_k, BN))");
  Outcome o = run_text(text, split_dims(Precision::FP64, 1, 96, 16, 3));
  EXPECT_FALSE(o.r.passed) << o.r.summary;
  EXPECT_NE(o.diags.find("the parts the forward stored"), std::string::npos) << o.diags;
}

}  // namespace
}  // namespace qattn::tl
