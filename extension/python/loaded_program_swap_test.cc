// Adapter swaps while generating: two threads generate with one loaded swappable program's
// "forward_cached" (the generation fixture's swap/ files) while a third binds adapters a and c in
// turn (LoadedProgram::bind_adapter: each file's first bind makes its table, every later one
// switches pointers). Every generation is a's or c's whole, as transformers generated it, never a
// mix; run under ThreadSanitizer in CI.

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "edgeshare/extension/python/loaded_program.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace edgeshare {
namespace python {
namespace {

using generation::FixturePath;
using runtime::DataFile;
using runtime::Result;

std::shared_ptr<const DataFile> Open(const char* name) {
  Result<std::shared_ptr<const DataFile>> file = DataFile::open(FixturePath(name).c_str());
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? *file : nullptr;
}

TEST(LoadedProgramSwapTest, TwoThreadsGenerateWhileAThirdSwapsAdapters) {
  const generation::ExpectedTokens expected = generation::ReadExpectedTokens();
  ASSERT_EQ(expected.count("c"), 1u) << "GENERATION_EXPECTED_TXT is unreadable";
  const std::vector<int64_t>& prompt = expected.at("prompt");
  constexpr size_t kTokens = 8;  // a greedy prefix is the prefix of the longer run
  const std::vector<int64_t> want_a(expected.at("a").begin(), expected.at("a").begin() + kTokens);
  const std::vector<int64_t> want_c(expected.at("c").begin(), expected.at("c").begin() + kTokens);
  ASSERT_NE(want_a, want_c);

  std::shared_ptr<const DataFile> foundation = Open("swap/foundation.ptd");
  std::shared_ptr<const DataFile> a = Open("swap/a.ptd");
  std::shared_ptr<const DataFile> c = Open("swap/c.ptd");
  ASSERT_TRUE(foundation && a && c);
  Result<std::shared_ptr<LoadedProgram>> program =
      LoadedProgram::load(FixturePath("swap/lora.pte"), {foundation, a});
  ASSERT_TRUE(program.ok()) << program.status().message();
  Result<LoadedMethod*> method = (*program)->method("forward_cached");
  ASSERT_TRUE(method.ok()) << method.status().message();

  std::vector<int> failures(2, 0), mixed(2, 0), seen_c(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        auto got = (*method)->generate(
            runtime::Span<const int64_t>(prompt.data(), prompt.size()), kTokens);
        if (!got.ok()) {
          ++failures[t];
        } else if (got->tokens == want_c) {
          ++seen_c[t];
        } else if (got->tokens != want_a) {
          ++mixed[t];
        }
      }
    });
  }
  int bind_failures = 0;
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) {
      if (!(*program)->bind_adapter(i % 2 == 0 ? c : a).ok()) ++bind_failures;
      std::this_thread::yield();
    }
  });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>({0, 0}));
  EXPECT_EQ(mixed, std::vector<int>({0, 0}));
  EXPECT_EQ(bind_failures, 0);
  // The last bind was a: the next generation is a's.
  auto last = (*method)->generate(runtime::Span<const int64_t>(prompt.data(), prompt.size()),
                                  kTokens);
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(last->tokens, want_a);
  ASSERT_TRUE((*program)->bind_adapter(c).ok());
  last = (*method)->generate(runtime::Span<const int64_t>(prompt.data(), prompt.size()), kTokens);
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(last->tokens, want_c);
}

}  // namespace
}  // namespace python
}  // namespace edgeshare
