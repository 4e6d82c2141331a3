// Packed ragged batches from spec to CUDA (docs/tl.md and docs/spec.md, "Ragged batches"): the spec's
// varlen round-trips through JSON and flags; the planner
// writes the cumulative counts, the two Lets and `{ragged: ...}` (with GQA packing on Hopper: a
// decoding sequence's query heads share a tile) and verifies the program in the interpreter with
// several sequences; the sm90 and sm80 translations read the counts,
// start the views at each sequence's first row, skip the query tiles past a sequence, guard the O
// stores, say so in the kernel info, check the packed row counts at the ABI; and a TL without
// `{ragged}` on K and V gives a kernel that reads K and V per batch entry (the attribute drives the code).
// With a KV cache too (chunked prefill): ragged queries over the cache's counts and pages, verified
// and translated (TMA boxes at each sequence's query rows, K / V page by page).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>

#include "backend/translate.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "spec/spec.h"

namespace qattn {
namespace {

constexpr auto npos = std::string::npos;

std::optional<plan::Plan> varlen_plan(const std::string& gpu, support::DiagSink& d, const std::string& mask = "causal",
                                      const std::string& heads = "32,8") {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  EXPECT_TRUE(spec::apply_flags(s, {{"gpu", gpu}, {"varlen", "true"}, {"mask", mask}, {"lse", "true"}, {"heads", heads}}, d))
      << d.render();
  return plan::make_plan(s, *hw::find_gpu(gpu), d);
}

// The translation of TL code for a GPU of the facts table (h100: sm90a, a100: sm80).
std::optional<backend::Translation> translated(const std::string& code, const char* gpu, support::DiagSink& d) {
  return backend::translate_text(code, plan::make_target(*hw::find_gpu(gpu)), d, "code.tl");
}

TEST(VarlenSpec, RoundTrips) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  support::DiagSink d;
  ASSERT_TRUE(spec::apply_flags(s, {{"varlen", "true"}}, d)) << d.render();
  EXPECT_TRUE(s.varlen);
  const std::string json = spec::to_json(s);
  EXPECT_NE(json.find("\"varlen\": true"), npos) << json;
  auto back = spec::parse_json(json, d);
  ASSERT_TRUE(back.has_value()) << d.render();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(spec::to_json(*spec::find_preset("llama3-8b")).find("varlen"), npos);  // false is not written
  support::DiagSink both;
  spec::AttentionSpec with_cache = s;
  ASSERT_TRUE(spec::apply_flags(with_cache, {{"kv-cache", "paged"}}, both)) << both.render();
  EXPECT_TRUE(spec::validate(with_cache, both, nullptr)) << both.render();  // ragged queries over a paged cache
  support::DiagSink badflag;
  EXPECT_FALSE(spec::apply_flags(s, {{"varlen", "maybe"}}, badflag));
}

TEST(VarlenPlan, WritesTheCountsAndTheRaggedViewsAndVerifiesThem) {
  for (const char* gpu : {"h100", "a100"}) {
    SCOPED_TRACE(gpu);
    support::DiagSink d;
    auto p = varlen_plan(gpu, d);
    ASSERT_TRUE(p.has_value()) << d.render();
    const bool hopper = std::string(gpu) == "h100";  // GQA packing on Hopper only
    const std::string q_view = hopper ? "with offset [b, kv_head] {pack: heads_q / heads_kv, ragged: cu_seqlens_q}\n"
                                      : "with offset [b, head] {ragged: cu_seqlens_q}\n";
    for (const std::string& line : {std::string("Allocate cu_seqlens_q in global (batch + 1) int32\n"),
                                   std::string("Allocate cu_seqlens_k in global (batch + 1) int32\n"),
                                   std::string("Let seqlen_q = cu_seqlens_q[b + 1] - cu_seqlens_q[b]\n"),
                                   std::string("Let seqlen_k = cu_seqlens_k[b + 1] - cu_seqlens_k[b]\n"), "Allocate Q in global (seqlen_q, d) bf16 " + q_view,
                                   "Allocate O in global (seqlen_q, d) bf16 " + q_view, "Allocate LSE in global (seqlen_q) fp32 " + q_view,
                                   std::string("with offset [b, kv_head] {ragged: cu_seqlens_k}\n")})
      EXPECT_NE(p->code.find(line), npos) << line << p->code;
    EXPECT_EQ(p->code.find("{pack") != npos, hopper) << p->code;
    if (hopper) {
      EXPECT_NE(p->code.find("Grid m_block = 0: cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_kv"), npos);
    }
    auto v = plan::verify(*p, d);
    EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
    ASSERT_FALSE(v.cases.empty());
    EXPECT_EQ(v.cases.front().dims.at("batch"), 5);  // a full, an empty and random sequences
  }
}

TEST(VarlenTranslate, Sm90StartsAtEachSequenceAndGuardsItsLastRows) {
  support::DiagSink d;
  auto p = varlen_plan("h100", d, "causal", "32,32");  // MHA: nothing to pack
  ASSERT_TRUE(p.has_value()) << d.render();
  auto t = translated(p->code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* s : {"seqlen_q = min(max(aux_cu_seqlens_q[b + 1] - aux_cu_seqlens_q[b], 0), p.seqlen_q);",
                        "seqlen_k = min(max(aux_cu_seqlens_k[b + 1] - aux_cu_seqlens_k[b], 0), p.seqlen_k);",
                        "start_q = min(max(aux_cu_seqlens_q[b], 0), p.total_q);", "start_k = min(max(aux_cu_seqlens_k[b], 0), p.total_k);",
                        "sq_ = seqlen_q; sk_ = seqlen_k;", "__device__ int live_blocks() const { return qattn::cdiv(seqlen_q, BM); }", "bool live() const { return m_block < live_blocks(); }",
                        "if (!v.live()) continue;", "&p.tma_q, sQ, v.start_q + v.m_block * BM, v.head, 0, leader);",
                        "&p.tma_k, sK, v.start_k + j * BN, v.kv_head, 0, leader);", "store_o_ragged<", "store_rows_at(p.lse, ",
                        "zero_rows_from<", "qattn::host::check_ragged(*params, true, true)", "kPersistent, false, true, true};"})
    EXPECT_NE(cu.find(s), npos) << s;
  EXPECT_NE(t->info_json.find("\"varlen\":{\"cu_seqlens_q\":\"cu_seqlens_q\",\"cu_seqlens_k\":\"cu_seqlens_k\"}"), npos) << t->info_json;
  EXPECT_EQ(t->info_json.find("\"kv_cache\""), npos) << t->info_json;
  EXPECT_NE(t->kir.find("  ragged: Q, O, LSE rows from min(max(aux_cu_seqlens_q[b], 0), p.total_q) of the packed tensors  [TL "), npos)
      << t->kir;
  // K and V not ragged: they are read per batch entry (seqlen_k still narrowed), the queries still packed
  std::string q_only = p->code;
  for (const std::string cut : {" {ragged: cu_seqlens_k}"})
    for (size_t at; (at = q_only.find(cut)) != npos;) q_only.erase(at, cut.size());
  auto c = translated(q_only, "h100", d);
  ASSERT_TRUE(c.has_value()) << d.render();
  EXPECT_NE(c->cuda_source.find("&p.tma_k, sK, j * BN, v.kv_head, v.b, leader);"), npos) << c->cuda_source;
  EXPECT_NE(c->cuda_source.find("v.start_q + v.m_block * BM"), npos);
  EXPECT_NE(c->cuda_source.find("qattn::host::check_ragged(*params, true, false)"), npos);
}

// GQA packing of ragged sequences on Hopper: a tile's packed row r of sequence b is query
// cu_seqlens_q[b] + r / G of head kv_head x G + r % G; the Q box starts at the sequence's first packed
// row, the tile's rows of the sequence are seqlen_q x G, O and LSE go to each row's query and head.
TEST(VarlenTranslate, Sm90PacksTheQueryHeadsOfEachSequence) {
  support::DiagSink d;
  auto p = varlen_plan("h100", d);
  ASSERT_TRUE(p.has_value()) << d.render();
  auto t = translated(p->code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* s : {"constexpr bool kPack = true;", "start_q = min(max(aux_cu_seqlens_q[b], 0), p.total_q);",
                        "int live_blocks() const { return qattn::cdiv(seqlen_q * (qattn::floordiv(heads_q, heads_kv)), BM); }",
                        "&p.tma_q, sQ, v.start_q * p.pack + v.m_block * BM, v.kv_head, 0, leader, p.pack);",
                        "&p.tma_k, sK, v.start_k + j * BN, v.kv_head, 0, leader);",
                        "static_cast<Element*>(p.o) + int64_t(v.start_q) * p.o_row_stride + int64_t(v.kv_head) * p.pack * p.o_head_stride, "
                        "p.o_row_stride, v.seqlen_q * p.pack, p.o_head_stride);",
                        "store_rows_at(p.lse, rLSE, rows, v.kv_head, p.total_q, v.start_q, v.seqlen_q * p.pack);",
                        "qattn::host::check_ragged(*params, true, true)",
                        // the scheduler numbers the live tiles only (a sequence's tiles past its queries are not
                        // fetched)
                        "Scheduler<kPersistent, kConsumers, kProducerWarps, true> sched",
                        "return dense.tile<128, kReverseM, kPack, kSplit>(n, p, [&](int b) { return Scope(TileCoord{0, 0, b}, p).live_blocks(); });",
                        "DenseTiles dense{sched.dense_counts()};",
                        // its 32 running counts after the tile exchange: 40 + 128 bytes past the barriers
                        "constexpr int kSched = 196688;", "constexpr int kSmemBytes = 197880;",
                        "for (int tile = sched.first(leader, 1, live_tile), nth = 0; !sched.done(tile, nth, leader, p); "
                        "tile = sched.next(leader, p, nth + 1, 1, live_tile), ++nth) {"})
    EXPECT_NE(cu.find(s), npos) << s;
  // the same program without `{pack}` on Q, O, LSE (and its Grid over query heads) is the unpacked kernel
  std::string plain = p->code;
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"{pack: heads_q / heads_kv, ragged: cu_seqlens_q}", "{ragged: cu_seqlens_q}"},
           {"cdiv(seqlen_q * (heads_q / heads_kv), BM), kv_head = 0: heads_kv,", "cdiv(seqlen_q, BM), head = 0: heads_q,"},
           {"cdiv((m_block + 1) * BM, heads_q / heads_kv)", "(m_block + 1) * BM"}})
    for (size_t at; (at = plain.find(from)) != npos;) plain.replace(at, from.size(), to);
  for (const std::string x : {"offset [b, kv_head] {ragged: cu_seqlens_q}"})
    for (size_t at; (at = plain.find(x)) != npos;) plain.replace(at, x.size(), "offset [b, head] {ragged: cu_seqlens_q}");
  const size_t role = plain.find("Role producer");
  ASSERT_NE(role, npos);
  plain.insert(role, "Let kv_head = head / (heads_q / heads_kv)\n");
  auto u = translated(plain, "h100", d);
  ASSERT_TRUE(u.has_value()) << d.render() << plain;
  EXPECT_NE(u->cuda_source.find("constexpr bool kPack = false;"), npos);
  EXPECT_NE(u->cuda_source.find("store_rows_at(p.lse, rLSE, rows, v.head, p.total_q, v.start_q, v.seqlen_q);"), npos);
}

// The sync calls (ring waits / releases, pingpong turns) of a piece of generated code, in order.
static std::vector<std::string> sync_calls(const std::string& code) {
  std::vector<std::string> calls;
  for (size_t at = 0; (at = code.find_first_of("rP", at)) != npos; ++at)
    for (const char* c : {"ringQ.wait(", "ringQ.release(", "ringK.wait(", "ringK.release(", "ringV.wait(", "ringV.release(",
                          "PP::wait_turn(", "PP::pass_turn("})
      if (code.compare(at, std::strlen(c), c) == 0 && (at == 0 || !std::isalnum(static_cast<unsigned char>(code[at - 1]))))
        calls.push_back(c);
  return calls;
}

// A ragged tile's second consumer warpgroup whose 64 rows all lie past the sequence's (a decoding
// sequence's G packed rows) computes nothing: it runs the key loop's shadow, the same ring waits,
// releases and pingpong turns in the same order as the computing warpgroups (else the rings' phases
// or the turns would stall the other), and no GEMM, softmax or store.
TEST(VarlenTranslate, Sm90IdleWarpgroupKeepsTheRingsAndTurns) {
  support::DiagSink d;
  auto p = varlen_plan("h100", d);
  ASSERT_TRUE(p.has_value()) << d.render();
  auto t = translated(p->code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  const size_t a = cu.find("if (rows.tile_row0 + 64 * cw >= v.seqlen_q * p.pack) {");
  ASSERT_NE(a, npos) << cu;
  const size_t b = cu.find("continue;", a);
  ASSERT_NE(b, npos);
  const std::string shadow = cu.substr(a, b - a);
  for (const char* x : {"gemm_", "row_max", "zero_rows_from", "store_", "exp2", "mask_tile"}) EXPECT_EQ(shadow.find(x), npos) << x;
  const size_t e = cu.find("store_o_ragged<", b);
  ASSERT_NE(e, npos);
  const std::string live = cu.substr(b, e - b);
  EXPECT_NE(live.find("gemm_rs<"), npos);
  const auto s_calls = sync_calls(shadow), l_calls = sync_calls(live);
  EXPECT_GE(s_calls.size(), 10u);
  EXPECT_EQ(s_calls, l_calls);
  // the unpacked ragged kernel (MHA) has the shadow by its own rows; a kernel of whole batches has none
  auto u = varlen_plan("h100", d, "causal", "32,32");
  ASSERT_TRUE(u.has_value()) << d.render();
  auto tu = translated(u->code, "h100", d);
  ASSERT_TRUE(tu.has_value()) << d.render();
  EXPECT_NE(tu->cuda_source.find("if (rows.tile_row0 + 64 * cw >= v.seqlen_q) {"), npos);
  spec::AttentionSpec whole = *spec::find_preset("llama3-8b");
  ASSERT_TRUE(spec::apply_flags(whole, {{"gpu", "h100"}, {"mask", "causal"}, {"lse", "true"}}, d)) << d.render();
  auto w = plan::make_plan(whole, *hw::find_gpu("h100"), d);
  ASSERT_TRUE(w.has_value()) << d.render();
  auto tw = translated(w->code, "h100", d);
  ASSERT_TRUE(tw.has_value()) << d.render();
  EXPECT_EQ(tw->cuda_source.find("rows.tile_row0 + 64 * cw >="), npos);
  EXPECT_EQ(tw->cuda_source.find("DenseTiles"), npos);  // (every tile live: the scheduler as it was)
  EXPECT_EQ(tw->cuda_source.find("sched.first"), npos);
  EXPECT_NE(tw->cuda_source.find("gemm_rs<"), npos);
}

TEST(VarlenTranslate, Sm80ReturnsPastTheSequenceAndOffsetsTheViews) {
  support::DiagSink d;
  auto p = varlen_plan("a100", d);
  ASSERT_TRUE(p.has_value()) << d.render();
  auto t = translated(p->code, "a100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  const std::string& cu = t->cuda_source;
  for (const char* s : {"seqlen_q = min(max(aux_cu_seqlens_q[b + 1] - aux_cu_seqlens_q[b], 0), p.seqlen_q);",
                        "if (m_block >= qattn::cdiv(seqlen_q, BM)) return;  // past this sequence's queries",
                        "const int startQ = min(max(aux_cu_seqlens_q[b], 0), p.total_q);",
                        "(p.q, int64_t(startQ) * p.q_row_stride + head * p.q_head_stride, min(seqlen_q, p.total_q - startQ), p.q_row_stride);",
                        "qattn::global_vector_out<float>(p.lse, int64_t(head) * p.total_q + startLSE, min(seqlen_q, p.total_q - startLSE));",
                        "qattn::MaskArgs{seqlen_q, seqlen_k}", "qattn::host::check_ragged(*params, true, true)"})
    EXPECT_NE(cu.find(s), npos) << s << "\n" << cu.substr(0, 0);
}

TEST(VarlenPlan, RaggedQueriesOverAPagedCache) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  support::DiagSink d;
  ASSERT_TRUE(spec::apply_flags(s, {{"gpu", "h100"}, {"varlen", "true"}, {"kv-cache", "paged"}, {"seqlen", "777/3000"}}, d))
      << d.render();
  auto p = plan::make_plan(s, *hw::find_gpu("h100"), d);
  ASSERT_TRUE(p.has_value()) << d.render();
  for (const char* line : {"Allocate cu_seqlens_q in global (batch + 1) int32\nLet seqlen_q = cu_seqlens_q[b + 1] - cu_seqlens_q[b]\n",
                           "Let seqlen_k = cache_seqlens[b]\n", "with offset [b, kv_head] {pack: heads_q / heads_kv, ragged: cu_seqlens_q}\n",
                           "with offset [b, kv_head] {paged: block_table}\n"})
    EXPECT_NE(p->code.find(line), npos) << line << p->code;
  EXPECT_EQ(p->code.find("cu_seqlens_k"), npos) << p->code;
  auto v = plan::verify(*p, d);
  EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
  auto t = translated(p->code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  for (const char* x : {"&p.tma_q, sQ, v.start_q * p.pack + v.m_block * BM, v.kv_head, 0, leader, p.pack);", "load_tile_paged<", "store_o_ragged<",
                        "qattn::host::check_ragged(*params, true, false)", "qattn::host::check_paged(*params, 8, "})
    EXPECT_NE(t->cuda_source.find(x), npos) << x;
  EXPECT_NE(t->info_json.find("\"varlen\":{\"cu_seqlens_q\":\"cu_seqlens_q\"},\"kv_cache\":{\"lengths\":\"cache_seqlens\","
                              "\"block_table\":\"block_table\"}"), npos) << t->info_json;
}

// Split keys over ragged queries and a paged cache (a serving step of few long sequences): the parts
// of O and LSE at [b, split, kv_head] of the ragged, packed views, verified, and lowered with part s
// at the map's batch entry s, its rows o_batch_stride (total_q rows) further, LSE's (splits, heads_q,
// total_q) entry s.
TEST(VarlenPlan, SplitKeysOverRaggedQueriesAndAPagedCache) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  support::DiagSink d;
  ASSERT_TRUE(spec::apply_flags(s, {{"gpu", "h100"}, {"varlen", "true"}, {"kv-cache", "paged"}, {"split-keys", "true"}}, d))
      << d.render();
  auto p = plan::make_plan(s, *hw::find_gpu("h100"), d);
  ASSERT_TRUE(p.has_value()) << d.render();
  for (const char* line : {"Allocate O in global (seqlen_q, d) bf16 with offset [b, split, kv_head] {pack: heads_q / heads_kv, "
                           "ragged: cu_seqlens_q}\n",
                           "Allocate LSE in global (seqlen_q) fp32 with offset [b, split, kv_head] {pack: heads_q / heads_kv, "
                           "ragged: cu_seqlens_q}\n",
                           ", b = 0: batch, split = 0: splits {persistent}\n"})
    EXPECT_NE(p->code.find(line), npos) << line << p->code;
  auto v = plan::verify(*p, d);
  EXPECT_TRUE(v.passed()) << v.sizes() << "\n" << d.render();
  auto t = translated(p->code, "h100", d);
  ASSERT_TRUE(t.has_value()) << d.render();
  for (const char* x : {"static_cast<Element*>(p.o) + int64_t(v.split) * p.o_batch_stride + int64_t(v.start_q) * p.o_row_stride + "
                        "int64_t(v.kv_head) * p.pack * p.o_head_stride, p.o_row_stride, v.seqlen_q * p.pack, p.o_head_stride, v.split);",
                        "store_rows_at(p.lse + int64_t(v.split) * p.heads_q * p.total_q, rLSE, rows, v.kv_head, p.total_q, v.start_q, "
                        "v.seqlen_q * p.pack);",
                        "constexpr bool kSplit = true;"})
    EXPECT_NE(t->cuda_source.find(x), npos) << x;
}

}  // namespace
}  // namespace qattn
