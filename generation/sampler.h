// Sampler: picks the next token from a row of logits: greedy, or sampled with temperature, top-k,
// top-p and a repetition penalty, from a seeded generator that repeats exactly.
//
//   SamplingOptions options;
//   options.temperature = 0.8f;  options.top_k = 40;  options.top_p = 0.95f;  options.seed = 7;
//   ES_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(options, vocab_size));
//   sampler.reset(prompt);                          // the seed again; the prompt counts as seen
//   int64_t token = sampler.sample(logits);         // logits: vocab_size floats, left unchanged
//   sampler.accept(token);                          // seen from now on (repetition penalty)
//
// The steps, in transformers' order: the repetition penalty on every token seen (the prompt and
// what was generated: a positive logit is divided by it, a negative one multiplied); then greedy
// (temperature 0, or top_k 1) takes the largest logit, the first on ties, as torch.argmax does;
// otherwise the logits are divided by the temperature, the top_k largest kept (ties by lower id),
// softmax, the smallest set of the most probable whose probability reaches top_p kept, and one
// token drawn from what is left with u = (the next std::mt19937_64 output >> 11) * 2^-53 in [0, 1):
// the first token (in the kept order) whose cumulative probability exceeds u times the kept total.
// std::mt19937_64's outputs are fixed by the standard, and the conversion is ours, so a seed gives
// the same tokens with every standard library; every caller (tools, Python) shares this code.
//
// Errors: create(): InvalidArgument for a negative or non-finite temperature, top_p outside (0, 1],
// a repetition penalty that is not positive and finite, or an empty vocabulary.
// Ownership: owns its buffers (a few vocab-sized arrays, allocated by create(); sample() and
// accept() allocate nothing). Thread-safety: one thread at a time per Sampler.

#ifndef EDGESHARE_GENERATION_SAMPLER_H_
#define EDGESHARE_GENERATION_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace generation {

struct SamplingOptions {
  float temperature = 0.0f;         // 0: greedy
  size_t top_k = 0;                 // 0: every token
  float top_p = 1.0f;               // 1: no nucleus cut
  float repetition_penalty = 1.0f;  // 1: none
  uint64_t seed = 0;
};

class Sampler {
 public:
  static runtime::Result<Sampler> create(const SamplingOptions& options, size_t vocab_size);

  // Starts a new sequence: the generator is seeded again and `prompt` is what was seen so far.
  // Ids outside the vocabulary are ignored (the Generator checks them before).
  void reset(runtime::Span<const int64_t> prompt);
  // The next token for `logits` (vocab_size floats).
  int64_t sample(const float* logits);
  // Records a generated token as seen.
  void accept(int64_t token);

  bool greedy() const { return options_.temperature == 0.0f || options_.top_k == 1; }
  const SamplingOptions& options() const { return options_; }

 private:
  Sampler(const SamplingOptions& options, size_t vocab_size);

  // A uniform double in [0, 1) from the next 53 bits of the generator.
  double uniform();

  SamplingOptions options_;
  size_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> seen_;         // per token: seen in this sequence
  std::vector<int64_t> seen_ids_;     // the ids marked in seen_, to penalise and clear them
  std::vector<float> scores_;         // the penalised logits
  std::vector<int32_t> order_;        // candidate ids, most probable first once sorted
  std::vector<double> probs_;         // softmax weights by token id
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_SAMPLER_H_
