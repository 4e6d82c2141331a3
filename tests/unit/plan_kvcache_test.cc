// A KV cache from spec to CUDA (docs/tl.md and docs/spec.md, "KV caches"): the spec's kv_cache
// round-trips through JSON and flags; the planner writes `Let seqlen_k = cache_seqlens[b]` and
// `{paged: block_table}` and verifies the program in the interpreter on paged sizes (pages smaller
// and larger than the key tile); the sm90 and sm80 translations read the counts and the pages, say
// so in the kernel info, check the page fields at the ABI, and a TL without the paging gives a kernel
// that reads the cache contiguously (the attribute drives the code).
#include <gtest/gtest.h>

#include "backend/translate.h"
#include "hw/sm90_policy.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace qattn {
namespace {

constexpr auto npos = std::string::npos;

std::optional<plan::Plan> kv_plan(const std::string& gpu, const std::string& kv, const std::string& seqlen,
                                  support::DiagSink& d, const std::string& mask = "causal") {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  EXPECT_TRUE(spec::apply_flags(s, {{"gpu", gpu}, {"kv-cache", kv}, {"seqlen", seqlen}, {"mask", mask}}, d)) << d.render();
  return plan::make_plan(s, *hw::find_gpu(gpu), d);
}

TEST(KvCacheSpec, RoundTripsAndRefusesUnknownValues) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  support::DiagSink d;
  ASSERT_TRUE(spec::apply_flags(s, {{"kv-cache", "paged"}}, d)) << d.render();
  EXPECT_EQ(s.kv_cache, spec::KvCache::Paged);
  const std::string json = spec::to_json(s);
  EXPECT_NE(json.find("\"kv_cache\": \"paged\""), npos) << json;
  auto back = spec::parse_json(json, d);
  ASSERT_TRUE(back.has_value()) << d.render();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(spec::to_json(*spec::find_preset("llama3-8b")).find("kv_cache"), npos);  // "none" is not written
  support::DiagSink bad;
  EXPECT_FALSE(spec::parse_json(R"({"heads_q": 8, "head_dim": 64, "kv_cache": "pages"})", bad).has_value());
  EXPECT_NE(bad.render().find("SPEC0107"), npos) << bad.render();
  support::DiagSink badflag;
  EXPECT_FALSE(spec::apply_flags(s, {{"kv-cache", "yes"}}, badflag));
}

TEST(KvCachePlan, WritesTheCountAndThePagesAndVerifiesThemOnPagedSizes) {
  for (const char* gpu : {"h100", "a100"})
    for (const char* kv : {"lengths", "paged"}) {
      SCOPED_TRACE(std::string(gpu) + " " + kv);
      support::DiagSink d;
      auto p = kv_plan(gpu, kv, "1/8192", d);
      ASSERT_TRUE(p.has_value()) << d.render();
      EXPECT_NE(p->code.find("Allocate cache_seqlens in global (batch) int32\n"), npos) << p->code;
      EXPECT_NE(p->code.find("Let seqlen_k = cache_seqlens[b]\n"), npos) << p->code;
      const bool paged = std::string(kv) == "paged";
      EXPECT_EQ(p->code.find("{paged: block_table}") != npos, paged) << p->code;
      EXPECT_EQ(p->code.find(", page_size, pages\n") != npos, paged) << p->code;
      auto v = plan::verify(*p, d);
      EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
      ASSERT_FALSE(v.cases.empty());
      EXPECT_EQ(v.cases.front().dims.at("batch"), 3);  // a full, an empty and a random sequence
      if (paged) {
        ASSERT_GE(v.cases.size(), 2u);
        EXPECT_EQ(v.cases[0].dims.at("page_size"), 16);
        EXPECT_GT(v.cases[1].dims.at("page_size"), 64);  // two key tiles
      }
    }
}

TEST(KvCacheTranslate, Sm90ReadsThePagesAndZeroesTheTailOfV) {
  support::DiagSink d;
  auto p = kv_plan("h100", "paged", "1/8192", d, "none");
  ASSERT_TRUE(p.has_value()) << d.render();
  // the producer's register share, 8 above the persistent grid's 40 (its warps share the pages)
  EXPECT_NE(p->code.find("Role producer warpgroups 1 registers 48\n"), npos) << p->code;
  // decoding (4 packed rows): one 64-row tile on one consumer warpgroup (plan::decode_tile)
  EXPECT_NE(p->code.find("Role consumer warpgroups 1 registers 232\n"), npos) << p->code;
  auto t = backend::translate_text(p->code, plan::make_target(*hw::find_gpu("h100")), d, "code.tl");
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_NE(cu.find("producer_registers<48>();"), npos);
  EXPECT_NE(cu.find("seqlen_k = min(max(aux_cache_seqlens[b], 0), p.seqlen_k);"), npos) << cu;
  EXPECT_NE(cu.find("sk_ = seqlen_k;"), npos);
  EXPECT_NE(cu.find("load_tile_paged<128, 128, W>("), npos) << cu;
  // the producer's loop compiled for one warp (pages of a tile or more) and for several
  EXPECT_NE(cu.find("if (producer_warps == 1) produce(std::integral_constant<int, 1>{});"), npos) << cu;
  EXPECT_NE(cu.find("else produce(std::integral_constant<int, kProducerWarps>{});"), npos) << cu;
  // the pages' copies from the producer warpgroup's four warps; the fetched tile index shared with them
  EXPECT_NE(cu.find("constexpr int kProducerWarps = 4;"), npos);
  EXPECT_NE(cu.find("const int producer_warps = paged_producer_warps<128, kProducerWarps>(p.page_size);"), npos) << cu;
  EXPECT_NE(cu.find("if (tid >= 32 * producer_warps) return;"), npos);
  EXPECT_NE(cu.find("sched.next(leader, p, nth + 1, warps)"), npos);
  // Q's copy and its ring are the leader warp's alone (the other warps never wait on its barriers)
  EXPECT_NE(cu.find("if (W == 1 || tid < 32) load_tile"), npos) << cu;
  EXPECT_NE(cu.find("Scheduler<kPersistent, kConsumers, kProducerWarps>"), npos);
  EXPECT_NE(cu.find("v.aux_block_table + v.b * p.pages, p.page_size, v.seqlen_k, p.num_pages, leader, warps, p.kv_stream);"), npos) << cu;
  EXPECT_NE(cu.find("zero_rows_from<"), npos);
  EXPECT_NE(cu.find("qattn::host::check_paged(*params, 8, "), npos);
  EXPECT_NE(cu.find("kPersistent, true};"), npos);  // KernelShape::paged
  EXPECT_NE(t->info_json.find("\"kv_cache\":{\"lengths\":\"cache_seqlens\",\"block_table\":\"block_table\"}"), npos)
      << t->info_json;
  EXPECT_NE(t->kir.find("  kv cache: seqlen_k = min(max(aux_cache_seqlens[b], 0), p.seqlen_k)  [TL "), npos) << t->kir;
  EXPECT_NE(t->kir.find("  kv cache: K and V in pages of page_size rows through block_table  [TL "), npos) << t->kir;
  // the same program without {paged}: a contiguous cache, the counts still read, the V tail still zeroed
  std::string contiguous = p->code;
  for (const std::string cut : {" {paged: block_table}", ", page_size, pages", "Allocate block_table in global (batch, pages) int32\n"})
    for (size_t at; (at = contiguous.find(cut)) != npos;) contiguous.erase(at, cut.size());
  auto c = backend::translate_text(contiguous, plan::make_target(*hw::find_gpu("h100")), d, "code.tl");
  ASSERT_TRUE(c.has_value()) << d.render();
  EXPECT_EQ(c->cuda_source.find("load_tile_paged<"), npos);
  EXPECT_NE(c->cuda_source.find("constexpr int kProducerWarps = 1;"), npos);  // one producer warp
  EXPECT_NE(c->cuda_source.find("if (tid >= 32) return;"), npos);
  EXPECT_EQ(c->cuda_source.find("tid < 32) load_tile"), npos);
  EXPECT_EQ(c->cuda_source.find("produce("), npos);
  EXPECT_EQ(c->cuda_source.find("check_paged"), npos);
  EXPECT_NE(c->cuda_source.find("zero_rows_from<"), npos);
  EXPECT_NE(c->cuda_source.find("sk_ = seqlen_k;"), npos);
}

TEST(KvCachePlan, APagedProducerKeepsItsRegistersWithinTheSm) {
  namespace pol = hw::sm90;
  for (int c = 1; c <= 3; ++c)
    for (bool persistent : {false, true})
      for (bool paged : {false, true}) {
        SCOPED_TRACE(std::to_string(c) + (persistent ? " persistent" : "") + (paged ? " paged" : ""));
        const pol::RegisterSplit s = pol::register_split(c, persistent, paged);
        EXPECT_LE(s.producer + c * s.consumer, (1 + c) * pol::launch_registers(1 + c));  // else setmaxnreg.inc hangs
        EXPECT_EQ(s.producer % 8, 0);
        EXPECT_EQ(s.consumer % 8, 0);
        if (paged && c <= 2) EXPECT_EQ(s.producer, pol::register_split(c, persistent, false).producer + 8);
      }
  EXPECT_EQ(pol::launch_registers(3), 168);
  EXPECT_EQ(pol::launch_registers(4), 128);
  EXPECT_EQ(pol::register_split(2, true, true).consumer, 224);   // 48 + 2 x 224 = 496 <= 3 x 168
  EXPECT_EQ(pol::register_split(2, false, true).producer, 32);   // 24 spilled with four warps
  EXPECT_EQ(pol::register_split(2, false, true).consumer, 232);  // 240 would leave the pool short
  EXPECT_EQ(pol::register_split(2, false, false).consumer, 240);
}

TEST(KvCacheTranslate, Sm80LooksTheRowsUpAndMasksWithTheSequencesCount) {
  support::DiagSink d;
  auto p = kv_plan("a100", "paged", "1/8192", d);
  ASSERT_TRUE(p.has_value()) << d.render();
  auto t = backend::translate_text(p->code, plan::make_target(*hw::find_gpu("a100")), d, "code.tl");
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  EXPECT_NE(cu.find("seqlen_k = min(max(aux_cache_seqlens[b], 0), p.seqlen_k);"), npos) << cu;
  EXPECT_NE(cu.find("qattn::paged_matrix<Element, d>(p.k, "), npos) << cu;
  EXPECT_NE(cu.find("aux_block_table + b * p.pages, p.page_size, p.num_pages)"), npos) << cu;
  EXPECT_NE(cu.find("qattn::MaskArgs{p.seqlen_q, seqlen_k}"), npos) << cu;
  EXPECT_NE(cu.find("qattn::host::check_paged(*params, 1, 0)"), npos);
  EXPECT_NE(cu.find("[[maybe_unused]] int batch = p.batch"), npos);  // not const: the Let narrows seqlen_k
}

}  // namespace
}  // namespace qattn
