// The sampler on hand-made logits: greedy ties, top-k 1 as greedy, a seed repeating exactly and
// another seed differing, top-k and top-p keeping only the most probable, the repetition penalty
// as transformers applies it, and options out of range refused.

#include "edgeshare/generation/sampler.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace edgeshare {
namespace generation {
namespace {

using runtime::Span;

Sampler Make(const SamplingOptions& options, size_t vocab) {
  auto sampler = Sampler::create(options, vocab);
  EXPECT_TRUE(sampler.ok()) << sampler.status().message();
  return std::move(*sampler);
}

std::vector<int64_t> Draw(Sampler& sampler, const std::vector<float>& logits, int n) {
  sampler.reset(Span<const int64_t>());
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.sample(logits.data()));
  return out;
}

const std::vector<float> kLogits = {0.5f, 2.0f, 1.5f, 2.0f, -1.0f, 0.0f, 1.0f, 1.9f};

TEST(Sampler, greedy_takes_the_first_largest_logit) {
  Sampler sampler = Make(SamplingOptions(), kLogits.size());
  EXPECT_EQ(Draw(sampler, kLogits, 3), (std::vector<int64_t>{1, 1, 1}));
}

TEST(Sampler, top_k_one_is_greedy_at_any_temperature) {
  SamplingOptions options;
  options.temperature = 5.0f;
  options.top_k = 1;
  options.seed = 3;
  Sampler sampler = Make(options, kLogits.size());
  EXPECT_EQ(Draw(sampler, kLogits, 20), std::vector<int64_t>(20, 1));
}

TEST(Sampler, a_seed_repeats_exactly_and_another_seed_differs) {
  SamplingOptions options;
  options.temperature = 1.0f;
  options.seed = 42;
  Sampler first = Make(options, kLogits.size());
  Sampler second = Make(options, kLogits.size());
  const std::vector<int64_t> drawn = Draw(first, kLogits, 64);
  EXPECT_EQ(Draw(second, kLogits, 64), drawn);
  EXPECT_EQ(Draw(first, kLogits, 64), drawn) << "reset() seeds again";
  options.seed = 43;
  Sampler other = Make(options, kLogits.size());
  EXPECT_NE(Draw(other, kLogits, 64), drawn);
  EXPECT_GT(std::set<int64_t>(drawn.begin(), drawn.end()).size(), 3u) << "it samples";
}

TEST(Sampler, top_k_keeps_the_k_largest_ties_by_lower_id) {
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_k = 3;  // ids 1, 3 (2.0) and 7 (1.9)
  Sampler sampler = Make(options, kLogits.size());
  const std::vector<int64_t> drawn = Draw(sampler, kLogits, 200);
  EXPECT_EQ(std::set<int64_t>(drawn.begin(), drawn.end()), (std::set<int64_t>{1, 3, 7}));
}

TEST(Sampler, top_p_keeps_the_smallest_most_probable_set_reaching_p) {
  // Probabilities about 0.665, 0.245, 0.09: top_p 0.8 keeps the first two.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.8f;
  Sampler sampler = Make(options, logits.size());
  const std::vector<int64_t> drawn = Draw(sampler, logits, 300);
  EXPECT_EQ(std::set<int64_t>(drawn.begin(), drawn.end()), (std::set<int64_t>{1, 2}));
}

TEST(Sampler, top_p_over_a_large_flat_vocabulary_keeps_the_lowest_ids_up_to_p) {
  // 1000 equal logits: each token 0.001; top_p 0.5 keeps the 500 first in the order (ties by id),
  // past the first few dozen the nucleus sorts at once.
  const std::vector<float> logits(1000, 0.25f);
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.5f;
  options.seed = 11;
  Sampler sampler = Make(options, logits.size());
  const std::vector<int64_t> drawn = Draw(sampler, logits, 2000);
  const std::set<int64_t> seen(drawn.begin(), drawn.end());
  EXPECT_LT(*seen.rbegin(), 501);
  EXPECT_GT(*seen.rbegin(), 400);
  EXPECT_GT(seen.size(), 400u);
}

TEST(Sampler, repetition_penalty_divides_positive_and_multiplies_negative_seen_logits) {
  // Seen 1 (2.0 -> 1.0) and 4 (-1.0 -> -2.0): greedy then picks 3 (2.0), the first unseen.
  SamplingOptions options;
  options.repetition_penalty = 2.0f;
  Sampler sampler = Make(options, kLogits.size());
  const int64_t seen[] = {1};
  sampler.reset(Span<const int64_t>(seen, 1));
  EXPECT_EQ(sampler.sample(kLogits.data()), 3);
  sampler.accept(3);
  EXPECT_EQ(sampler.sample(kLogits.data()), 7);  // 1.9 beats 1.5 and the halved 2.0s
  sampler.reset(Span<const int64_t>());
  EXPECT_EQ(sampler.sample(kLogits.data()), 1) << "reset() forgets what was seen";
}

TEST(Sampler, options_out_of_range_are_refused) {
  SamplingOptions options;
  options.temperature = -1.0f;
  EXPECT_FALSE(Sampler::create(options, 8).ok());
  options = SamplingOptions();
  options.top_p = 0.0f;
  EXPECT_FALSE(Sampler::create(options, 8).ok());
  options.top_p = 1.5f;
  EXPECT_FALSE(Sampler::create(options, 8).ok());
  options = SamplingOptions();
  options.repetition_penalty = 0.0f;
  EXPECT_FALSE(Sampler::create(options, 8).ok());
  EXPECT_FALSE(Sampler::create(SamplingOptions(), 0).ok());
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
