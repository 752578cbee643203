// Generation options on the fixture's adapter a: a stop id ends generation after it, top-k 1
// equals greedy (transformers' tokens), a seeded sampled run repeats exactly and streams through
// the callback the tokens it returns, and stepwise start()/next() gives the same tokens.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "edgeshare/generation/generator.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::DataFile;
using runtime::Span;

class GeneratorOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    expected_ = ReadExpectedTokens();
    ASSERT_EQ(expected_.count("a"), 1u) << "GENERATION_EXPECTED_TXT is unreadable";
    auto file = DataFile::open(FixturePath("foundation.ptd").c_str());
    ASSERT_TRUE(file.ok()) << file.status().message();
    foundation_ = *file;
    method_ = LoadForwardCached(FixturePath("a.pte"), foundation_->map());
    ASSERT_TRUE(method_);
    auto generator = Generator::create(&*method_->method);
    ASSERT_TRUE(generator.ok()) << generator.status().message();
    generator_.emplace(std::move(*generator));
  }

  std::vector<int64_t> Run(const GenerateOptions& options, std::vector<int64_t>* streamed = nullptr) {
    const std::vector<int64_t>& prompt = expected_.at("prompt");
    auto out = generator_->generate(Span<const int64_t>(prompt.data(), prompt.size()), options,
                                    [streamed](int64_t token) {
                                      if (streamed) streamed->push_back(token);
                                      return true;
                                    });
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? out->tokens : std::vector<int64_t>();
  }

  ExpectedTokens expected_;
  std::shared_ptr<const DataFile> foundation_;
  std::unique_ptr<LoadedMethod> method_;
  std::optional<Generator> generator_;
};

TEST_F(GeneratorOptions, stops_after_a_stop_id_it_returns_last) {
  const std::vector<int64_t>& greedy = expected_.at("a");
  GenerateOptions options;
  options.max_new_tokens = greedy.size();
  options.stop_ids = {greedy[5]};
  size_t first = 0;
  while (greedy[first] != greedy[5]) ++first;
  EXPECT_EQ(Run(options), std::vector<int64_t>(greedy.begin(), greedy.begin() + first + 1));
}

TEST_F(GeneratorOptions, top_k_one_equals_transformers_greedy) {
  GenerateOptions options;
  options.max_new_tokens = expected_.at("a").size();
  options.sampling.temperature = 0.9f;
  options.sampling.top_k = 1;
  options.sampling.seed = 5;
  EXPECT_EQ(Run(options), expected_.at("a"));
}

TEST_F(GeneratorOptions, seeded_sampling_repeats_exactly_and_streams_its_tokens) {
  GenerateOptions options;
  options.max_new_tokens = 24;
  options.sampling.temperature = 1.0f;
  options.sampling.top_k = 50;
  options.sampling.top_p = 0.95f;
  options.sampling.repetition_penalty = 1.1f;
  options.sampling.seed = 1234;
  std::vector<int64_t> streamed;
  const std::vector<int64_t> first = Run(options, &streamed);
  EXPECT_EQ(first.size(), 24u);
  EXPECT_EQ(streamed, first);
  EXPECT_EQ(Run(options), first);
  EXPECT_NE(first, std::vector<int64_t>(expected_.at("a").begin(), expected_.at("a").begin() + 24))
      << "sampling at temperature 1 leaves the greedy path";

  const std::vector<int64_t>& prompt = expected_.at("prompt");
  ASSERT_TRUE(generator_->start(Span<const int64_t>(prompt.data(), prompt.size()), options).ok());
  std::vector<int64_t> stepped;
  while (!generator_->done()) {
    auto token = generator_->next();
    ASSERT_TRUE(token.ok()) << token.status().message();
    stepped.push_back(*token);
  }
  EXPECT_EQ(stepped, first);
  EXPECT_FALSE(generator_->next().ok()) << "nothing after done()";
}

TEST_F(GeneratorOptions, a_callback_returning_false_stops_after_that_token) {
  GenerateOptions options;
  options.max_new_tokens = 10;
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  int calls = 0;
  auto out = generator_->generate(Span<const int64_t>(prompt.data(), prompt.size()), options,
                                  [&calls](int64_t) { return ++calls < 3; });
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->tokens.size(), 3u);
}

TEST_F(GeneratorOptions, bad_options_are_refused_before_anything_runs) {
  GenerateOptions options;
  options.max_new_tokens = 4;
  options.sampling.top_p = 2.0f;
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  auto out = generator_->generate(Span<const int64_t>(prompt.data(), prompt.size()), options);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(std::string(out.status().message()).find("top_p"), std::string::npos);
  options = GenerateOptions();
  options.max_new_tokens = 4;
  options.stop_ids = {1 << 20};
  EXPECT_FALSE(generator_->generate(Span<const int64_t>(prompt.data(), prompt.size()), options).ok());
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
