// The pipeline as a library function (src/pipeline/generate.h) and the process runner it uses for
// the GPU step (src/support/process.h):
//  - run_process passes argv verbatim (no shell), adds environment variables, captures output,
//    closes stdin, reports exit statuses and programs that cannot start;
//  - the GPU step's modules live in the Python package (support::python_dir()), not in tests/;
//  - generate() runs the stages in order and writes the artifacts folder, kernel.kir included; a
//    failing stage writes nothing; without a CUDA toolchain it writes the sources and says so.
// There is no GPU here: the GPU step itself runs in tests/gpu (kir_suite.sh, device_suite.sh).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "pipeline/generate.h"
#include "spec/spec.h"
#include "support/artifact_dir.h"
#include "support/io.h"
#include "support/process.h"

namespace qattn {
namespace {
namespace fs = std::filesystem;

TEST(RunProcess, ArgumentsReachTheProgramVerbatim) {
  const std::vector<std::string> args = {"a b", "; rm -rf /tmp/qattn-never", "q'uote", "$HOME", "`id`", ""};
  std::vector<std::string> argv = {"/bin/sh", "-c", "for a in \"$@\"; do printf '<%s>' \"$a\"; done", "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = support::run_process(argv, {}, true);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "<a b><; rm -rf /tmp/qattn-never><q'uote><$HOME><`id`><>");
}

TEST(RunProcess, EnvironmentStatusStdinAndFailures) {
  auto r = support::run_process({"/bin/sh", "-c", "printf %s \"$QATTN_TEST_VAR\"; exit 3"}, {{"QATTN_TEST_VAR", "x y"}}, true);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.output, "x y");
  EXPECT_EQ(r.status, 3);
  r = support::run_process({"cat"}, {}, true);  // stdin is /dev/null: returns at once
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "");
  r = support::run_process({"/nonexistent/qattn-no-such-program"}, {}, true);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("cannot start"), std::string::npos) << r.error;
  r = support::run_process({}, {}, true);
  EXPECT_FALSE(r.started);
  r = support::run_process({"/bin/sh", "-c", "head -c 5000 /dev/zero"}, {}, true, 100);
  EXPECT_EQ(r.output.size(), 100u);  // bounded
}

TEST(Pipeline, TheGpuStepRunsThePackageNotTests) {
  const fs::path py = support::python_dir();
  EXPECT_TRUE(fs::exists(py / "qattn" / "verify.py")) << py;
  EXPECT_TRUE(fs::exists(py / "qattn" / "timing.py")) << py;
  const auto [name, value] = support::python_path_env();
  EXPECT_EQ(name, "PYTHONPATH");
  EXPECT_EQ(value.substr(0, py.string().size()), py.string());
  // the shipped sources never name tests/ as something to run
  for (const char* f : {"src/pipeline/generate.cc", "src/llm/verify_cuda.cc", "src/cli/cli_generate.cc"}) {
    std::ifstream in(support::source_dir() / f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(text.empty()) << f;
    EXPECT_EQ(text.find("\"tests\""), std::string::npos) << f;
    EXPECT_EQ(text.find("tests/gpu"), std::string::npos) << f;
  }
}

class PipelineRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("qattn-pipeline-test-" + std::to_string(rd()));
    fs::create_directories(dir_);
    // no CUDA toolchain: the pipeline stops after writing the sources (fast, and the same on every machine)
    old_nvcc_ = std::getenv("QATTN_NVCC") ? std::getenv("QATTN_NVCC") : "";
    setenv("QATTN_NVCC", (dir_ / "no-nvcc-here").c_str(), 1);
  }
  void TearDown() override {
    if (old_nvcc_.empty()) unsetenv("QATTN_NVCC");
    else setenv("QATTN_NVCC", old_nvcc_.c_str(), 1);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::optional<pipeline::Result> run(spec::AttentionSpec s, const std::string& out, support::DiagSink& d) {
    pipeline::Options o;
    o.out = dir_ / out;
    o.use_gpu = false;
    o.progress = [this](const std::string& line) { lines_.push_back(line); };
    return pipeline::generate(s, o, d);
  }
  fs::path dir_;
  std::string old_nvcc_;
  std::vector<std::string> lines_;
};

TEST_F(PipelineRun, StagesInOrderAndTheSourcesWithoutAToolchain) {
  const spec::AttentionSpec* p = spec::find_preset("llama3-8b");
  ASSERT_NE(p, nullptr);
  spec::AttentionSpec s = *p;
  s.gpu = "a100";
  support::DiagSink d;
  const auto r = run(s, "out", d);
  ASSERT_TRUE(r.has_value()) << d.render();
  EXPECT_FALSE(r->built);
  EXPECT_EQ(r->stopped, "no CUDA toolchain");
  EXPECT_EQ(r->reached, pipeline::Reached::Written);
  for (const char* f : {"spec.json", "sketch.tl", "code.tl", "plan.md", "kernel.cu", "kernel.kir"}) {
    EXPECT_TRUE(fs::exists(dir_ / "out" / f)) << f;
    EXPECT_NE(std::find(r->files.begin(), r->files.end(), f), r->files.end()) << f;
  }
  EXPECT_FALSE(fs::exists(dir_ / "out" / "libqattn_kernel.so"));
  std::ifstream kir(dir_ / "out" / "kernel.kir");
  std::string first;
  std::getline(kir, first);
  EXPECT_EQ(first.rfind("# kernel IR", 0), 0u) << first;
  // the stages, in order: the interpreter's verdict (it runs beside translate and build) before
  // anything is written
  std::vector<std::string> want = {"[1/4] plan:", "[2/4] translate TL code -> kernel IR", "[3/4] build", "TL interpreted: PASS",
                                   "stopped before compiling"};
  size_t at = 0;
  for (const auto& l : lines_)
    if (at < want.size() && l.find(want[at]) != std::string::npos) ++at;
  EXPECT_EQ(at, want.size()) << "missing or out of order: " << (at < want.size() ? want[at] : "");
}

TEST_F(PipelineRun, AFailingStageWritesNothing) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  s.gpu = "no-such-gpu";
  support::DiagSink d;
  EXPECT_FALSE(run(s, "bad", d).has_value());
  EXPECT_TRUE(d.has_errors());
  EXPECT_FALSE(fs::exists(dir_ / "bad"));
  // an unknown mode is refused before anything runs
  pipeline::Options o;
  o.mode = "sometimes";
  o.out = dir_ / "bad2";
  support::DiagSink d2;
  s.gpu = "a100";
  EXPECT_FALSE(pipeline::generate(s, o, d2).has_value());
  EXPECT_TRUE(d2.has_errors());
  EXPECT_FALSE(fs::exists(dir_ / "bad2"));
}

// Issue 18: a reused --out. An older run left a library, its build log and an LLM transcript
// beside its kernel; this run (no toolchain: sources only) must leave only its own set, not the old
// library next to the new spec. The folder is written beside --out and renamed into place whole.
TEST_F(PipelineRun, AReusedOutHoldsOnlyTheNewSet) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  s.gpu = "a100";
  const fs::path out = dir_ / "out";
  fs::create_directories(out / "llm");
  for (const char* f : {"kernel.cu", "libqattn_kernel.so", "build.log", "llm/transcript.jsonl"})
    std::ofstream(out / f) << "stale, from an earlier run\n";
  support::DiagSink d;
  const auto r = run(s, "out", d);
  ASSERT_TRUE(r.has_value()) << d.render();
  std::vector<std::string> got;
  for (const auto& e : fs::recursive_directory_iterator(out)) got.push_back(e.path().lexically_relative(out).string());
  std::sort(got.begin(), got.end());
  std::vector<std::string> want = {support::kArtifactMarker, "code.tl", "kernel.cu", "kernel.kir", "plan.md", "sketch.tl", "spec.json"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  std::ifstream cu(out / "kernel.cu");
  std::string first;
  std::getline(cu, first);
  EXPECT_EQ(first.find("stale"), std::string::npos) << first;
  for (const auto& e : fs::directory_iterator(dir_))  // no temporary sibling left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // and again: a folder qattn wrote (it holds the marker) is replaced whole
  support::DiagSink d2;
  ASSERT_TRUE(run(s, "out", d2).has_value()) << d2.render();
  EXPECT_TRUE(fs::exists(out / support::kArtifactMarker));
}

// A run killed while writing leaves its temporary sibling; the next run into the same --out removes
// it once it is older than kStaleTemporaryAge, and leaves a young one (a run going on now) alone.
TEST_F(PipelineRun, TemporariesOfAKilledRunAreRemovedLater) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  s.gpu = "a100";
  const fs::path old_tmp = dir_ / ".out.tmp-killed", young_tmp = dir_ / ".out.tmp-running", other = dir_ / ".other.tmp-x";
  for (const auto& p : {old_tmp, young_tmp, other}) {
    fs::create_directories(p);
    std::ofstream(p / "kernel.cu") << "half written\n";
  }
  const auto long_ago = fs::file_time_type::clock::now() - support::kStaleTemporaryAge - std::chrono::minutes(1);
  fs::last_write_time(old_tmp, long_ago);
  fs::last_write_time(other, long_ago);
  support::DiagSink d;
  ASSERT_TRUE(run(s, "out", d).has_value()) << d.render();
  EXPECT_FALSE(fs::exists(old_tmp));
  EXPECT_TRUE(fs::exists(young_tmp));
  EXPECT_TRUE(fs::exists(other)) << "another --out's temporaries are not this run's to remove";
}

// A folder holding files qattn did not write is refused before any stage runs, and left as it was.
TEST_F(PipelineRun, AForeignOutIsRefusedAndUntouched) {
  spec::AttentionSpec s = *spec::find_preset("llama3-8b");
  s.gpu = "a100";
  fs::create_directories(dir_ / "mine");
  std::ofstream(dir_ / "mine" / "notes.txt") << "mine\n";
  std::ofstream(dir_ / "mine" / "kernel.cu") << "mine too\n";
  support::DiagSink d;
  EXPECT_FALSE(run(s, "mine", d).has_value());
  ASSERT_EQ(d.error_count(), 1) << d.render();
  EXPECT_EQ(d.all()[0].code, "OUT0103") << d.render();
  EXPECT_NE(d.all()[0].message.find("notes.txt"), std::string::npos) << d.all()[0].message;
  EXPECT_FALSE(d.all()[0].hint.empty());
  for (const auto& l : lines_) EXPECT_EQ(l.find("[1/4]"), std::string::npos) << "refused before planning: " << l;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_ / "mine")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"kernel.cu", "notes.txt"}));
  std::ifstream cu(dir_ / "mine" / "kernel.cu");
  std::string line;
  std::getline(cu, line);
  EXPECT_EQ(line, "mine too");
}

// System folders, $HOME, the current folder's file-system root and non-folders are refused
// (checked directly: a run against the unchanged code would write into them).
TEST(OutFolder, SystemFoldersHomeAndNonFoldersAreRefused) {
  auto code_of = [](const fs::path& p) {
    support::DiagSink d;
    const bool ok = support::check_out_folder(p, d);
    EXPECT_EQ(ok, !d.has_errors());
    if (!ok) {
      EXPECT_FALSE(d.all()[0].hint.empty()) << p;
    }
    return ok ? std::string("ok") : d.all()[0].code;
  };
  for (const char* sys : {"/", "/usr", "/etc/", "/bin", "/proc", "/sys", "/dev", "/usr/../etc", "//"})
    EXPECT_EQ(code_of(sys), "OUT0101") << sys;
  const fs::path home = fs::temp_directory_path() / ("qattn-home-" + std::to_string(std::random_device{}()));
  fs::create_directories(home);
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home ? old_home : "";
  setenv("HOME", home.c_str(), 1);
  EXPECT_EQ(code_of(home), "OUT0101");
  EXPECT_EQ(code_of(home / "artifacts"), "ok");  // a new folder below $HOME is fine
  if (old_home) setenv("HOME", saved.c_str(), 1);
  else unsetenv("HOME");
  std::ofstream(home / "a-file") << "x";
  EXPECT_EQ(code_of(home / "a-file"), "OUT0102");
  fs::create_directories(home / "empty");
  EXPECT_EQ(code_of(home / "empty"), "ok");
  fs::remove_all(home);
  // the root of the file system the current folder is on
  fs::path root = fs::current_path();
  struct stat st {}, up {};
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  while (root.has_parent_path() && root.parent_path() != root && ::stat(root.parent_path().c_str(), &up) == 0 && up.st_dev == st.st_dev)
    root = root.parent_path();
  EXPECT_EQ(code_of(root), "OUT0101") << root;
}

}  // namespace
}  // namespace qattn
