// Generation options on the fixture's adapter a: a stop id ends generation after it, top-k 1
// equals greedy (transformers' tokens), a seeded sampled run repeats exactly and streams through
// the callback the tokens it returns, and stepwise start()/next() gives the same tokens. Each run
// says why it ended (an end token, max_new_tokens, the method's length, the caller), and a run
// that continues the KV cache of the last one prefills only its new tokens and equals a fresh run.

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

TEST_F(GeneratorOptions, each_run_says_why_it_ended) {
  const std::vector<int64_t>& greedy = expected_.at("a");
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  const Span<const int64_t> ids(prompt.data(), prompt.size());
  GenerateOptions options;
  options.max_new_tokens = 3;
  auto out = generator_->generate(ids, options);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->finish_reason, FinishReason::kMaxNewTokens);
  EXPECT_STREQ(finish_reason_name(out->finish_reason), "length");
  EXPECT_EQ(out->prefilled_tokens, prompt.size());
  options.stop_ids = {greedy[1]};
  out = generator_->generate(ids, options);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->finish_reason, FinishReason::kStopId);
  EXPECT_STREQ(finish_reason_name(out->finish_reason), "stop");
  options.stop_ids.clear();
  out = generator_->generate(ids, options, [](int64_t) { return false; });
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->tokens.size(), 1u);
  EXPECT_EQ(out->finish_reason, FinishReason::kCaller);
  EXPECT_STREQ(finish_reason_name(out->finish_reason), "stop");
}

TEST_F(GeneratorOptions, a_run_reaching_the_methods_length_stops_there) {
  // A prompt 3 short of the length: 4 new tokens fit (the last one is never fed back).
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  std::vector<int64_t> longer;
  while (longer.size() + 3 < generator_->max_length()) {
    longer.push_back(prompt[longer.size() % prompt.size()]);
  }
  const Span<const int64_t> ids(longer.data(), longer.size());
  GenerateOptions options;
  options.max_new_tokens = 50;
  auto out = generator_->generate(ids, options);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->tokens.size(), 4u);
  EXPECT_EQ(out->finish_reason, FinishReason::kSequenceBound);
  EXPECT_STREQ(finish_reason_name(out->finish_reason), "length");
  options.max_new_tokens = 4;
  auto exact = generator_->generate(ids, options);
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  EXPECT_EQ(exact->tokens, out->tokens);
  EXPECT_EQ(exact->finish_reason, FinishReason::kMaxNewTokens);
  // A prompt past the length is still refused, in one line.
  longer.resize(generator_->max_length() + 1, prompt[0]);
  auto refused = generator_->generate(Span<const int64_t>(longer.data(), longer.size()), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("is longer than the"), std::string::npos);
}

// Two turns: the second continues the cache of the first and equals a fresh run over both.
void ExpectContinuationEqualsAFreshRun(Generator& generator, const std::vector<int64_t>& prompt,
                                       GenerateOptions options) {
  options.max_new_tokens = 5;
  auto first = generator.generate(Span<const int64_t>(prompt.data(), prompt.size()), options);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->tokens.size(), 5u);
  EXPECT_EQ(generator.cached_length(), prompt.size() + 4);
  std::vector<int64_t> whole = prompt;
  whole.insert(whole.end(), first->tokens.begin(), first->tokens.end());
  whole.insert(whole.end(), prompt.begin(), prompt.begin() + 3);  // the next turn's tokens
  GenerateOptions again = options;
  again.cached_tokens = generator.cached_length();
  auto continued = generator.generate(Span<const int64_t>(whole.data(), whole.size()), again);
  ASSERT_TRUE(continued.ok()) << continued.status().message();
  EXPECT_EQ(continued->prefilled_tokens, 4u);  // the first turn's last token and the 3 new ones
  auto fresh = generator.generate(Span<const int64_t>(whole.data(), whole.size()), options);
  ASSERT_TRUE(fresh.ok()) << fresh.status().message();
  EXPECT_EQ(fresh->prefilled_tokens, whole.size());
  EXPECT_EQ(continued->tokens, fresh->tokens);
}

TEST_F(GeneratorOptions, a_continued_run_prefills_only_new_tokens_and_equals_a_fresh_one) {
  GenerateOptions options;
  ExpectContinuationEqualsAFreshRun(*generator_, expected_.at("prompt"), options);
  options.sampling.temperature = 0.9f;
  options.sampling.top_k = 40;
  options.sampling.repetition_penalty = 1.3f;
  options.sampling.seed = 11;
  ExpectContinuationEqualsAFreshRun(*generator_, expected_.at("prompt"), options);
}

TEST_F(GeneratorOptions, cached_tokens_past_what_the_cache_holds_are_refused) {
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  const Span<const int64_t> ids(prompt.data(), prompt.size());
  GenerateOptions options;
  options.max_new_tokens = 2;
  options.cached_tokens = 1;
  auto refused = generator_->generate(ids, options);  // nothing generated yet
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("cached tokens"), std::string::npos);
  options.cached_tokens = 0;
  ASSERT_TRUE(generator_->generate(ids, options).ok());
  options.cached_tokens = prompt.size();  // nothing new to prefill
  EXPECT_FALSE(generator_->generate(ids, options).ok());
  generator_->forget_cache();
  options.cached_tokens = 1;
  EXPECT_FALSE(generator_->generate(ids, options).ok());
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
