// The sm90 lowering of TL `Merge split ... end` (issue 20: the split keys' parts merged by the kernel
// that computed them; docs/translation.md, "The in-kernel merge"): the planner's Hopper split kernel
// with a Merge block appended translates to the counting (merge_arrive on the warpgroup's epilogue
// barrier), the merge body on row-distributed strips with an unrolled block's loads written first,
// the ABI 10 arguments and the kernel info's "merge"; the forms it cannot run are refused at their
// statement. The planner itself does not write the block (measured slower than the combine launch,
// bench/results/2026-11-30-h200-merge). The GPU side of that run: the same kernels through
// tests/python/test_kvcache.py and `qattn generate`'s verification (ABI checks of o_merged).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/translate.h"
#include "diag_test_util.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace qattn {
namespace {

constexpr auto npos = std::string::npos;

// The planner's H100 program for llama3-8b with these spec flags ("" when it plans none).
std::string planned(const std::map<std::string, std::string>& flags) {
  support::DiagSink d;
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  EXPECT_TRUE(spec::apply_flags(s, flags, d)) << d.render();
  auto p = plan::make_plan(s, *hw::find_gpu("h100"), d);
  EXPECT_TRUE(p.has_value()) << d.render();
  return p ? p->code : std::string();
}

// 32 queries x 4 heads: 128 packed rows on two consumer warpgroups (decoding's 64-row tile has one)
std::string split_code() { return planned({{"seqlen", "32/8192"}, {"split-keys", "true"}, {"mask", "none"}, {"gpu", "h100"}}); }

// The combine program's body over the forward's packed views, as docs/tl.md writes the block.
std::string merge_block(const std::string& attrs = " {rows: 8}", const std::string& unroll = " {unroll: 4}") {
  const std::string pk = " {pack: heads_q / heads_kv}";
  return "Merge split" + attrs + "\n" +
         "  Allocate O in global (seqlen_q, d) bf16 with offset [b, kv_head]" + pk + "\n" +
         "  Allocate LSE in global (seqlen_q) fp32 with offset [b, kv_head]" + pk + "\n" +
         "  Allocate O in register (BM, d) fp32 init 0\n"
         "  Allocate m in register (BM) fp32 init -inf\n"
         "  Allocate l in register (BM) fp32 init 0\n"
         "  for t = 0: splits" + unroll + "\n" +
         "    Allocate O_part in global (seqlen_q, d) bf16 with offset [b, t, kv_head]" + pk + "\n" +
         "    Allocate LSE_part in global (seqlen_q) fp32 with offset [b, t, kv_head]" + pk + "\n" +
         "    Allocate O_part in register (BM, d) fp32\n"
         "    Allocate LSE_part in register (BM) fp32\n"
         "    Copy O_part (BM, d) in coordinate [m_block, 0] from global to register\n"
         "    Copy LSE_part (BM) in coordinate [m_block] from global to register\n"
         "    Compute Max m, LSE_part and get m_new\n"
         "    Compute Subtract m, m_new and get alpha\n"
         "    Compute Exp alpha\n"
         "    Compute Subtract LSE_part, m_new and get w\n"
         "    Compute Exp w\n"
         "    Compute Rescale l, alpha\n"
         "    Compute Add l, w\n"
         "    Compute Rescale O, alpha\n"
         "    Compute Rescale O_part, w\n"
         "    Compute Add O, O_part\n"
         "    Compute Max m, m_new\n"
         "  end\n"
         "  Compute Normalize O, l\n"
         "  Compute Log l and get LSE\n"
         "  Compute Add LSE, m\n"
         "  Copy O (BM, d) in coordinate [m_block, 0] from register to global\n"
         "  Copy LSE (BM) in coordinate [m_block] from register to global\n"
         "end\n";
}

std::optional<backend::Translation> xlate(const std::string& code, support::DiagSink& d) {
  return backend::translate_text(code, plan::make_target(*hw::find_gpu("h100")), d, "test.tl");
}

TEST(MergeLowering, ThePlannerKeepsTheCombineLaunch) {
  const std::string code = split_code();
  EXPECT_EQ(code.find("Merge"), npos) << code;
  support::DiagSink d;
  auto t = xlate(code, d);
  ASSERT_TRUE(t.has_value()) << d.render();
  EXPECT_EQ(t->info_json.find("\"merge\""), npos);
  EXPECT_EQ(t->cuda_source.find("merge_arrive"), npos);
}

TEST(MergeLowering, CountsThePartThenMergesInStripsWithTheLoadsFirst) {
  support::DiagSink d;
  auto t = xlate(split_code() + merge_block(), d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_NE(t->info_json.find("\"merge\":true"), npos) << t->info_json;
  EXPECT_NE(cu.find("#include \"qattn/sm90/merge.cuh\""), npos);
  // after the stores of the part: the count on the warpgroup's epilogue barrier, only for a warpgroup with a valid row
  const size_t store = cu.find("store_rows(p.lse");
  const size_t arrive = cu.find("merge_arrive<true>(merge_counter, v.splits, kBarEpilogueBase + cw, tid)");
  ASSERT_NE(store, npos);
  ASSERT_NE(arrive, npos);
  EXPECT_LT(store, arrive);
  EXPECT_NE(cu.find("v.m_block * 128 + 64 * cw < merge_rows"), npos);
  // the body on strips of 8 rows over the warpgroup's 4 warps, strips past the packed rows skipped
  EXPECT_NE(cu.find("using Tiling = qattn::rows::RowTiling<8, 128, 4>;"), npos);
  EXPECT_NE(cu.find("if (v.m_block * 128 + merge_row0 >= merge_rows) break;"), npos);
  // the parts through the packed rows' addresses; the merged result to o_merged / lse_merged
  EXPECT_NE(cu.find("qattn::rows::RowAddr(p.o_row_stride, p.o_head_stride, p.pack)"), npos);
  EXPECT_NE(cu.find("static_cast<Element*>(p.o_merged)"), npos);
  EXPECT_NE(cu.find("p.lse_merged ? p.lse_merged"), npos);
  // an unrolled block of 4: the four iterations' loads, then their math
  const size_t loads3 = cu.find("iteration 3's loads");
  const size_t math0 = cu.find("{  // iteration 0\n");
  ASSERT_NE(loads3, npos) << cu;
  ASSERT_NE(math0, npos);
  EXPECT_LT(loads3, math0);
  EXPECT_NE(cu.find("merge_params(&kp, p, gx, gy, kConsumers, stream)"), npos);
  EXPECT_NE(t->kir.find("merge: the consumer warpgroup that stores its rows' last part merges every part, 8 rows"), npos) << t->kir;
}

TEST(MergeLowering, FormsTheKernelCannotRunAreRefused) {
  // more rows at a time than a warpgroup holds (the checker takes any divisor of BM)
  support::DiagSink d1;
  EXPECT_FALSE(xlate(split_code() + merge_block(" {rows: 128}"), d1).has_value());
  EXPECT_NE(test::find(d1, "XL0202"), nullptr) << d1.render();
  // a view the merge does not bind: a part view without the forward's pack (the checker's TL0424 first)
  std::string code = split_code() + merge_block();
  const std::string from = "with offset [b, t, kv_head] {pack: heads_q / heads_kv}\n    Allocate LSE_part";
  const size_t at = code.find(from);
  ASSERT_NE(at, npos);
  code.replace(at, from.size(), "with offset [b, t, kv_head]\n    Allocate LSE_part");
  support::DiagSink d2;
  EXPECT_FALSE(xlate(code, d2).has_value());
  EXPECT_NE(test::find(d2, "TL0424"), nullptr) << d2.render();
  // ragged queries over a cache (the parts one after another, each sequence's rows): the combine merges them
  const std::string ragged = planned({{"varlen", "true"}, {"kv-cache", "paged"}, {"split-keys", "true"}, {"gpu", "h100"}});
  ASSERT_FALSE(ragged.empty());
  support::DiagSink d3;
  EXPECT_FALSE(xlate(ragged + merge_block(), d3).has_value());
  const auto* x = test::find(d3, "XL0301");
  ASSERT_NE(x, nullptr) << d3.render();
  EXPECT_NE(x->message.find("ragged"), npos) << x->message;
}

}  // namespace
}  // namespace qattn
