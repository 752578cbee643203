// Two threads generating at the same time with two adapters' programs (a.pte, b.pte) over one
// foundation.ptd: each thread's tokens equal the single-threaded run's and transformers' (the
// //testing:generation_files fixture). The programs share the process-wide weights cache and the
// data file; build with --config=tsan to check the locking.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "edgeshare/generation/generator.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::DataFile;

constexpr int kRounds = 3;

TEST(GeneratorThreads, two_adapters_generate_at_once_as_they_do_alone) {
  const ExpectedTokens expected = ReadExpectedTokens();
  ASSERT_EQ(expected.count("prompt"), 1u) << "GENERATION_EXPECTED_TXT is unreadable";
  const std::vector<int64_t>& prompt = expected.at("prompt");
  const size_t n = expected.at("a").size();
  ASSERT_GT(n, 0u);
  ASSERT_NE(expected.at("a"), expected.at("b"));  // otherwise a mix-up would go unseen

  auto foundation = DataFile::open(FixturePath("foundation.ptd").c_str());
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  std::unique_ptr<LoadedMethod> a = LoadForwardCached(FixturePath("a.pte"), (*foundation)->map());
  std::unique_ptr<LoadedMethod> b = LoadForwardCached(FixturePath("b.pte"), (*foundation)->map());
  ASSERT_TRUE(a && b);
  auto generator_a = Generator::create(&*a->method);
  auto generator_b = Generator::create(&*b->method);
  ASSERT_TRUE(generator_a.ok()) << generator_a.status().message();
  ASSERT_TRUE(generator_b.ok()) << generator_b.status().message();

  const std::vector<int64_t> alone_a = GenerateOrFail(*generator_a, prompt, n);
  const std::vector<int64_t> alone_b = GenerateOrFail(*generator_b, prompt, n);
  EXPECT_EQ(alone_a, expected.at("a"));
  EXPECT_EQ(alone_b, expected.at("b"));

  std::vector<std::vector<int64_t>> runs_a(kRounds), runs_b(kRounds);
  std::thread thread_a([&] {
    for (auto& run : runs_a) run = GenerateOrFail(*generator_a, prompt, n);
  });
  std::thread thread_b([&] {
    for (auto& run : runs_b) run = GenerateOrFail(*generator_b, prompt, n);
  });
  thread_a.join();
  thread_b.join();
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(runs_a[round], alone_a) << "round " << round;
    EXPECT_EQ(runs_b[round], alone_b) << "round " << round;
  }
}

// Two contexts: adapter a's program on Threads of 1, b's on Threads of 2 (attention and the fully
// connected slabs split across its helpers and pool), generating at once from two threads; each
// gives the tokens it gives alone on one thread.
TEST(GeneratorThreads, programs_on_threads_of_one_and_two_generate_at_once_as_on_one) {
  const ExpectedTokens expected = ReadExpectedTokens();
  ASSERT_EQ(expected.count("prompt"), 1u) << "GENERATION_EXPECTED_TXT is unreadable";
  const std::vector<int64_t>& prompt = expected.at("prompt");
  const size_t n = expected.at("a").size();

  auto foundation = DataFile::open(FixturePath("foundation.ptd").c_str());
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  auto one = runtime::Threads::create(1);
  auto two = runtime::Threads::create(2);
  ASSERT_TRUE(one.ok() && two.ok());
  std::unique_ptr<LoadedMethod> a =
      LoadForwardCached(FixturePath("a.pte"), (*foundation)->map(), &*one);
  std::unique_ptr<LoadedMethod> b =
      LoadForwardCached(FixturePath("b.pte"), (*foundation)->map(), &*two);
  ASSERT_TRUE(a && b);
  auto generator_a = Generator::create(&*a->method);
  auto generator_b = Generator::create(&*b->method);
  ASSERT_TRUE(generator_a.ok() && generator_b.ok());

  std::vector<std::vector<int64_t>> runs_a(kRounds), runs_b(kRounds);
  std::thread thread_a([&] {
    for (auto& run : runs_a) run = GenerateOrFail(*generator_a, prompt, n);
  });
  std::thread thread_b([&] {
    for (auto& run : runs_b) run = GenerateOrFail(*generator_b, prompt, n);
  });
  thread_a.join();
  thread_b.join();
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(runs_a[round], expected.at("a")) << "round " << round;
    EXPECT_EQ(runs_b[round], expected.at("b")) << "round " << round;
  }
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
