// The build driver (src/build) and its content-addressed cache; SHA-256 known-answer vectors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "build/nvcc.h"
#include "support/sha256.h"

namespace qattn::build {
namespace {
namespace fs = std::filesystem;

TEST(sha256, KnownAnswers) {
  EXPECT_EQ(support::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(support::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(support::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(support::sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(build, MissingNvccIsADiagnostic) {
  setenv("QATTN_NVCC", "/nonexistent/nvcc", 1);
  support::DiagSink d;
  EXPECT_FALSE(find_toolchain(d).has_value());
  unsetenv("QATTN_NVCC");
  ASSERT_TRUE(d.has_errors());
  EXPECT_EQ(d.all().front().code, "BUILD0101");
  EXPECT_FALSE(d.all().front().hint.empty());
}

TEST(build, CacheBuildsOnceThenHits) {
  support::DiagSink d;
  auto tc = find_toolchain(d);
  if (!tc) GTEST_SKIP() << "no CUDA toolchain here: " << d.render();
  backend::Translation t;
  t.kernel_name = "cache_probe";
  t.arch = "sm80";
  t.nvcc_flags = {"-gencode=arch=compute_80,code=sm_80", "-std=c++17"};
  t.cuda_source = "extern \"C\" int qattn_cache_probe() { return " + std::to_string(std::rand()) + "; }\n";
  BuildOptions o;
  o.cache_dir = fs::temp_directory_path() / ("qattn-cache-test-" + std::to_string(::getpid()));
  auto first = build_library(t, *tc, d, o);
  ASSERT_TRUE(first.has_value()) << d.render();
  EXPECT_FALSE(first->cache_hit);
  EXPECT_TRUE(fs::exists(first->library));
  auto second = build_library(t, *tc, d, o);
  ASSERT_TRUE(second.has_value()) << d.render();
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(first->key, second->key);
  // Another source is another key; a failing source is a diagnostic and leaves no cache entry.
  t.cuda_source += "this is not C++\n";
  support::DiagSink bad;
  EXPECT_FALSE(build_library(t, *tc, bad, o).has_value());
  ASSERT_TRUE(bad.has_errors());
  EXPECT_EQ(bad.all().back().code, "BUILD0201");
  int entries = 0;
  for (auto& shard : fs::directory_iterator(o.cache_dir))
    for (auto& e : fs::directory_iterator(shard)) entries += e.path().filename().string()[0] != '.';
  EXPECT_EQ(entries, 1);
  fs::remove_all(o.cache_dir);
}

}  // namespace
}  // namespace qattn::build
