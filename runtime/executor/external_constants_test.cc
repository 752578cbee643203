// External constants read by non-delegated kernels (the transformer block's layer norms, outside
// the XNNPACK delegate) on real files: their identity is checked against the program's recorded
// digest, their bytes are hashed once per process before any Method uses them, the trusted-file
// mode skips the hash, and a second program over the same data map hashes and fetches nothing.

#include "edgeshare/runtime/executor/external_constants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "edgeshare/runtime/core/content_policy.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/testing/test_files.h"

namespace edgeshare {
namespace runtime {
namespace {

// The layer norm weights and biases: the block's only external constants outside the delegate.
const char* const kNormKeys[] = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"};
constexpr uint64_t kNumNormKeys = 4;

struct Loaded {
  std::unique_ptr<FileDataLoader> loader;
  std::unique_ptr<Program> program;
};

Loaded LoadProgram() {
  Loaded out;
  auto loader = FileDataLoader::from(fixtures::env_path("BLOCK_PTE"));
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  out.loader = std::make_unique<FileDataLoader>(std::move(loader).get());
  auto program = Program::load(out.loader.get());
  EXPECT_TRUE(program.ok()) << program.status().message();
  out.program = std::make_unique<Program>(std::move(program).get());
  return out;
}

std::shared_ptr<const DataFile> Open(const std::string& path) {
  auto file = DataFile::open(path.c_str());
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? *file : nullptr;
}

// Runs the method on a fixed input; returns its output (empty if anything failed).
std::vector<float> RunForward(Method& method) {
  std::vector<float> input(2 * 5 * 32);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  EXPECT_TRUE(method.set_input(0, Tensor(ScalarType::Float, {2, 5, 32}, input.data())).ok());
  const Status run = method.execute();
  EXPECT_TRUE(run.ok()) << run.message();
  auto out = method.output(0);
  if (!run.ok() || !out.ok()) return {};
  const float* data = out->data<float>();
  return std::vector<float>(data, data + out->numel());
}

// foundation.ptd with one byte of `key`'s entry changed, its digests kept; returns the new path.
std::string TamperedFoundation(const char* key) {
  auto foundation = Open(fixtures::env_path("BLOCK_FOUNDATION_PTD"));
  std::vector<uint8_t> file = fixtures::read_file(fixtures::env_path("BLOCK_FOUNDATION_PTD"));
  auto entry = foundation->map().get_data(key);
  EXPECT_TRUE(entry.ok()) << entry.status().message();
  const auto* bytes = static_cast<const uint8_t*>(entry->data());
  auto at = std::search(file.begin(), file.end(), bytes, bytes + entry->size());
  EXPECT_NE(at, file.end()) << key << " not found in the file";
  if (at != file.end()) at[entry->size() / 2] ^= 0x40;
  const std::string tmp =
      *fixtures::env_path("TEST_TMPDIR") != '\0' ? fixtures::env_path("TEST_TMPDIR") : "/tmp";
  const std::string path = tmp + "/tampered_block_foundation.ptd";
  std::FILE* out = std::fopen(path.c_str(), "wb");
  EXPECT_NE(out, nullptr);
  if (out != nullptr) {
    EXPECT_EQ(std::fwrite(file.data(), 1, file.size(), out), file.size());
    std::fclose(out);
  }
  return path;
}

class ExternalConstantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_share_constants(true);
    set_verify_content(true);
    reset_external_constant_stats();
  }
  void TearDown() override {
    set_share_constants(true);
    set_verify_content(true);
  }
};

TEST_F(ExternalConstantsTest, FoundationOfAnotherSeedFailsAtLoadNamingTheKey) {
  Loaded block = LoadProgram();
  auto other = Open(fixtures::env_path("BLOCK_OTHER_FOUNDATION_PTD"));
  auto method = block.program->load_method("forward", &other->map());
  ASSERT_FALSE(method.ok()) << "a foundation of the right shapes but other bytes ran";
  EXPECT_EQ(method.error(), Error::InvalidData);
  const std::string message = method.status().message();
  EXPECT_NE(message.find("is not the one"), std::string::npos) << message;
  EXPECT_NE(message.find("constant 'ln1."), std::string::npos) << message;
  EXPECT_NE(message.find("block_other_foundation.ptd"), std::string::npos) << message;
  EXPECT_NE(message.find("block.pte"), std::string::npos) << message;
  // Refused on identity alone: nothing was fetched or hashed.
  EXPECT_EQ(external_constant_stats().fetches, 0u);
  EXPECT_EQ(external_constant_stats().verifications, 0u);
}

TEST_F(ExternalConstantsTest, TamperedNonDelegatedWeightFailsNamingTheKey) {
  const std::string path = TamperedFoundation("ln2.weight");
  Loaded block = LoadProgram();
  auto tampered = Open(path);  // Its digests are all still there, so it opens.
  auto method = block.program->load_method("forward", &tampered->map());
  ASSERT_FALSE(method.ok()) << "tampered layer-norm bytes were used";
  EXPECT_EQ(method.error(), Error::InvalidData);
  const std::string message = method.status().message();
  EXPECT_NE(message.find("constant 'ln2.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find("tampered_block_foundation.ptd"), std::string::npos) << message;
  EXPECT_NE(message.find("block.pte"), std::string::npos) << message;
  EXPECT_EQ(external_constant_stats().verification_failures, 1u);
  EXPECT_EQ(external_constant_stats().live_entries, 0u);  // nothing kept from the failed load
}

TEST_F(ExternalConstantsTest, TrustedModeAcceptsTamperedBytesAndNeverSharesThemWithCheckedLoads) {
  const std::string path = TamperedFoundation("ln2.weight");
  Loaded block = LoadProgram();
  auto tampered = Open(path);
  set_verify_content(false);
  auto trusted = block.program->load_method("forward", &tampered->map());
  ASSERT_TRUE(trusted.ok()) << trusted.status().message();
  EXPECT_EQ(external_constant_stats().verifications, 0u);
  EXPECT_FALSE(RunForward(*trusted).empty());
  // Verification back on: a load over the same map does not take the unchecked views.
  set_verify_content(true);
  auto checked = block.program->load_method("forward", &tampered->map());
  ASSERT_FALSE(checked.ok());
  EXPECT_NE(std::string(checked.status().message()).find("ln2.weight"), std::string::npos);
}

TEST_F(ExternalConstantsTest, SecondProgramOverTheSameMapFetchesAndHashesNothing) {
  auto foundation = Open(fixtures::env_path("BLOCK_FOUNDATION_PTD"));
  for (const char* key : kNormKeys) ASSERT_TRUE(foundation->map().get_digest(key).ok()) << key;
  Loaded first = LoadProgram();
  auto a = first.program->load_method("forward", &foundation->map());
  ASSERT_TRUE(a.ok()) << a.status().message();
  const ExternalConstantStats after_first = external_constant_stats();
  EXPECT_EQ(after_first.fetches, kNumNormKeys);
  EXPECT_EQ(after_first.verifications, kNumNormKeys);
  EXPECT_EQ(after_first.live_entries, kNumNormKeys);
  EXPECT_EQ(after_first.shared_hits, 0u);

  Loaded second = LoadProgram();
  auto b = second.program->load_method("forward", &foundation->map());
  ASSERT_TRUE(b.ok()) << b.status().message();
  const ExternalConstantStats after_second = external_constant_stats();
  EXPECT_EQ(after_second.fetches, kNumNormKeys);
  EXPECT_EQ(after_second.verifications, kNumNormKeys);
  EXPECT_EQ(after_second.bytes_verified, after_first.bytes_verified);
  EXPECT_EQ(after_second.shared_hits, kNumNormKeys);
  EXPECT_EQ(after_second.live_entries, kNumNormKeys);
  const std::vector<float> out_a = RunForward(*a);
  EXPECT_FALSE(out_a.empty());
  EXPECT_EQ(out_a, RunForward(*b));

  // The views go with their last Method.
  { Method gone = std::move(*a); }
  EXPECT_EQ(external_constant_stats().live_entries, kNumNormKeys);
  { Method gone = std::move(*b); }
  EXPECT_EQ(external_constant_stats().live_entries, 0u);
}

// An adapter swapped out and back in: the views were dropped with their last Method, so a later
// load fetches again, but the DataFile (still open) remembers which entries matched their digests
// and nothing is hashed twice. A tampered copy is another file with its own memo and still fails.
TEST_F(ExternalConstantsTest, ReloadFromAnOpenDataFileFetchesAgainButHashesNothing) {
  auto foundation = Open(fixtures::env_path("BLOCK_FOUNDATION_PTD"));
  Loaded block = LoadProgram();
  std::vector<float> first;
  {
    auto a = block.program->load_method("forward", &foundation->map());
    ASSERT_TRUE(a.ok()) << a.status().message();
    first = RunForward(*a);
  }
  EXPECT_EQ(external_constant_stats().live_entries, 0u);
  auto again = block.program->load_method("forward", &foundation->map());
  ASSERT_TRUE(again.ok()) << again.status().message();
  const ExternalConstantStats stats = external_constant_stats();
  EXPECT_EQ(stats.fetches, 2 * kNumNormKeys);
  EXPECT_EQ(stats.verifications, kNumNormKeys);
  EXPECT_EQ(stats.verifications_remembered, kNumNormKeys);
  EXPECT_EQ(RunForward(*again), first);

  auto tampered = Open(TamperedFoundation("ln2.bias"));
  auto bad = block.program->load_method("forward", &tampered->map());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("ln2.bias"), std::string::npos)
      << bad.status().message();
}

TEST_F(ExternalConstantsTest, MethodsLoadedOnTwoThreadsShareOneCheckedViewPerKey) {
  auto foundation = Open(fixtures::env_path("BLOCK_FOUNDATION_PTD"));
  Loaded block = LoadProgram();
  std::optional<Result<Method>> loaded[2];
  std::thread threads[2];
  for (int i = 0; i < 2; ++i) {
    threads[i] = std::thread(
        [&, i] { loaded[i].emplace(block.program->load_method("forward", &foundation->map())); });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(loaded[0]->ok() && loaded[1]->ok());
  const ExternalConstantStats stats = external_constant_stats();
  // A race may fetch a key twice, but one view per key is kept and every acquire is answered.
  EXPECT_EQ(stats.live_entries, kNumNormKeys);
  EXPECT_EQ(stats.fetches + stats.shared_hits, 2 * kNumNormKeys);
  EXPECT_EQ(stats.verifications, stats.fetches);
  EXPECT_EQ(RunForward(**loaded[0]), RunForward(**loaded[1]));
}

TEST_F(ExternalConstantsTest, SharingOffFetchesAndHashesPerMethod) {
  set_share_constants(false);
  auto foundation = Open(fixtures::env_path("BLOCK_FOUNDATION_PTD"));
  Loaded block = LoadProgram();
  auto a = block.program->load_method("forward", &foundation->map());
  auto b = block.program->load_method("forward", &foundation->map());
  ASSERT_TRUE(a.ok() && b.ok());
  const ExternalConstantStats stats = external_constant_stats();
  EXPECT_EQ(stats.fetches, 2 * kNumNormKeys);
  EXPECT_EQ(stats.verifications, 2 * kNumNormKeys);
  EXPECT_EQ(stats.shared_hits, 0u);
  EXPECT_EQ(stats.live_entries, 0u);
  EXPECT_EQ(RunForward(*a), RunForward(*b));
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
