// The kernel IR (src/backend/kir.h) of every architecture:
//  (A) golden IR: every tests/kir/<name>.tl translates for the GPU its name starts with (sm90_: H100,
//      sm80_: A100, sm75_: T4, sm89_: L40S) and its printed kernel IR (Translation::kir, i.e.
//      kir::print, the kernel.kir artifact) is exactly tests/kir/<name>.kir.
//      After an intended change of the lowering or the printer, refresh the goldens with
//        QATTN_UPDATE_GOLDEN=1 ./build/tests/kir_test --gtest_filter='*KirGolden.*'
//      and review `git diff tests/kir/`.
//  (B) must-fail verifier tests: a real program lowered to a kir::Kernel (detail::Lowering +
//      sm90::Lower, as translate.cc chains them) passes kir::verify; each test breaks one invariant
//      (shared memory, alignment, wgmma shapes, registers, rings, GEMM waits, stores, register
//      names) and expects XL0901 with a message naming the problem. The mma.sync kernels
//      (detail::Lowering::describe) likewise: shared memory, warps, GEMM operands, the cp.async
//      pipeline; and the mma emitter follows the IR's plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/kir.h"
#include "backend/kir_print.h"
#include "backend/kir_verify.h"
#include "backend/lowering.h"
#include "backend/sm90/lower.h"
#include "backend/translate.h"
#include "diag_test_util.h"
#include "hw/gpu.h"
#include "plan/plan.h"
#include "tl/checker.h"
#include "tl/parser.h"

namespace qattn::backend {
namespace {

namespace fs = std::filesystem;
using kir::Op;

const fs::path kDir = fs::path(QATTN_SOURCE_DIR) / "tests" / "kir";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

plan::Target h100() { return plan::make_target(*hw::find_gpu("h100")); }
// The GPU a golden translates for, from its name's prefix.
plan::Target target_of(const std::string& name) {
  const char* gpu = name.rfind("sm80_", 0) == 0 ? "a100" : name.rfind("sm75_", 0) == 0 ? "t4" : name.rfind("sm89_", 0) == 0 ? "l40s" : "h100";
  return plan::make_target(*hw::find_gpu(gpu));
}

bool updating() {
  const char* u = std::getenv("QATTN_UPDATE_GOLDEN");
  return u && std::string(u) == "1";
}

// ---- (A) golden IR ------------------------------------------------------------------------------

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  if (fs::is_directory(kDir))
    for (const auto& e : fs::directory_iterator(kDir))
      if (e.path().extension() == ".tl") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class KirGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(KirGolden, PrintedIrMatches) {
  const fs::path tl = kDir / (GetParam() + ".tl"), golden = kDir / (GetParam() + ".kir");
  support::DiagSink d;
  auto t = translate_text(read(tl), target_of(GetParam()), d, tl.filename().string());
  ASSERT_TRUE(t.has_value()) << d.render();
  ASSERT_FALSE(t->kir.empty()) << "no kernel IR for " << tl;
  EXPECT_NE(t->kir.find(GetParam().rfind("sm90_", 0) == 0 ? "family wgmma" : "family mma"), std::string::npos) << t->kir;
  if (updating()) {
    std::ofstream(golden, std::ios::binary) << t->kir;
    std::cout << "[kir_test] wrote " << golden.string() << "\n";
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; create it with\n  QATTN_UPDATE_GOLDEN=1 ./build/tests/kir_test"
                                  << " --gtest_filter='*KirGolden.*'";
  const std::string want = read(golden);
  if (t->kir == want) return;
  // the first differing line, then the whole IR
  std::istringstream a(want), b(t->kir);
  std::string la, lb;
  int n = 1;
  while (true) {
    const bool ea = !std::getline(a, la), eb = !std::getline(b, lb);
    if (ea && eb) break;
    if (ea || eb || la != lb) break;
    ++n;
  }
  ADD_FAILURE() << "the kernel IR of " << tl.filename().string() << " differs from " << golden.filename().string()
                << " at line " << n << ":\n  golden: " << la << "\n  now:    " << lb
                << "\nIf the change is intended (lowering or printer changed), refresh the goldens with\n"
                << "  QATTN_UPDATE_GOLDEN=1 ./build/tests/kir_test --gtest_filter='*KirGolden.*'\n"
                << "and review `git diff tests/kir/`. The IR now:\n"
                << t->kir;
}

INSTANTIATE_TEST_SUITE_P(Tl, KirGolden, ::testing::ValuesIn(golden_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The corpus is not empty and holds no stale goldens (a .kir without its .tl).
TEST(KirGoldenCorpus, EveryGoldenHasItsProgram) {
  EXPECT_GE(golden_names().size(), 10u) << kDir;
  const std::vector<std::string> names = golden_names();
  for (const char* arch : {"sm90_", "sm80_", "sm75_", "sm89_"})
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(arch, 0) == 0; })) << "no golden for " << arch;
  for (const auto& e : fs::directory_iterator(kDir))
    if (e.path().extension() == ".kir") {
      EXPECT_TRUE(fs::exists(kDir / (e.path().stem().string() + ".tl"))) << e.path() << " has no .tl";
    }
}

// ---- (B) the verifier ---------------------------------------------------------------------------

// A TL program lowered to the kernel IR the way translate.cc does it (not yet verified).
kir::Kernel lower(const std::string& golden) {
  support::DiagSink d;
  tl::Program p = tl::parse(read(kDir / (golden + ".tl")), d, golden + ".tl");
  tl::CheckInfo info;
  EXPECT_TRUE(!d.has_errors() && tl::check(p, d, {}, info)) << d.render();
  const plan::Target target = h100();
  detail::Lowering front(p, info, target, d);
  EXPECT_TRUE(front.analyze_front()) << d.render();
  EXPECT_TRUE(front.wgmma()) << golden << " is not in the wgmma form";
  auto k = sm90::Lower(front, p, info, target, d).run();
  EXPECT_TRUE(k.has_value()) << d.render();
  return k ? *k : kir::Kernel{};
}

// A TL program analysed for an mma.sync architecture and described as IR (not yet verified), with
// its Lowering kept for emitting: translate.cc's chain.
struct MmaLowered {
  tl::Program prog;
  tl::CheckInfo info;
  plan::Target target;
  support::DiagSink d;
  std::unique_ptr<detail::Lowering> front;
  kir::Kernel k;
};
std::unique_ptr<MmaLowered> lower_mma(const std::string& golden) {
  auto m = std::make_unique<MmaLowered>();
  m->prog = tl::parse(read(kDir / (golden + ".tl")), m->d, golden + ".tl");
  EXPECT_TRUE(!m->d.has_errors() && tl::check(m->prog, m->d, {}, m->info)) << m->d.render();
  m->target = target_of(golden);
  m->front = std::make_unique<detail::Lowering>(m->prog, m->info, m->target, m->d);
  EXPECT_TRUE(m->front->analyze_front()) << m->d.render();
  EXPECT_FALSE(m->front->wgmma()) << golden;
  EXPECT_TRUE(m->front->analyze_mma()) << m->d.render();
  m->k = m->front->describe();
  return m;
}

class KirVerify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    causal_ = new kir::Kernel(lower("sm90_llama3_8b_causal"));
    mla_ = new kir::Kernel(lower("sm90_mla_lse"));
    d64_ = new kir::Kernel(lower("sm90_d64_none"));
  }
  static void TearDownTestSuite() {
    delete causal_;
    delete mla_;
    delete d64_;
  }
  void SetUp() override {
    for (const kir::Kernel* k : {causal_, mla_, d64_}) ASSERT_EQ(k->family, "wgmma");
  }

  // `k` passes as lowered, and fails with XL0901 naming `what` once `mutate` has run on a copy.
  static void expect_rejected(const kir::Kernel& k, const std::function<void(kir::Kernel&)>& mutate, const std::string& what) {
    support::DiagSink ok;
    ASSERT_TRUE(kir::verify(k, ok)) << "the unmutated kernel must verify:\n" << ok.render();
    kir::Kernel m = k;
    mutate(m);
    support::DiagSink d;
    EXPECT_FALSE(kir::verify(m, d)) << "the mutation was not caught (expected: " << what << ")\n" << kir::print(m);
    const support::Diagnostic* x = test::find(d, "XL0901");
    ASSERT_NE(x, nullptr) << d.render();
    EXPECT_TRUE(test::contains(x->message, what)) << "expected the message to name `" << what << "`:\n" << d.render();
  }

  // The first op of `kind` (on ring `buffer`) in a block; the shared buffer or register tensor named.
  // Not there (the lowering changed): the test fails with what is missing.
  static std::vector<Op>::iterator find_op(std::vector<Op>& ops, Op::Kind kind, const std::string& buffer = {}) {
    auto it = std::find_if(ops.begin(), ops.end(), [&](const Op& o) { return o.kind == kind && (buffer.empty() || o.buffer == buffer); });
    if (it == ops.end()) throw std::runtime_error("the block has no op of kind " + std::to_string(int(kind)) + " " + buffer);
    return it;
  }
  static kir::SharedBuf& smem(kir::Kernel& k, const std::string& name) {
    for (auto& b : k.smem)
      if (b.name == name) return b;
    throw std::runtime_error("no shared buffer " + name);
  }
  static kir::Reg& reg(kir::Kernel& k, const std::string& name) {
    for (auto& r : k.sm90.regs)
      if (r.name == name) return r;
    throw std::runtime_error("no register tensor " + name);
  }

  static kir::Kernel* causal_;  // llama3-8b: 2 pingpong consumers, {overlap}, Q K V rings, O in its own tile
  static kir::Kernel* mla_;     // d 192/128, LSE
  static kir::Kernel* d64_;     // 3 consumers (BM 192), O staged in Q's tile
};
kir::Kernel* KirVerify::causal_ = nullptr;
kir::Kernel* KirVerify::mla_ = nullptr;
kir::Kernel* KirVerify::d64_ = nullptr;

TEST_F(KirVerify, RealProgramsVerify) {
  for (const auto& n : golden_names()) {
    // a backward program's IR is its lowering's own text (src/backend/bwd), golden-tested above; the
    // kir::Kernel verifier covers the forward families
    if (n.find("_bwd_") != std::string::npos) continue;
    support::DiagSink d;
    if (n.rfind("sm90_", 0) == 0) EXPECT_TRUE(kir::verify(lower(n), d)) << n << "\n" << d.render();
    else EXPECT_TRUE(kir::verify(lower_mma(n)->k, d)) << n << "\n" << d.render();
  }
}

// ---- shared memory

TEST_F(KirVerify, SharedMemoryOverTheTargetsLimit) {
  expect_rejected(*causal_, [](kir::Kernel& k) { k.launch.smem_bytes = k.smem_limit + 1024; }, "bytes of shared memory; the target has 232448");
}

TEST_F(KirVerify, SharedBuffersOverlap) {
  // K moved onto the second half of Q (still 1024-aligned): the two tiles share bytes
  expect_rejected(*causal_, [](kir::Kernel& k) { smem(k, "K").offset = smem(k, "Q").offset + 16384; }, "shared buffers overlap at byte 16384");
}

TEST_F(KirVerify, TileNotAlignedForTheSwizzle) {
  expect_rejected(*causal_, [](kir::Kernel& k) { smem(k, "V").offset += 512; }, "shared V at offset 98816 is not 1024-byte aligned");
}

TEST_F(KirVerify, StagedOutputLargerThanItsHost) {
  // d64: O is staged in Q's tile; a wider O no longer fits there
  expect_rejected(*d64_, [](kir::Kernel& k) { smem(k, "O").cols_padded = 128; }, "shared O does not fit in Q's space");
}

// ---- wgmma shapes

TEST_F(KirVerify, GemmAccumulatorWithNoWgmmaN) {
  expect_rejected(*causal_, [](kir::Kernel& k) { reg(k, "S").cols = 264; }, "no wgmma has N = 264");
}

TEST_F(KirVerify, GemmAtomDoesNotMatchTheAccumulator) {
  expect_rejected(*mla_, [](kir::Kernel& k) {
    auto it = find_op(k.sm90.loop.steady, Op::Kind::GemmSS);
    const size_t at = it->atom.find("Wgmma<112,");
    ASSERT_NE(at, std::string::npos) << it->atom;
    it->atom.replace(at, 10, "Wgmma<128,");
  }, "the atom's N is not the accumulator's");
}

TEST_F(KirVerify, GemmOperandShapesDoNotTile) {
  // MLA: S = Q K^T over K = 192; a GEMM that claims K = 128 reads only part of the rows of Q and K
  expect_rejected(*mla_, [](kir::Kernel& k) { find_op(k.sm90.loop.first, Op::Kind::GemmSS)->k_dim = 128; }, "the operand shapes do not tile");
}

// ---- registers and roles

TEST_F(KirVerify, RegistersOverTheSm) {
  // 3 consumer warpgroups x 256 + a producer of 32: 128 * 800 = 102400 registers > 65536
  expect_rejected(*d64_, [](kir::Kernel& k) { k.roles.consumer_regs = 256; }, "the roles take 102400 registers; the block holds 65536 at launch");
  // within the SM but above the 3 x 168 per thread that 384 threads get at launch (setmaxnreg.inc would wait for ever)
  expect_rejected(*causal_, [](kir::Kernel& k) { k.roles.producer_regs = 48; k.roles.consumer_regs = 232; },
                  "the roles take 65536 registers; the block holds 64512 at launch");
}

TEST_F(KirVerify, RegisterCountNotASetmaxnregValue) {
  expect_rejected(*causal_, [](kir::Kernel& k) { k.roles.producer_regs = 36; }, "36 registers per thread is not a setmaxnreg value");
}

TEST_F(KirVerify, OpNamesAnUndeclaredRegisterTensor) {
  expect_rejected(*causal_, [](kir::Kernel& k) { find_op(k.sm90.loop.steady, Op::Kind::RowMax)->result = "m_tmp"; },
                  "names m_tmp, which is not a register tensor");
}

// ---- rings

TEST_F(KirVerify, RingWaitWithNoLoad) {
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& l = k.sm90.loads;
    l.erase(std::remove_if(l.begin(), l.end(), [](const kir::Load& x) { return x.buffer == "K"; }), l.end());
  }, "K is never loaded: its waits have no producer");
}

TEST_F(KirVerify, RingSlotNeverReleased) {
  // the steady block waits for a K slot every key tile but never gives it back: the producer's
  // third load of K would wait forever
  expect_rejected(*causal_, [](kir::Kernel& k) { k.sm90.loop.steady.erase(find_op(k.sm90.loop.steady, Op::Kind::RingRelease, "K")); },
                  "K is loaded 1 time(s) per key tile but released 0 time(s)");
}

TEST_F(KirVerify, RingWaitedForTwice) {
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& s = k.sm90.loop.steady;
    auto w = find_op(s, Op::Kind::RingWait, "K");
    const Op copy = *w;
    s.insert(w + 1, copy);
  }, "K is loaded 1 time(s) per key tile but waited for 2 time(s)");
}

TEST_F(KirVerify, RingWaitedForTwiceBeforeARelease) {
  // two K loads per key tile, waited for and released twice: counts agree, but the second wait
  // comes before the first release (it would wait for a slot the consumer still holds)
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& l = k.sm90.loads;
    auto kl = std::find_if(l.begin(), l.end(), [](const kir::Load& x) { return x.buffer == "K"; });
    const kir::Load load = *kl;
    l.insert(kl, load);
    for (auto* b : {&k.sm90.loop.first, &k.sm90.loop.steady}) {
      auto w = find_op(*b, Op::Kind::RingWait, "K");
      const Op wait = *w;
      b->insert(w + 1, wait);
      auto r = find_op(*b, Op::Kind::RingRelease, "K");
      const Op release = *r;
      b->insert(r + 1, release);
    }
  }, "K is waited for twice before a release");
}

TEST_F(KirVerify, RingReleasedBeforeItsWait) {
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& s = k.sm90.loop.steady;
    Op rel = *find_op(s, Op::Kind::RingRelease, "V");
    s.erase(find_op(s, Op::Kind::RingRelease, "V"));
    s.insert(find_op(s, Op::Kind::RingWait, "V"), rel);
  }, "V is released before it is waited for");
}

TEST_F(KirVerify, GemmReadsARingWithoutAWait) {
  // the wait for K after the GEMM that reads it
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& s = k.sm90.loop.steady;
    Op w = *find_op(s, Op::Kind::RingWait, "K");
    s.erase(find_op(s, Op::Kind::RingWait, "K"));
    s.insert(find_op(s, Op::Kind::GemmSS) + 1, w);
  }, "reads K without a wait");
}

// ---- GEMM completion

TEST_F(KirVerify, GemmWaitCountsMoreGroupsThanInFlight) {
  // steady: `gemm.wait through #0 (pending 1)` with #0 and #1 in flight; pending 2 waits for nothing
  expect_rejected(*causal_, [](kir::Kernel& k) { find_op(k.sm90.loop.steady, Op::Kind::GemmWait)->pending = 2; },
                  "(pending 2): S  (for TL 30)` with 2 GEMMs in flight");
}

TEST_F(KirVerify, BlockEndsWithAGemmInFlight) {
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& d = k.sm90.loop.drain;
    auto last = std::find_if(d.rbegin(), d.rend(), [](const Op& o) { return o.kind == Op::Kind::GemmWait; });
    ASSERT_NE(last, d.rend());
    // the wait and the release it allows: the drain then ends with the P V GEMM in flight
    auto w = std::next(last).base();
    if (std::next(w) != d.end() && std::next(w)->kind == Op::Kind::RingRelease) d.erase(std::next(w));
    d.erase(w);
  }, "a block ends with GEMM #1 in flight");
}

// ---- stores

TEST_F(KirVerify, OutputStoredTwice) {
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& a = k.sm90.after;
    const Op store = *find_op(a, Op::Kind::StoreO);
    a.push_back(store);
  }, "O is stored 2 times");
}

TEST_F(KirVerify, OutputNeverStored) {
  expect_rejected(*causal_, [](kir::Kernel& k) { k.sm90.after.erase(find_op(k.sm90.after, Op::Kind::StoreO)); }, "O is stored 0 times");
}

TEST_F(KirVerify, LseNeverStored) {
  expect_rejected(*mla_, [](kir::Kernel& k) { k.sm90.after.erase(find_op(k.sm90.after, Op::Kind::StoreRows)); }, "LSE is stored 0 times");
}

// ---- the in-flight, turn, kind, load-shape and store-placement checks of kir_verify.cc

TEST_F(KirVerify, OpTouchesTheAccumulatorOfAnInFlightGemm) {
  // steady: the wait for S = Q K^T moved after `mask S`: the mask reads S while the wgmma still writes it
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& s = k.sm90.loop.steady;
    // the wait moves with the releases it allows
    auto at = find_op(s, Op::Kind::GemmWait);
    auto end = std::next(at);
    while (end != s.end() && end->kind == Op::Kind::RingRelease) ++end;
    std::vector<Op> moved(at, end);
    s.erase(at, end);
    s.insert(find_op(s, Op::Kind::Mask) + 1, moved.begin(), moved.end());
  }, "`mask S with causal at key tile j` writes S while GEMM #0 is in flight");
}

TEST_F(KirVerify, GemmWaitFencesTooFewRegisters) {
  expect_rejected(*causal_, [](kir::Kernel& k) { find_op(k.sm90.loop.steady, Op::Kind::GemmWait)->regs.clear(); },
                  "does not fence S");
}

TEST_F(KirVerify, RingReleasedWhileItsGemmIsInFlight) {
  // first: `release K` moved from after `gemm.wait through #0` to right after the GEMM's issue
  expect_rejected(*causal_, [](kir::Kernel& k) {
    auto& f = k.sm90.loop.first;
    Op r = *find_op(f, Op::Kind::RingRelease, "K");
    f.erase(find_op(f, Op::Kind::RingRelease, "K"));
    f.insert(find_op(f, Op::Kind::GemmSS) + 1, r);
  }, "`release K  (TL 28 {release: K})` while GEMM #0 still reads the slot");
}

TEST_F(KirVerify, PingpongTurnNeverPassed) {
  expect_rejected(*causal_, [](kir::Kernel& k) { k.sm90.loop.steady.erase(find_op(k.sm90.loop.steady, Op::Kind::TurnPass)); },
                  "takes the ping-pong turn but never passes it");
}

TEST_F(KirVerify, OpGetsARegisterOfTheWrongKind) {
  // `O *= rows alpha` with a tile for the row vector
  expect_rejected(*causal_, [](kir::Kernel& k) { find_op(k.sm90.loop.steady, Op::Kind::Rescale)->b = "P"; },
                  "P, which is not a row vector");
}

TEST_F(KirVerify, LoadShapeDoesNotMatchItsRing) {
  expect_rejected(*causal_, [](kir::Kernel& k) {
    for (auto& l : k.sm90.loads)
      if (l.buffer == "K") l.rows = 64;
  }, "a load of (64, 128) into K's (128, 128) slots");
}

TEST_F(KirVerify, OutputStoredInTheKeyLoop) {
  expect_rejected(*causal_, [](kir::Kernel& k) { k.sm90.loop.steady.push_back(*find_op(k.sm90.after, Op::Kind::StoreO)); },
                  "outside the statements after the key loop");
}

// ---- the mma.sync kernels' IR

class KirVerifyMma : public KirVerify {
 protected:
  static void SetUpTestSuite() {
    KirVerify::SetUpTestSuite();
    fa2_ = lower_mma("sm80_llama2_7b_causal").release();
    st2_ = lower_mma("sm80_stages2_window").release();
    fp8_ = lower_mma("sm89_fp8_llama3").release();
  }
  static void TearDownTestSuite() {
    KirVerify::TearDownTestSuite();
    delete fa2_;
    delete st2_;
    delete fp8_;
  }
  static int index_of(const kir::Kernel& k, const std::string& text) {
    for (size_t i = 0; i < k.mma.loop.size(); ++i)
      if (k.mma.loop[i].tl.text.find(text) != std::string::npos) return int(i);
    throw std::runtime_error("no loop statement " + text);
  }
  static MmaLowered* fa2_;
  static MmaLowered* st2_;
  static MmaLowered* fp8_;
};
MmaLowered* KirVerifyMma::fa2_ = nullptr;
MmaLowered* KirVerifyMma::st2_ = nullptr;
MmaLowered* KirVerifyMma::fp8_ = nullptr;

TEST_F(KirVerifyMma, TheLoweringsVerify) {
  for (const MmaLowered* m : {fa2_, st2_, fp8_}) {
    support::DiagSink d;
    EXPECT_EQ(m->k.family, "mma");
    EXPECT_TRUE(kir::verify(m->k, d)) << d.render() << kir::print(m->k);
  }
  EXPECT_TRUE(fa2_->k.mma.pipeline.pipelined);
  EXPECT_EQ(st2_->k.mma.stages, 2);
  EXPECT_EQ(fp8_->k.mma.vt_buffer, "V");
}

TEST_F(KirVerifyMma, SharedMemoryOverTheLimit) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.smem_limit = k.launch.smem_bytes - 128; }, "bytes of shared memory; the target has");
}

TEST_F(KirVerifyMma, BuffersOverlap) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { smem(k, "V").offset = smem(k, "K").offset + 128; }, "overlap");
}

TEST_F(KirVerifyMma, BlockSizeIsNotTheTilesOrTheStaging) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.launch.smem_bytes += 1024; }, "are not its tiles'");
}

TEST_F(KirVerifyMma, TileRowsNotSplitOverTheWarps) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.mma.warps = 3; k.launch.threads = 96; }, "16-row MMAs");
}

TEST_F(KirVerifyMma, GemmReadsAnUnknownBuffer) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.mma.gemms.at(0).b = "W"; }, "which is not a shared buffer");
}

TEST_F(KirVerifyMma, ResidentOperandNeverCopied) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) {
    for (auto& g : k.mma.gemms)
      if (g.a == "Q") g.a_source = kir::MmaGemm::ASource::Resident;
    k.mma.resident_a.clear();
  }, "from registers the plan never fills");
}

TEST_F(KirVerifyMma, Fp8VWithoutItsTranspose) {
  expect_rejected(fp8_->k, [](kir::Kernel& k) { k.smem.pop_back(); k.launch.smem_bytes = std::max<int64_t>(k.mma.epilogue_bytes, k.smem.back().offset + k.smem.back().bytes); },
                  "untransposed without its V^T buffer");
}

// The pipeline: a wait after the first read of K (the GEMM would read a tile still in flight)
TEST_F(KirVerifyMma, PipelineWaitsAfterTheFirstRead) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { ++k.mma.pipeline.x_first; }, "the pipeline waits at");
  expect_rejected(st2_->k, [](kir::Kernel& k) { ++k.mma.pipeline.y_first; }, "the pipeline waits at");
}

// K(j + 1) issued before K(j)'s last read (1 stage: one K buffer, refilled while still read)
TEST_F(KirVerifyMma, PipelineRefillsBeforeTheLastRead) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.mma.pipeline.x_last = k.mma.pipeline.x_first - 1; }, "the pipeline waits at");
}

TEST_F(KirVerifyMma, AThirdCopyInTheLoop) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.mma.loop.at(size_t(k.mma.pipeline.x_first)).fills = "Q"; }, "outside the pipeline");
}

TEST_F(KirVerifyMma, PipelineWithoutAReason) {
  expect_rejected(fa2_->k, [](kir::Kernel& k) { k.mma.pipeline = kir::MmaPipeline{}; }, "does not say why");
}

TEST_F(KirVerifyMma, StagesDoNotMatchTheBuffers) {
  expect_rejected(st2_->k, [](kir::Kernel& k) { k.mma.stages = 3; }, "buffers for 3 stages");
}

// The emitter takes its shared-memory offsets and its pipeline from the IR, not from the analysis.
TEST_F(KirVerifyMma, TheEmitterFollowsTheIr) {
  auto m = lower_mma("sm80_llama2_7b_causal");
  const std::string base = m->front->emit(m->k).cuda_source;
  EXPECT_NE(base.find("constexpr int kSmemOffsetK = " + std::to_string(smem(m->k, "K").offset) + ";"), std::string::npos) << base;
  // K and V swap places in the IR: the kernel's offsets follow
  kir::Kernel swapped = m->k;
  std::swap(smem(swapped, "K").offset, smem(swapped, "V").offset);
  support::DiagSink d;
  ASSERT_TRUE(kir::verify(swapped, d)) << d.render();
  auto m2 = lower_mma("sm80_llama2_7b_causal");
  const std::string cu = m2->front->emit(swapped).cuda_source;
  EXPECT_NE(cu.find("constexpr int kSmemOffsetK = " + std::to_string(smem(m->k, "V").offset) + ";"), std::string::npos) << cu;
  EXPECT_NE(cu.find("constexpr int kSmemOffsetV = " + std::to_string(smem(m->k, "K").offset) + ";"), std::string::npos) << cu;
  // the IR says "not pipelined": the loop waits for each copy where it is read
  kir::Kernel plain = m->k;
  plain.mma.pipeline = kir::MmaPipeline{};
  plain.mma.pipeline.why_not = "as the test says";
  auto m3 = lower_mma("sm80_llama2_7b_causal");
  const std::string cu3 = m3->front->emit(plain).cuda_source;
  EXPECT_NE(cu3.find("// no copy pipelining: as the test says"), std::string::npos) << cu3;
  EXPECT_EQ(base.find("// no copy pipelining"), std::string::npos);
}

}  // namespace
}  // namespace qattn::backend
