// Generator: decoding (token ids in, token ids out) with a method that keeps a KV cache: greedy,
// or sampled (sampler.h), stopping at end tokens, streaming each token as it comes.
//
// The method is the exporter's stateful one ("forward_cached" for --hf-model exports): inputs
// int64 input_ids [1, T] (T dynamic, 1..max length) and an int64 start position (a scalar), output
// float logits [1, T, vocab]; its state is the KV cache. generate() resets the state, prefills the
// whole prompt in one execute, then runs one execute per new token, each time picking the next
// token with the Sampler (greedy by default: the largest logit, the first one on ties, like
// torch.argmax). Generation ends at a stop id (finish reason "stop"), after max_new_tokens, or
// where the sequence reaches the method's length (both "length"): a prompt that fits always runs.
//
// A conversation continues in the same KV cache: give the whole sequence again with
// options.cached_tokens = how much of it the cache holds (at most cached_length(), what the last
// generation put there: its prompt and every new token but the last), and only the rest is
// prefilled. The tokens equal a fresh generate() over the whole sequence.
//
//   ES_ASSIGN_OR_RETURN(Generator generator, Generator::create(&method));
//   ES_ASSIGN_OR_RETURN(Generation out, generator.generate(prompt, /*max_new_tokens=*/32));
//   out.tokens;  out.prefill_ms;  out.decode_tokens_per_s;
//
//   GenerateOptions options;
//   options.max_new_tokens = 64;  options.stop_ids = {2};   // e.g. generation_config's eos ids
//   options.sampling.temperature = 0.7f;  options.sampling.seed = 42;
//   generator.generate(prompt, options, [](int64_t token) { show(token); return true; });
//
//   // Or one token per call (what a language binding's iterator needs):
//   ES_RETURN_IF_ERROR(generator.start(prompt, options));
//   while (!generator.done()) { ES_ASSIGN_OR_RETURN(int64_t token, generator.next()); }
//
// create() reads the bounds (the longest input_ids, the vocabulary) from the method's inputs and
// outputs as planned: call it before anything calls set_input on the method (which gives the input
// the sizes of that call), e.g. right after load_method, and keep the Generator.
// Errors: create: InvalidArgument when the method does not have that signature (naming it).
// generate / start: InvalidArgument for an empty prompt, a prompt longer than the method's maximum
// length, cached_tokens past cached_length() or not short of the prompt, a prompt token or a stop id
// outside the vocabulary ("token id 300 is outside the vocabulary of 256"), sampling options out
// of range (Sampler::create); the method's own errors otherwise. next(): InvalidState when
// done() (or start() was not called or failed).
//
// The same checks for a caller that executes a token method itself (tools/run, Python's execute):
//   ES_ASSIGN_OR_RETURN(TokenBounds bounds, token_bounds(method));   // NotFound: not a token method
//   ES_RETURN_IF_ERROR(check_token_inputs(bounds, inputs, method.name()));
// Ownership: borrows the Method, which must outlive the Generator. Thread-safety: one thread at a
// time per Generator (and per Method); Generators over different Methods may run concurrently.
// Threads: each execute runs on the Threads the Method was loaded with (Program::load_method), so
// Generators over Methods of different thread counts run side by side in one process.

#ifndef EDGESHARE_GENERATION_GENERATOR_H_
#define EDGESHARE_GENERATION_GENERATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "edgeshare/generation/sampler.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"
#include "edgeshare/runtime/executor/method.h"

namespace edgeshare {
namespace generation {

// What a token method takes: input 0 int64 input_ids [1, T] (T up to max_length), output 0 float
// logits [1, T, vocab_size], and with `start` an int64 start position (input 1: where the tokens
// go in its KV cache, whose length is max_length).
struct TokenBounds {
  size_t max_length = 0;
  size_t vocab_size = 0;
  bool start = false;
};

// The bounds of `method` from its planned input 0 and output 0 (their capacity and vocabulary dim,
// which set_input does not change). NotFound when the method does not take token ids that way.
runtime::Result<TokenBounds> token_bounds(const runtime::Method& method);

// InvalidArgument (naming method_name) unless every id is in [0, vocab_size).
runtime::Status check_token_ids(const TokenBounds& bounds, runtime::Span<const int64_t> ids,
                                const char* method_name);

// Checks inputs about to be given to a token method: ids within the vocabulary, and with a start
// position, 0 <= start and start + T <= max_length (the tokens fit in the KV cache). Inputs of
// another type or shape are left to set_input's own checks.
runtime::Status check_token_inputs(const TokenBounds& bounds,
                                   runtime::Span<const runtime::Tensor> inputs,
                                   const char* method_name);

// Why a generation ended.
enum class FinishReason {
  kNone,            // not ended yet
  kStopId,          // a stop id (an end token) was generated
  kMaxNewTokens,    // max_new_tokens were generated
  kSequenceBound,   // the sequence reached the method's length (--max-seq-len)
  kCaller,          // the caller stopped it (a TokenCallback returning false, a stop string)
};

// The name a user sees, as in OpenAI's and transformers' APIs: "stop" for an end token or the
// caller's stop, "length" for either bound ("" while not ended).
const char* finish_reason_name(FinishReason reason);

struct Generation {
  std::vector<int64_t> tokens;  // the new tokens only, in order
  double prefill_ms = 0;        // the prompt's one execute, including the first token's argmax
  // New tokens after the first, per second of decode executes (0 with fewer than two tokens).
  double decode_tokens_per_s = 0;
  FinishReason finish_reason = FinishReason::kNone;
  size_t prefilled_tokens = 0;  // the prompt tokens executed (all but options.cached_tokens)
};

struct GenerateOptions {
  size_t max_new_tokens = 0;
  SamplingOptions sampling;  // greedy by default
  // Generation stops after any of these (it is the last token returned): the model's end tokens.
  std::vector<int64_t> stop_ids;
  // How many leading prompt tokens the KV cache holds already from the last generation (0: reset
  // the state and prefill the whole prompt). The sampler still sees the whole prompt.
  size_t cached_tokens = 0;
};

// Called with each new token as soon as it is picked; returning false stops generation after it.
using TokenCallback = std::function<bool(int64_t token)>;

class Generator {
 public:
  static runtime::Result<Generator> create(runtime::Method* method);

  // Greedy: stops after max_new_tokens, or after `eos` (included) when eos >= 0.
  runtime::Result<Generation> generate(runtime::Span<const int64_t> prompt, size_t max_new_tokens,
                                       int64_t eos = -1);
  // With sampling and stop ids, calling `on_token` (when set) with each new token.
  runtime::Result<Generation> generate(runtime::Span<const int64_t> prompt,
                                       const GenerateOptions& options,
                                       const TokenCallback& on_token = nullptr);

  // Stepwise generation: start() checks, resets the state and prefills (its time in
  // prefill_ms()); each next() returns one new token until done(). A start() ends what an earlier
  // one began. The Method must not be executed by anything else in between.
  runtime::Status start(runtime::Span<const int64_t> prompt, const GenerateOptions& options);
  runtime::Result<int64_t> next();
  bool done() const { return done_; }
  FinishReason finish_reason() const { return finish_; }
  // The caller ends the generation after the token next() returned last (kCaller).
  void stop() {
    if (!done_) finish_ = FinishReason::kCaller;
    done_ = true;
  }
  double prefill_ms() const { return prefill_ms_; }
  size_t prefilled_tokens() const { return prefilled_; }
  // The leading tokens of the last sequence that the KV cache holds (the prompt and every token
  // next() returned but the last; 0 after a failure or forget_cache()).
  size_t cached_length() const { return cached_; }
  // Says the method's state was changed by something else (an execute, a rebind): nothing cached.
  void forget_cache() {
    cached_ = 0;
    done_ = true;
  }
  // New tokens after the first per second of their executes (0 with fewer than two).
  double decode_tokens_per_s() const;

  // The longest prompt + generated sequence the method was exported for.
  size_t max_length() const { return bounds_.max_length; }
  size_t vocab_size() const { return bounds_.vocab_size; }

 private:
  Generator(runtime::Method* method, TokenBounds bounds) : method_(method), bounds_(bounds) {}

  // One execute over `tokens` at `start`; returns the token the sampler picks from the last
  // position's logits.
  runtime::Result<int64_t> step(runtime::Span<const int64_t> tokens, int64_t start);

  runtime::Method* method_;
  TokenBounds bounds_;
  // The sequence start() began.
  std::optional<Sampler> sampler_;
  std::vector<int64_t> stop_ids_;
  size_t max_new_tokens_ = 0;
  size_t room_ = 0;  // the new tokens the method's length leaves room for
  size_t produced_ = 0;
  size_t cached_ = 0;
  size_t prefilled_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  int64_t pending_ = -1;   // the prefill's token, returned by the first next()
  int64_t position_ = 0;   // where the next token goes in the KV cache
  int64_t last_ = -1;      // the token next() returned last
  bool done_ = true;
  double prefill_ms_ = 0;
  double decode_ms_ = 0;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_GENERATOR_H_
