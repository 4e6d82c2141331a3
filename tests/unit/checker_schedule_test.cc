// Unit tests of the checker's Hopper schedule rules (src/tl/checker_schedule.cc, docs/tl.md
// "Hopper schedule"): Role statements, {stages}/{async}/{wait}/{release}/{overlap}, and the
// ScheduleInfo the sm90 translator reads; the absorbed-MLA program's `split columns` consumers and
// its shared view `{view: K}` (checker_views.cc: TL0421, TL0422; TL0719, TL0720).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "checker_test_util.h"
#include "tl/checker.h"

namespace qattn::tl {
namespace {

using test::Checked;
using test::kFlash;
using test::line_of;
using test::replace;
using test::run;

// ---- the Hopper schedule (checker_schedule.cc) ------------------------------------------------

const char* kSm90 = R"(Kernel flash_fwd with mask none
Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d
Const BM = 128, BN = 64, STAGES = 2
Grid m_block = 0: cdiv(seqlen_q, BM), head = 0: heads_q, b = 0: batch
Let kv_head = head / (heads_q / heads_kv)
Role producer warpgroups 1 registers 24
Role consumer warpgroups 2 registers 240 pingpong

Allocate Q in global (seqlen_q, d) fp16 with offset [b, head]
Allocate K in global (seqlen_k, d) fp16 with offset [b, kv_head]
Allocate V in global (seqlen_k, d) fp16 with offset [b, kv_head]
Allocate O in global (seqlen_q, d) fp16 with offset [b, head]
Allocate Q in shared (BM, d) fp16
Allocate K in shared (BN, d) fp16 {stages: STAGES}
Allocate V in shared (BN, d) fp16 {stages: STAGES}
Allocate O in register (BM, d) fp32 init 0
Allocate m in register (BM) fp32 init -inf
Allocate l in register (BM) fp32 init 0

Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}
for j = 0: cdiv(seqlen_k, BN) {overlap}
  Copy K (BN, d) in coordinate [j, 0] from global to shared {async}
  Compute GEMM Q, K^T and get S {wait: Q, wait: K, release: K}
  Compute Multiply S, softmax_scale * log2e
  Compute Mask S at [m_block, j] with bounds
  Compute RowMax S and get m_tile
  Compute Max m, m_tile and get m_new
  Compute Subtract m, m_new and get alpha
  Compute Exp2 alpha
  Compute Subtract S, m_new and get P
  Compute Exp2 P
  Compute RowSum P and get l_tile
  Compute Rescale l, alpha
  Compute Add l, l_tile
  Compute Rescale O, alpha
  Compute Convert P and get P16 fp16
  Reshape P16 from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)
  Copy V (BN, d) in coordinate [j, 0] from global to shared {async}
  Compute GEMM P16, V and accumulate O {wait: V, release: V}
  Compute Max m, m_new
end
Compute Normalize O, l
Copy O (BM, d) in coordinate [m_block, 0] from register to global
)";

TEST(checkerSchedule, Sm90ProgramPassesWithItsScheduleInfo) {
  support::DiagSink diags("test.tl");
  Program p = parse(kSm90, diags, "test.tl");
  CheckInfo info;
  EXPECT_TRUE(check(p, diags, {}, info)) << diags.render();
  EXPECT_TRUE(diags.all().empty()) << diags.render();
  const ScheduleInfo& s = info.schedule;
  EXPECT_TRUE(s.present);
  EXPECT_EQ(s.producer_wg, 1);
  EXPECT_EQ(s.producer_regs, 24);
  EXPECT_EQ(s.consumer_wg, 2);
  EXPECT_EQ(s.consumer_regs, 240);
  EXPECT_TRUE(s.pingpong);
  EXPECT_TRUE(s.overlap);
  EXPECT_EQ(s.stages, (std::map<std::string, int>{{"K", 2}, {"V", 2}, {"Q", 1}}));
  EXPECT_EQ(s.async_buffers, (std::set<std::string>{"Q", "K", "V"}));
  // Without a schedule: nothing.
  support::DiagSink d2;
  CheckInfo plain;
  EXPECT_TRUE(check(parse(kFlash, d2), d2, {}, plain)) << d2.render();
  EXPECT_FALSE(plain.schedule.present);
  EXPECT_TRUE(plain.schedule.stages.empty());
  EXPECT_FALSE(plain.schedule.overlap);
}

TEST(checkerSchedule, ConstNamesAndThreeConsumers) {
  std::string t = replace(kSm90, "Const BM = 128, BN = 64, STAGES = 2", "Const BM = 192, BN = 64, STAGES = 3, NC = BM / 64");
  t = replace(t, "Role producer warpgroups 1 registers 24", "Role producer warpgroups 1 registers 32");
  t = replace(t, "Role consumer warpgroups 2 registers 240 pingpong", "Role consumer warpgroups NC registers 160");
  support::DiagSink diags("test.tl");
  CheckInfo info;
  EXPECT_TRUE(check(parse(t, diags), diags, {}, info)) << diags.render();
  EXPECT_EQ(info.schedule.consumer_wg, 3);
  EXPECT_FALSE(info.schedule.pingpong);
  EXPECT_EQ(info.schedule.stages.at("K"), 3);
}

TEST(checkerSchedule, RolePlacementAndValues) {
  std::string in_loop = replace(kSm90, "  Compute Max m, m_new\n", "  Compute Max m, m_new\n  Role producer warpgroups 1 registers 24\n");
  EXPECT_CODE_AT(run(in_loop), "TL0702", in_loop, "  Role producer");
  std::string twice = replace(kSm90, "Role producer warpgroups 1 registers 24\n",
                              "Role producer warpgroups 1 registers 24\nRole producer warpgroups 1 registers 24 # again\n");
  EXPECT_CODE_AT(run(twice), "TL0702", twice, "Role producer warpgroups 1 registers 24 # again");
  std::string undeclared = replace(kSm90, "Role consumer warpgroups 2", "Role consumer warpgroups NC");
  auto r = run(undeclared);
  EXPECT_CODE_AT(r, "TL0301", undeclared, "Role consumer");
  EXPECT_FALSE(r.has("TL0703")) << r.rendered;
  std::string grid = replace(kSm90, "Role consumer warpgroups 2", "Role consumer warpgroups m_block");
  EXPECT_FALSE(run(grid).ok);
  std::string dyn = replace(kSm90, "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d", "Dim batch, heads_q, heads_kv, seqlen_q, seqlen_k, d, w");
  dyn = replace(dyn, "Role consumer warpgroups 2", "Role consumer warpgroups w");
  EXPECT_CODE_AT(run(dyn), "TL0703", dyn, "Role consumer");  // a Dim without a value is not compile-time
  std::string nine = replace(kSm90, "Role consumer warpgroups 2 registers 240", "Role consumer warpgroups 9 registers 24");
  EXPECT_CODE_AT(run(nine), "TL0703", nine, "Role consumer");
  for (const char* regs : {"16", "264", "100"}) {
    std::string t = replace(kSm90, "registers 24\n", std::string("registers ") + regs + "\n");
    EXPECT_CODE_AT(run(t), "TL0704", t, "Role producer");
  }
  std::string pp = replace(kSm90, "Role producer warpgroups 1 registers 24", "Role producer warpgroups 1 registers 24 pingpong");
  EXPECT_CODE_AT(run(pp), "TL0706", pp, "Role producer");
  std::string wide = replace(kSm90, "Role producer warpgroups 1 registers 24", "Role producer warpgroups 4 registers 56");
  EXPECT_CODE_AT(run(wide), "TL0705", wide, "Role consumer");
  // within the SM's 65536 but above the 3 x 168 per thread the block holds at launch: a hang on the GPU
  std::string pool = replace(kSm90, "Role producer warpgroups 1 registers 24", "Role producer warpgroups 1 registers 48");
  pool = replace(pool, "Role consumer warpgroups 2 registers 240", "Role consumer warpgroups 2 registers 232");
  EXPECT_CODE_AT(run(pool), "TL0705", pool, "Role consumer");
  std::string fits = replace(pool, "registers 232", "registers 224");  // 48 + 2 x 224 = 496 <= 504
  EXPECT_TRUE(run(fits).ok);
}

TEST(checkerSchedule, RolesComeInPairs) {
  std::string lone = replace(kSm90, "Role producer warpgroups 1 registers 24\n", "");
  auto r = run(lone);
  EXPECT_CODE_AT(r, "TL0707", lone, "Role consumer");
  EXPECT_EQ(r.count("TL0707"), 1) << r.rendered;
  // Roles without any async copy are fine (a schedule the translator may still use).
  std::string roles_only = kFlash;
  roles_only = replace(roles_only, "Let kv_head = head / (heads_q / heads_kv)\n",
                       "Let kv_head = head / (heads_q / heads_kv)\nRole producer warpgroups 1 registers 24\n"
                       "Role consumer warpgroups 1 registers 240\n");
  auto ok = run(roles_only);
  EXPECT_TRUE(ok.ok) << ok.rendered;
}

TEST(checkerSchedule, AttributePlacement) {
  std::string stages_reg = replace(kSm90, "Allocate O in register (BM, d) fp32 init 0", "Allocate O in register (BM, d) fp32 init 0 {stages: 2}");
  EXPECT_CODE_AT(run(stages_reg), "TL0708", stages_reg, "Allocate O in register");
  for (const char* v : {"{stages: 0}", "{stages: 65}", "{stages: seqlen_k}", "{stages}", "{stages: 2, stages: 3}"}) {
    std::string t = replace(kSm90, "Allocate Q in shared (BM, d) fp16", std::string("Allocate Q in shared (BM, d) fp16 ") + v);
    EXPECT_CODE_AT(run(t), "TL0708", t, "Allocate Q in shared");
  }
  std::string async_val = replace(kSm90, "from global to shared {async}\nfor", "from global to shared {async: 1}\nfor");
  EXPECT_CODE_AT(run(async_val), "TL0709", async_val, "Copy Q (BM");
  std::string async_alloc = replace(kSm90, "Allocate Q in shared (BM, d) fp16", "Allocate Q in shared (BM, d) fp16 {async}");
  EXPECT_CODE_AT(run(async_alloc), "TL0709", async_alloc, "Allocate Q in shared");
  // {stream} (an L2 evict-first hint, docs/tl.md): on the async copies that fill K / V, without a value
  const auto streamed = run(replace(kSm90, "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async}",
                                    "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async, stream}"));
  EXPECT_TRUE(streamed.ok && streamed.diags.empty()) << streamed.rendered;
  std::string stream_sync = replace(kSm90, "Allocate Q in shared (BM, d) fp16", "Allocate Q in shared (BM, d) fp16 {stream}");
  EXPECT_CODE_AT(run(stream_sync), "TL0709", stream_sync, "Allocate Q in shared");
  std::string stream_val = replace(kSm90, "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async}",
                                   "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async, stream: 1}");
  EXPECT_CODE_AT(run(stream_val), "TL0709", stream_val, "Copy K (BN, d) in coordinate [j, 0]");
  std::string no_name = replace(kSm90, "{wait: V, release: V}", "{wait, release: V}");
  EXPECT_CODE_AT(run(no_name), "TL0710", no_name, "Compute GEMM P16, V");
  std::string sync_q = replace(kSm90, "  Compute Max m, m_new\n",
                               "  Compute Max m, m_new\n  Copy O (BM, d) in coordinate [m_block, 0] from register to global {wait: O}\n");
  EXPECT_CODE_AT(run(sync_q), "TL0710", sync_q, "{wait: O}");
  std::string overlap_plain = replace(kSm90, "{wait: V, release: V}", "{wait: V, release: V}\n  Compute Add S, S");
  overlap_plain = replace(overlap_plain, "Compute GEMM P16, V and accumulate O", "Compute GEMM P16, V and get O2");
  overlap_plain = replace(overlap_plain, "Compute Normalize O, l", "Compute Normalize O, l {release: Q}");
  auto r = run(overlap_plain);
  EXPECT_CODE_AT(r, "TL0715", overlap_plain, "for j = 0");
  std::string overlap_value = replace(kSm90, "{overlap}", "{overlap: 2}");
  EXPECT_CODE_AT(run(overlap_value), "TL0715", overlap_value, "for j = 0");
}

TEST(checkerSchedule, WaitBeforeReadAlongEveryPath) {
  // The wait on the first iteration only (before the loop), the next tile prefetched at the end of
  // the body without a wait: the back edge reaches the GEMM with K pending.
  std::string t = replace(kSm90, "Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}\n",
                          "Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}\n"
                          "Copy K (BN, d) in coordinate [0, 0] from global to shared {async}\n"
                          "Compute Normalize O, l {wait: K}\n");
  t = replace(t, "  Copy K (BN, d) in coordinate [j, 0] from global to shared {async}\n", "");
  t = replace(t, "{wait: Q, wait: K, release: K}", "{wait: Q, release: K}");
  t = replace(t, "  Compute Max m, m_new\n", "  Compute Max m, m_new\n  Copy K (BN, d) in coordinate [j + 1, 0] from global to shared {async}\n");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0711", t, "Compute GEMM Q, K^T");
  EXPECT_NE(r.rendered.find("back edge"), std::string::npos) << r.rendered;
  // The same prefetch with the wait in the loop is the classic software pipeline: correct.
  std::string ok = replace(t, "{wait: Q, release: K}", "{wait: Q, wait: K, release: K}");
  auto r2 = run(ok);
  EXPECT_FALSE(r2.has("TL0711") || r2.has("TL0712") || r2.has("TL0713") || r2.has("TL0714") || r2.has("TL0716")) << r2.rendered;
  // A read after the loop of a buffer released in it.
  std::string after = replace(kSm90, "Compute Normalize O, l\n", "Compute GEMM Q, K^T and get S2\nCompute Normalize O, l\n");
  EXPECT_CODE_AT(run(after), "TL0712", after, "Compute GEMM Q, K^T and get S2");
}

TEST(checkerSchedule, ReleaseInTheLoopThatCopies) {
  std::string t = replace(kSm90, "{wait: Q, wait: K, release: K}", "{wait: Q, wait: K}");
  auto r = run(t);
  EXPECT_CODE_AT(r, "TL0713", t, "  Copy K (BN");
  EXPECT_FALSE(r.has("TL0714")) << r.rendered;  // K has 2 stages
  // With one stage the next iteration's copy also overwrites the tile still held.
  std::string one = replace(t, "Allocate K in shared (BN, d) fp16 {stages: STAGES}", "Allocate K in shared (BN, d) fp16");
  auto r1 = run(one);
  EXPECT_CODE_AT(r1, "TL0713", one, "  Copy K (BN");
  EXPECT_CODE_AT(r1, "TL0714", one, "  Copy K (BN");
  // Two copies per iteration and one release: unbalanced.
  std::string two = replace(kSm90, "  Compute Max m, m_new\n",
                            "  Compute Max m, m_new\n  Copy V (BN, d) in coordinate [j, 0] from global to shared {async}\n"
                            "  Compute Max m, m_new {wait: V}\n");
  auto r2 = run(two);
  EXPECT_CODE_AT(r2, "TL0713", two, "  Copy V (BN");
  EXPECT_NE(r2.rendered.find("2 times per iteration but releases it once"), std::string::npos) << r2.rendered;
  // Q, copied once before the loop and never released, is fine.
  EXPECT_TRUE(run(kSm90).ok);
  // A second copy of Q (1 stage, still held) overwrites it.
  std::string q2 = replace(kSm90, "Compute Normalize O, l\n",
                           "Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}\nCompute Normalize O, l\n");
  EXPECT_CODE_AT(run(q2), "TL0714", q2, "Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}\nCompute Normalize");
}

TEST(checkerSchedule, ReleaseOnlyAHeldTile) {
  std::string before_wait = replace(kSm90, "  Copy V (BN, d) in coordinate [j, 0] from global to shared {async}",
                                    "  Copy V (BN, d) in coordinate [j, 0] from global to shared {async, release: V}");
  before_wait = replace(before_wait, "{wait: V, release: V}", "{wait: V}");
  auto r = run(before_wait);
  EXPECT_CODE_AT(r, "TL0716", before_wait, "{async, release: V}");
  std::string twice = replace(kSm90, "  Compute Max m, m_new\n", "  Compute Max m, m_new {release: K}\n");
  EXPECT_CODE_AT(run(twice), "TL0716", twice, "{release: K}\n");
}

// ---- absorbed MLA: `split columns` and the shared view V of K ----------------------------------

// tests/tl/mla_absorbed_paged.tl from its Kernel line (the heading comment dropped, so that the
// line numbers of the EXPECT_CODE_AT needles are the program's).
std::string mla() {
  std::ifstream in(std::string(QATTN_SOURCE_DIR) + "/tests/tl/mla_absorbed_paged.tl", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t at = text.find("\nKernel ");
  EXPECT_NE(at, std::string::npos);
  return at == std::string::npos ? text : text.substr(at + 1);
}

// Every diagnostic of `code` has a location and a hint that contains `hint_words`.
void expect_hint(const Checked& r, const std::string& code, const std::string& hint_words) {
  int n = 0;
  for (const auto& d : r.diags) {
    if (d.code != code) continue;
    ++n;
    EXPECT_GT(d.loc.line, 0) << support::render(d);
    EXPECT_NE(d.hint.find(hint_words), std::string::npos) << support::render(d);
  }
  EXPECT_GT(n, 0) << "no " << code << "\n" << r.rendered;
}

TEST(checkerSchedule, AbsorbedMlaPassesWithItsScheduleInfo) {
  support::DiagSink diags("test.tl");
  CheckInfo info;
  EXPECT_TRUE(check(parse(mla(), diags), diags, {}, info)) << diags.render();
  EXPECT_TRUE(diags.all().empty()) << diags.render();
  const ScheduleInfo& s = info.schedule;
  EXPECT_TRUE(s.present);
  EXPECT_TRUE(s.split_columns);
  EXPECT_FALSE(s.pingpong);
  EXPECT_EQ(s.consumer_wg, 2);
  EXPECT_EQ(s.consumer_regs, 232);
  EXPECT_EQ(s.async_buffers, (std::set<std::string>{"Q", "K"}));
  EXPECT_EQ(s.stages, (std::map<std::string, int>{{"K", 2}, {"Q", 1}}));  // V: no ring of its own
  EXPECT_EQ(info.tensors.at("V").shared_view_of, "K");
  EXPECT_FALSE(info.tensors.at("V").in_global);
  EXPECT_TRUE(info.tensors.at("K").shared_view_of.empty());
  EXPECT_EQ(info.paged, "block_table");  // K paged, V its columns: no "K paged and V not"
  // The plain sm90 program has no split columns.
  support::DiagSink d2;
  CheckInfo plain;
  EXPECT_TRUE(check(parse(kSm90, d2), d2, {}, plain)) << d2.render();
  EXPECT_FALSE(plain.schedule.split_columns);
  EXPECT_TRUE(plain.tensors.at("V").shared_view_of.empty());
}

TEST(checkerSchedule, SplitColumnsOnTwoOrMoreConsumersWithoutPingpong) {
  const std::string t = mla();
  std::string prod = replace(t, "Role producer warpgroups 1 registers 40", "Role producer warpgroups 1 registers 40 split columns");
  auto r = run(prod);
  EXPECT_CODE_AT(r, "TL0719", prod, "Role producer");
  expect_hint(r, "TL0719", "write it on the consumer Role");
  std::string one = replace(t, "Role consumer warpgroups 2 registers 232 split columns", "Role consumer warpgroups 1 registers 232 split columns");
  r = run(one);
  EXPECT_CODE_AT(r, "TL0719", one, "Role consumer");
  expect_hint(r, "TL0719", "Role consumer warpgroups 2");
  std::string pp = replace(t, "registers 232 split columns", "registers 232 pingpong split columns");
  r = run(pp);
  EXPECT_CODE_AT(r, "TL0719", pp, "Role consumer");
  EXPECT_EQ(r.count("TL0719"), 1) << r.rendered;
  // Three split consumers are fine for the checker (the sm90 lowering takes two).
  std::string three = replace(t, "Role producer warpgroups 1 registers 40", "Role producer warpgroups 1 registers 24");
  three = replace(three, "Role consumer warpgroups 2 registers 232", "Role consumer warpgroups 3 registers 160");
  EXPECT_TRUE(run(three).ok) << run(three).rendered;
}

TEST(checkerSchedule, SplitColumnsReadsTheStagedP) {
  const std::string t = mla();
  // P not staged in shared memory: the register tile is an accumulator, and the hint says to stage it.
  std::string unstaged = replace(t, "  Copy Pc from register to shared\n", "");
  auto r = run(unstaged);
  EXPECT_CODE_AT(r, "TL0501", unstaged, "Compute GEMM Pc, V");
  expect_hint(r, "TL0501", "Copy Pc from register to shared");
  // Staged, then written again: the shared copy is stale.
  std::string stale = replace(t, "  Copy Pc from register to shared\n", "  Copy Pc from register to shared\n  Compute Exp2 Pc\n");
  EXPECT_CODE_AT(run(stale), "TL0501", stale, "Compute GEMM Pc, V");
  // Staging counts for split-columns consumers only: elsewhere an accumulator needs its Reshape.
  std::string rows = replace(t, "registers 232 split columns", "registers 232");
  EXPECT_CODE_AT(run(rows), "TL0501", rows, "Compute GEMM Pc, V");
  std::string reshaped = replace(rows, "  Copy Pc from register to shared\n",
                                 "  Reshape Pc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)\n");
  EXPECT_TRUE(run(reshaped).ok) << run(reshaped).rendered;
}

TEST(checkerSchedule, ViewReadsFollowItsBaseAndItsSyncNamesTheBase) {
  const std::string t = mla();
  // `release: V`: V has no ring; K is then never released (TL0713 too).
  std::string rel = replace(t, "{release: K}", "{release: V}");
  auto r = run(rel);
  EXPECT_CODE_AT(r, "TL0720", rel, "Compute GEMM Pc, V");
  expect_hint(r, "TL0720", "{release: K}");
  EXPECT_FALSE(r.has("TL0710")) << r.rendered;
  std::string wait = replace(t, "{wait: Q, wait: K}", "{wait: Q, wait: V}");
  r = run(wait);
  EXPECT_CODE_AT(r, "TL0720", wait, "Compute GEMM Q, K^T");
  expect_hint(r, "TL0720", "{wait: K}");
  // K released after the first GEMM: the second reads V, i.e. K's released slot.
  std::string early = replace(t, "{wait: Q, wait: K}", "{wait: Q, wait: K, release: K}");
  early = replace(early, "Compute GEMM Pc, V and accumulate O {release: K}", "Compute GEMM Pc, V and accumulate O");
  r = run(early);
  EXPECT_CODE_AT(r, "TL0712", early, "Compute GEMM Pc, V");
  EXPECT_NE(r.rendered.find("through its view V"), std::string::npos) << r.rendered;
}

TEST(checkerSchedule, MalformedViews) {
  const std::string t = mla();
  struct Case { const char* from; const char* to; const char* at; const char* hint; };
  const Case cases[] = {
      {"Allocate O in register (BM, dv) fp32 init 0", "Allocate O in register (BM, dv) fp32 init 0 {view: K}",
       "Allocate O in register", "view: K"},
      {"{view: K}", "{view}", "Allocate V in shared", "view: K"},
      {"Allocate K in shared (BN, d) bf16 {stages: STAGES}\nAllocate V in shared (BN, dv) bf16 {view: K}",
       "Allocate V in shared (BN, dv) bf16 {view: K}\nAllocate K in shared (BN, d) bf16 {stages: STAGES}", "Allocate V in shared",
       "allocate the base first"},
      {"Allocate Pc in shared (BM, BN) bf16", "Allocate Pc in shared (BM, BN) bf16\nAllocate W in shared (BN, dv) bf16 {view: V}",
       "Allocate W in shared", "{view: K}"},
      {"Allocate V in shared (BN, dv) bf16 {view: K}", "Allocate V in shared (BM, dv) bf16 {view: K}", "Allocate V in shared",
       "(BN, dv)"},
      {"Allocate V in shared (BN, dv) bf16 {view: K}", "Allocate V in shared (BN, dv) fp16 {view: K}", "Allocate V in shared",
       "bf16 {view: K}"},
      {"dv = 512", "dv = 640", "Allocate V in shared", "at most d columns"},
      {"{view: K}", "{view: K, stages: 2}", "Allocate V in shared", "ring is K's"},
      {"{view: K}", "{view: K, view: K}", "Allocate V in shared", "keep one"},
      {"  Copy Pc from register to shared\n", "  Copy Pc from register to shared {view: K}\n", "  Copy Pc from register", "Allocate V"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.to);
    std::string bad = replace(t, c.from, c.to);
    auto r = run(bad);
    EXPECT_FALSE(r.ok);
    EXPECT_CODE_AT(r, "TL0421", bad, c.at);
    expect_hint(r, "TL0421", c.hint);
  }
  // Copies into a view: from global and from registers.
  std::string g = replace(t, "  Compute GEMM Q, K^T and get S",
                          "  Copy V (BN, dv) in coordinate [j, 0] from global to shared {async}\n  Compute GEMM Q, K^T and get S");
  auto r = run(g);
  EXPECT_CODE_AT(r, "TL0422", g, "  Copy V (BN, dv)");
  expect_hint(r, "TL0422", "copy the tile into K");
  std::string reg = replace(t, "  Compute Max m, m_new\n", "  Compute Max m, m_new\n  Copy Pc from register to shared\n");
  reg = replace(reg, "Allocate Pc in shared (BM, BN) bf16", "Allocate Pc in shared (BM, BN) bf16 {view: Q}");
  reg = replace(reg, "Allocate Q in shared (BM, d) bf16", "Allocate Q in shared (BM, BN) bf16");
  reg = replace(reg, "Copy Q (BM, d) in coordinate", "Copy Q (BM, BN) in coordinate");
  r = run(reg);
  EXPECT_CODE_AT(r, "TL0422", reg, "  Copy Pc from register to shared\n  Compute GEMM Pc");
  expect_hint(r, "TL0422", "without `view`");
  // Reading a view into registers is fine.
  std::string load = replace(t, "Allocate O in register (BM, dv) fp32 init 0", "Allocate V in register (BN, dv) bf16\nAllocate O in register (BM, dv) fp32 init 0");
  load = replace(load, "  Compute GEMM Pc, V", "  Copy V from shared to register\n  Compute GEMM Pc, V");
  EXPECT_TRUE(run(load).ok) << run(load).rendered;
}

TEST(checkerSchedule, NoGlobalVOnlyForAViewOfK) {
  const std::string t = mla();
  // V a plain shared buffer: nothing fills it, and the attention has no V.
  std::string plain = replace(t, " {view: K}", "");
  auto r = run(plain);
  EXPECT_TRUE(r.has("TL0406")) << r.rendered;
  EXPECT_NE(r.rendered.find("never allocates the global tensor V"), std::string::npos) << r.rendered;
  EXPECT_CODE_AT(r, "TL0305", plain, "Compute GEMM Pc, V");
  // A global V beside the view is allowed (unused), paged like K.
  std::string both = replace(t, "Allocate O in global", "Allocate V in global (seqlen_k, dv) bf16 with offset [b, kv_head] {paged: block_table}\nAllocate O in global");
  EXPECT_TRUE(run(both).ok) << run(both).rendered;
  // ... but then it must be paged like K (the view's exemption is for a program without global V).
  std::string unpaged = replace(t, "Allocate O in global", "Allocate V in global (seqlen_k, dv) bf16 with offset [b, kv_head]\nAllocate O in global");
  EXPECT_TRUE(run(unpaged).has("TL0416")) << run(unpaged).rendered;
}

}  // namespace
}  // namespace qattn::tl
