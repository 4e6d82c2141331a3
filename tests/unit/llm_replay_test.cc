// The LLM stages against recorded exchanges (tests/llm/*.json) replayed on a loopback server:
// llm::run for stages 1a/1b with the verifiers and the repair loop, then the qattn command end to
// end (no endpoint configured, 500s until the retries run out, the API key in no file or output).
// No LLM endpoint is reachable from our machines or CI; the replies were written by hand in the
// shape of real ones. Stage 2 and the vanilla baseline compile CUDA: llm_nvcc_test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "../llm/replay_server.h"
#include "hw/gpu.h"
#include "llm/pipeline.h"
#include "plan/plan.h"
#include "spec/spec.h"
#include "support/io.h"
#include "support/process.h"

namespace qattn::llm {
namespace {

namespace fs = std::filesystem;
using qattn::testing::ReplayServer;
using qattn::testing::slurp;
using json = nlohmann::json;

bool has_code(const support::DiagSink& d, const std::string& code, support::Severity sev = support::Severity::Error) {
  for (const auto& x : d.all())
    if (x.code == code && x.severity == sev) return true;
  return false;
}

// llama3-8b (GQA 32/8, d 128, bf16, causal) on an A100: the request every replay is recorded for.
struct Fixture {
  spec::AttentionSpec s;
  const hw::GpuFacts* g = nullptr;
  plan::Plan rules;
};
const Fixture& fixture() {
  static Fixture f = [] {
    Fixture f;
    support::DiagSink d;
    f.s = *spec::spec_from_cli("llama3-8b", "", {{"gpu", "a100"}}, d);
    f.g = hw::find_gpu("a100");
    f.rules = *plan::make_plan(f.s, *f.g, d);
    return f;
  }();
  return f;
}

Endpoint endpoint(const ReplayServer& srv) {
  Endpoint ep;
  ep.url = srv.url();
  ep.model = "replay-model";
  ep.timeout_s = 10;
  ep.retries = 1;
  ep.backoff_s = 0.01;
  return ep;
}

// The stages for `mode` against the rules engine's plan `rules` (default: the forward's).
Result go(const ReplayServer& srv, const std::string& mode, support::DiagSink& d, const plan::Plan* rules = nullptr) {
  const auto& f = fixture();
  Client c(endpoint(srv));
  auto m = parse_modes(mode, d);
  EXPECT_TRUE(m);
  return run(f.s, *f.g, rules ? *rules : f.rules, *m, c, Options{}, d);
}

std::string file_of(const Result& r, const std::string& name) {
  for (const auto& [n, text] : r.files)
    if (n == name) return text;
  return "";
}

json stage_of(const Result& r, const std::string& id) {
  const json summary = json::parse(file_of(r, "llm/summary.json"));
  for (const auto& s : summary["stages"])
    if (s["stage"] == id) return s;
  return json();
}

std::vector<json> events(const Result& r) {
  std::vector<json> out;
  std::istringstream in(file_of(r, "llm/transcript.jsonl"));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::string tl_block(const std::string& reply_file) {
  std::string t = slurp(qattn::testing::llm_test_dir() / reply_file);
  size_t a = t.find("```tl\n") + 6;
  return t.substr(a, t.find("```", a) - a);
}

void expect_replayed(const ReplayServer& srv) {
  for (const auto& f : srv.failures()) ADD_FAILURE() << "replay: " << f;
  EXPECT_EQ(srv.served(), srv.total());
}

TEST(LlmReplay, CleanRun) {
  ReplayServer srv("clean_run.json");
  support::DiagSink d;
  auto r = go(srv, "1a=llm,1b=llm", d);
  ASSERT_TRUE(r.ok) << d.render() << r.summary_md;
  expect_replayed(srv);
  EXPECT_EQ(r.plan.sketch, tl_block("replies/sketch_llama3.md"));
  EXPECT_EQ(r.plan.code, tl_block("replies/code_llama3.md"));
  EXPECT_EQ(r.plan.tiles.bm, 128);
  EXPECT_EQ(r.plan.tiles.bn, 64);
  EXPECT_FALSE(r.translation) << "stage 2 stayed on the rules translator";
  for (const char* id : {"1a", "1b"}) {
    auto s = stage_of(r, id);
    EXPECT_EQ(s["used"], "llm") << id;
    EXPECT_EQ(s["turns"], 1) << id;
    EXPECT_EQ(s["repairs"], 0) << id;
  }
  EXPECT_EQ(stage_of(r, "2")["used"], "rules");
  auto sum = json::parse(file_of(r, "llm/summary.json"));
  EXPECT_EQ(sum["ok"], true);
  EXPECT_EQ(sum["prompt_tokens"], 9120 + 4210);
  EXPECT_EQ(sum["completion_tokens"], 410 + 980);
  EXPECT_EQ(sum["requests"], 2);
  auto ev = events(r);
  int requests = 0, replies = 0, passed = 0;
  for (const auto& e : ev) {
    requests += e["event"] == "request";
    replies += e["event"] == "reply";
    passed += e["event"] == "verify" && e["ok"] == true;
  }
  EXPECT_EQ(requests, 2);
  EXPECT_EQ(replies, 2);
  EXPECT_EQ(passed, 2);
  EXPECT_NE(file_of(r, "llm/summary.md").find("| 1b | llm | llm | yes | 1 | 0 |"), std::string::npos) << r.summary_md;
}

TEST(LlmReplay, CodeMissingTheReshapeIsRepairedAfterTheDiagnostic) {
  ReplayServer srv("missing_reshape.json");  // the third request must carry TL0501 and its hint
  support::DiagSink d;
  auto r = go(srv, "1a=llm,1b=llm", d);
  ASSERT_TRUE(r.ok) << d.render();
  expect_replayed(srv);
  EXPECT_NE(r.plan.code.find("Reshape Pc"), std::string::npos);
  EXPECT_EQ(stage_of(r, "1b")["turns"], 2);
  EXPECT_EQ(stage_of(r, "1b")["repairs"], 1);
  bool saw = false;
  for (const auto& e : events(r))
    if (e["event"] == "verify" && e["ok"] == false)
      saw = e["diagnostics"].get<std::string>().find("error TL0501") != std::string::npos;
  EXPECT_TRUE(saw) << "the transcript records the failed verification";
}

TEST(LlmReplay, TransposeConfusionIsRepaired) {
  ReplayServer srv("transpose_confusion.json");
  support::DiagSink d;
  auto r = go(srv, "1a=llm,1b=llm", d);
  ASSERT_TRUE(r.ok) << d.render();
  expect_replayed(srv);
  EXPECT_NE(r.plan.code.find("Compute GEMM Q, K^T and get S"), std::string::npos);
  EXPECT_EQ(stage_of(r, "1b")["repairs"], 1);
}

TEST(LlmReplay, ReplyWithNoTlIsRepaired) {
  ReplayServer srv("no_tl.json");
  support::DiagSink d;
  auto r = go(srv, "1a=llm,1b=llm", d);
  ASSERT_TRUE(r.ok) << d.render();
  expect_replayed(srv);
  EXPECT_EQ(stage_of(r, "1a")["repairs"], 1);
}

TEST(LlmReplay, SketchByTheLlmCodeByTheRules) {
  ReplayServer srv("clean_run.json");
  support::DiagSink d;
  auto r = go(srv, "1a=llm", d);  // the rules engine's TL code must refine the LLM's sketch
  ASSERT_TRUE(r.ok) << d.render();
  EXPECT_EQ(srv.served(), 1u);
  EXPECT_EQ(r.plan.code, fixture().rules.code);
  EXPECT_EQ(stage_of(r, "1b")["used"], "rules");
}

TEST(LlmReplay, NeverFixedFailsInLlmModeAndFallsBackInLlmPlusRules) {
  {
    ReplayServer srv("never_fixed.json");
    support::DiagSink d;
    auto r = go(srv, "1a=llm,1b=llm", d);
    EXPECT_FALSE(r.ok);
    expect_replayed(srv);
    EXPECT_TRUE(has_code(d, "LLM0303")) << d.render();
    EXPECT_TRUE(has_code(d, "TL0501")) << "the last diagnostics are shown to the user";
    EXPECT_EQ(stage_of(r, "1b")["turns"], 3);
    EXPECT_EQ(stage_of(r, "1b")["ok"], false);
    EXPECT_NE(r.summary_md.find("FAILED"), std::string::npos);
  }
  {
    ReplayServer srv("never_fixed.json");
    support::DiagSink d;
    auto r = go(srv, "1a=llm,1b=llm+rules", d);
    ASSERT_TRUE(r.ok) << d.render();
    expect_replayed(srv);
    EXPECT_FALSE(d.has_errors());
    EXPECT_TRUE(has_code(d, "TL0501", support::Severity::Warning)) << d.render();
    EXPECT_EQ(r.plan.code, fixture().rules.code);
    EXPECT_EQ(stage_of(r, "1b")["used"], "rules");
    EXPECT_NE(stage_of(r, "1b")["note"].get<std::string>().find("fell back"), std::string::npos);
  }
}

TEST(LlmReplay, AKeyLoopCappedAtTwoTilesFailsVerification) {
  // Right at one query tile and two key tiles (the old verification size), wrong beyond.
  ReplayServer srv("truncated_loop.json");
  support::DiagSink d;
  auto r = go(srv, "1a=llm,1b=llm", d);
  EXPECT_FALSE(r.ok);
  expect_replayed(srv);
  EXPECT_TRUE(has_code(d, "TL0801")) << d.render();
  EXPECT_EQ(stage_of(r, "1b")["turns"], 3);
  EXPECT_EQ(stage_of(r, "1b")["ok"], false);
}

TEST(LlmReplay, EndpointFailureEndsTheStageWithoutRepairTurns) {
  ReplayServer srv("server_errors.json");
  support::DiagSink d;
  auto r = go(srv, "llm", d);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_code(d, "LLM0114")) << d.render();
  EXPECT_EQ(srv.served(), 2u) << "one attempt + one retry, no repair prompt";
  EXPECT_EQ(stage_of(r, "1a")["turns"], 0);
}

// ---- the backward pass (qattn generate --backward) -------------------------------------------

const plan::Plan& backward_rules() {
  static plan::Plan p = [] {
    support::DiagSink d;
    plan::PlanOptions o;
    o.backward = true;
    auto b = plan::make_plan(fixture().s, *fixture().g, d, o);
    EXPECT_TRUE(b) << d.render();
    return *b;
  }();
  return p;
}

Result go_backward(const ReplayServer& srv, const std::string& mode, support::DiagSink& d) {
  return go(srv, mode, d, &backward_rules());
}

TEST(LlmReplay, BackwardCleanRunTakesTheLlmsTiles) {
  ReplayServer srv("backward_clean_run.json");
  support::DiagSink d;
  auto r = go_backward(srv, "1a=llm,1b=llm", d);
  ASSERT_TRUE(r.ok) << d.render() << r.summary_md;
  expect_replayed(srv);
  EXPECT_EQ(r.plan.sketch, tl_block("replies/sketch_backward_llama3.md"));
  EXPECT_EQ(r.plan.code, tl_block("replies/code_backward_llama3.md"));
  EXPECT_EQ(r.plan.tiles.bn, 32) << "the LLM's tiles, not the rules engine's (BN 64)";
  EXPECT_EQ(r.plan.tiles.warps, 2);
  EXPECT_NE(r.plan.report.find("Interpreted against the reference"), std::string::npos) << r.plan.report;
  EXPECT_EQ(stage_of(r, "1b")["used"], "llm");
  EXPECT_EQ(stage_of(r, "2")["used"], "rules");
}

TEST(LlmReplay, BackwardSketchWithoutTheDTermAndALateQueryLoopAreRepaired) {
  ReplayServer srv("backward_repaired.json");  // the repair prompts must carry LLM0301 (the D term) and TL0801
  support::DiagSink d;
  auto r = go_backward(srv, "1a=llm,1b=llm", d);
  ASSERT_TRUE(r.ok) << d.render();
  expect_replayed(srv);
  EXPECT_EQ(stage_of(r, "1a")["repairs"], 1);
  EXPECT_EQ(stage_of(r, "1b")["repairs"], 1);
  EXPECT_NE(r.plan.sketch.find("Compute Subtract dP, Di and get dS"), std::string::npos);
}

TEST(LlmReplay, TheBackwardIsNeverTranslatedByTheLlm) {
  ReplayServer srv("backward_clean_run.json");
  support::DiagSink d;
  auto r = go_backward(srv, "1a=llm,1b=llm,2=llm", d);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has_code(d, "LLM0306")) << d.render();
  EXPECT_EQ(srv.served(), 0u) << "refused before any request";
}

TEST(LlmReplay, AForwardSketchIsRefusedForTheBackward) {
  ReplayServer srv(R"({"exchanges": [
    {"expect": ["backward pass"], "reply": "replies/sketch_llama3.md"},
    {"expect": ["LLM0301", "does not say `backward`"], "reply": "replies/sketch_llama3.md"},
    {"expect": ["LLM0301"], "reply": "replies/sketch_llama3.md"}]})");
  support::DiagSink d;
  auto r = go_backward(srv, "1a=llm", d);
  EXPECT_FALSE(r.ok);
  expect_replayed(srv);
  EXPECT_TRUE(has_code(d, "LLM0301")) << d.render();
}

// ---- the qattn command end to end -----------------------------------------------------------

struct Cli {
  fs::path dir;
  int rc = -1;
  std::string err;
  Cli() {
    dir = fs::temp_directory_path() / ("qattn-llm-cli-" + std::to_string(::getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Cli() { fs::remove_all(dir); }
  // Runs `qattn generate --preset llama3-8b --gpu a100 --no-gpu --out DIR/out ARGS` with ENV added to
  // this process's environment (its QATTN_LLM_* variables emptied), no shell (support::run_process);
  // `err` holds what it printed (stdout and stderr together).
  void generate(const std::vector<std::pair<std::string, std::string>>& env, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {QATTN_BIN, "generate", "--preset", "llama3-8b", "--gpu", "a100", "--no-gpu",
                                     "--out", (dir / "out").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    support::ProcessOptions o;
    o.capture = true;
    o.env = {{"QATTN_LLM_URL", ""}, {"QATTN_LLM_MODEL", ""}, {"QATTN_LLM_API_KEY", ""}, {"QATTN_CACHE_DIR", (dir / "cache").string()}};
    o.env.insert(o.env.end(), env.begin(), env.end());  // later entries replace earlier ones
    const auto r = support::run_process(argv, o);
    rc = r.started ? r.status : -1;
    err = r.started ? r.output : r.error;
  }
};

TEST(LlmCli, NoEndpointConfigured) {
  Cli c;
  c.generate({}, {"--mode", "llm"});
  EXPECT_EQ(c.rc, 1) << c.err;
  EXPECT_NE(c.err.find("error LLM0101"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("QATTN_LLM_URL"), std::string::npos);
  EXPECT_NE(c.err.find("rules is the default"), std::string::npos);
  EXPECT_FALSE(fs::exists(c.dir / "out")) << "nothing written";
  c.generate({}, {"--mode", "1a=gpt"});
  EXPECT_EQ(c.rc, 1);
  EXPECT_NE(c.err.find("LLM0401"), std::string::npos) << c.err;
}

TEST(LlmCli, ServerErrorsUntilRetriesRunOutLeaveNothingWritten) {
  ReplayServer srv("server_errors.json");
  Cli c;
  c.generate({{"QATTN_LLM_URL", srv.url()}, {"QATTN_LLM_MODEL", "replay-model"}},
             {"--mode", "llm", "--llm-retries", "2", "--llm-backoff", "0.01"});
  EXPECT_EQ(c.rc, 1) << c.err;
  EXPECT_NE(c.err.find("error LLM0114"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("nothing written"), std::string::npos) << c.err;
  EXPECT_EQ(srv.served(), 3u);
  EXPECT_FALSE(fs::exists(c.dir / "out")) << "no half-written artifacts";
}

TEST(LlmCli, ATruncatedKeyLoopFailsGenerate) {
  // The stage-1b reply whose key loop stops after two key tiles: generate fails with TL0801 and
  // writes nothing (it used to print "TL interpreted: PASS", compile it and exit 0).
  ReplayServer srv("truncated_loop.json");
  Cli c;
  fs::copy_file(qattn::testing::llm_test_dir() / "fake_nvcc.sh", c.dir / "nvcc");
  fs::permissions(c.dir / "nvcc", fs::perms::owner_all);
  c.generate({{"QATTN_NVCC", (c.dir / "nvcc").string()}, {"QATTN_LLM_URL", srv.url()}, {"QATTN_LLM_MODEL", "replay-model"}},
             {"--mode", "1a=llm,1b=llm"});
  EXPECT_EQ(c.rc, 1) << c.err;
  expect_replayed(srv);
  EXPECT_NE(c.err.find("error TL0801"), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("TL interpreted: PASS"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("nothing written"), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(c.dir / "out")) << "no artifacts";
}

TEST(LlmCli, BackwardByTheLlmIsGenerated) {
  ReplayServer srv("backward_clean_run.json");
  Cli c;
  fs::copy_file(qattn::testing::llm_test_dir() / "fake_nvcc.sh", c.dir / "nvcc");
  fs::permissions(c.dir / "nvcc", fs::perms::owner_all);
  c.generate({{"QATTN_NVCC", (c.dir / "nvcc").string()}, {"QATTN_LLM_URL", srv.url()}, {"QATTN_LLM_MODEL", "replay-model"}},
             {"--backward", "--mode", "1a=llm,1b=llm"});
  ASSERT_EQ(c.rc, 0) << c.err;
  expect_replayed(srv);
  EXPECT_EQ(slurp(c.dir / "out" / "code.tl"), tl_block("replies/code_backward_llama3.md"));
  EXPECT_TRUE(fs::exists(c.dir / "out" / "kernel.cu"));
  EXPECT_NE(slurp(c.dir / "out" / "kernel.cu").find("qattn_bwd"), std::string::npos) << "the rules translator's backward";
  Cli refused;
  refused.generate({{"QATTN_LLM_URL", srv.url()}, {"QATTN_LLM_MODEL", "replay-model"}}, {"--backward", "--mode", "llm"});
  EXPECT_EQ(refused.rc, 1) << refused.err;
  EXPECT_NE(refused.err.find("GEN0105"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(refused.dir / "out"));
}

TEST(LlmCli, CleanRunWritesTranscriptsAndTheKeyAppearsNowhere) {
  ReplayServer srv("clean_run.json");
  Cli c;
  const std::string key = "sk-qattn-replay-7f3a9c1e5b2d4f6a8c0e";
  fs::copy_file(qattn::testing::llm_test_dir() / "fake_nvcc.sh", c.dir / "nvcc");
  fs::permissions(c.dir / "nvcc", fs::perms::owner_all);
  c.generate({{"QATTN_NVCC", (c.dir / "nvcc").string()}, {"MY_LLM_KEY", key}},
             {"--mode", "1a=llm,1b=llm", "--llm-url", srv.url(), "--llm-model", "replay-model", "--llm-key-env", "MY_LLM_KEY"});
  ASSERT_EQ(c.rc, 0) << c.err;
  expect_replayed(srv);
  for (const auto& r : srv.requests()) EXPECT_EQ(r.authorization, "Bearer " + key) << "the key is sent, in the header";
  for (const char* f : {"spec.json", "sketch.tl", "code.tl", "plan.md", "kernel.cu", "libqattn_kernel.so", "build.log",
                        "llm/transcript.jsonl", "llm/summary.json", "llm/summary.md"})
    EXPECT_TRUE(fs::exists(c.dir / "out" / f)) << f;
  EXPECT_EQ(slurp(c.dir / "out" / "code.tl"), tl_block("replies/code_llama3.md"));
  EXPECT_NE(slurp(c.dir / "out" / "llm/transcript.jsonl").find("Stage 1b"), std::string::npos);
  EXPECT_NE(c.err.find("| 1a | llm | llm | yes | 1 | 0 |"), std::string::npos) << c.err;
  // The key: in no artifact, cache entry, transcript, stdout or stderr.
  int scanned = 0;
  for (const auto& e : fs::recursive_directory_iterator(c.dir)) {
    if (!e.is_regular_file() || e.path().filename() == "nvcc") continue;
    ++scanned;
    EXPECT_EQ(slurp(e.path()).find(key), std::string::npos) << e.path();
    EXPECT_EQ(slurp(e.path()).find("7f3a9c1e5b2d"), std::string::npos) << e.path();
  }
  EXPECT_GE(scanned, 12);
}

// Without a GPU nothing checks the numerics of CUDA the LLM wrote: compiled but unverified, in the
// summary and in the exit status (3), never "succeeded" with 0.
TEST(LlmCli, VanillaWithoutAGpuIsCompiledButUnverified) {
  ReplayServer srv("vanilla.json");
  Cli c;
  fs::copy_file(qattn::testing::llm_test_dir() / "fake_nvcc.sh", c.dir / "nvcc");
  fs::permissions(c.dir / "nvcc", fs::perms::owner_all);
  c.generate({{"QATTN_NVCC", (c.dir / "nvcc").string()}},
             {"--mode", "vanilla", "--llm-url", srv.url(), "--llm-model", "replay-model"});
  expect_replayed(srv);
  EXPECT_EQ(c.rc, 3) << c.err;
  EXPECT_NE(c.err.find("# LLM run: compiled but unverified"), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("LLM run: succeeded"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("compiled but unverified: the LLM wrote this kernel's CUDA"), std::string::npos) << c.err;
  const std::string md = slurp(c.dir / "out" / "llm" / "summary.md");
  EXPECT_EQ(md.rfind("# LLM run: compiled but unverified", 0), 0u) << md;
  const json summary = json::parse(slurp(c.dir / "out" / "llm" / "summary.json"));
  EXPECT_EQ(summary["verdict"], "compiled but unverified");
  EXPECT_TRUE(fs::exists(c.dir / "out" / "kernel.cu")) << "the artifacts are written";
}

// Issue 18: an endpoint that echoes the API key in its replies (tests/hostile/names/key_echo.json:
// in the prose, in TL comments of the sketch and the code, in the CUDA). The reply is redacted
// where it enters the program (llm::Client::chat), so the key is in no artifact (code.tl,
// kernel.cu, ...), no cache entry, transcript, stdout or stderr; "[redacted]" is where it was.
TEST(LlmCli, AnEchoedKeyReachesNoArtifactOrCacheEntry) {
  ReplayServer srv("../hostile/names/key_echo.json");
  Cli c;
  const std::string key = "sk-qattn-hostile-echo-4b8e1d2c9a7f";
  fs::copy_file(qattn::testing::llm_test_dir() / "fake_nvcc.sh", c.dir / "nvcc");
  fs::permissions(c.dir / "nvcc", fs::perms::owner_all);
  c.generate({{"QATTN_NVCC", (c.dir / "nvcc").string()}, {"MY_LLM_KEY", key}},
             {"--mode", "1a=llm,1b=llm,2=llm", "--llm-url", srv.url(), "--llm-model", "replay-model", "--llm-key-env", "MY_LLM_KEY"});
  expect_replayed(srv);
  ASSERT_TRUE(fs::exists(c.dir / "out" / "code.tl")) << c.err;
  ASSERT_TRUE(fs::exists(c.dir / "out" / "kernel.cu")) << c.err;
  EXPECT_NE(slurp(c.dir / "out" / "code.tl").find("# the endpoint echoes the API key: [redacted]"), std::string::npos);
  EXPECT_NE(slurp(c.dir / "out" / "kernel.cu").find("#define ECHOED_KEY \"[redacted]\""), std::string::npos);
  int scanned = 0;
  for (const auto& e : fs::recursive_directory_iterator(c.dir)) {
    if (!e.is_regular_file() || e.path().filename() == "nvcc") continue;
    ++scanned;
    EXPECT_EQ(slurp(e.path()).find("4b8e1d2c9a7f"), std::string::npos) << e.path();
  }
  EXPECT_TRUE(fs::exists(c.dir / "cache")) << "the build cache was written (and scanned)";
  EXPECT_GE(scanned, 12);
}

}  // namespace
}  // namespace qattn::llm
