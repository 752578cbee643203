// Generator: greedy decoding (token ids in, token ids out) with a method that keeps a KV cache.
//
// The method is the exporter's stateful one ("forward_cached" for --hf-model exports): inputs
// int64 input_ids [1, T] (T dynamic, 1..max length) and an int64 start position (a scalar), output
// float logits [1, T, vocab]; its state is the KV cache. generate() resets the state, prefills the
// whole prompt in one execute, then runs one execute per new token, each time picking the token
// with the largest logit (the first one on ties, like torch.argmax).
//
//   ES_ASSIGN_OR_RETURN(Generator generator, Generator::create(&method));
//   ES_ASSIGN_OR_RETURN(Generation out, generator.generate(prompt, /*max_new_tokens=*/32));
//   out.tokens;  out.prefill_ms;  out.decode_tokens_per_s;
//
// create() reads the bounds (the longest input_ids, the vocabulary) from the method's inputs and
// outputs as planned: call it before anything calls set_input on the method (which gives the input
// the sizes of that call), e.g. right after load_method, and keep the Generator.
// Errors: create: InvalidArgument when the method does not have that signature (naming it).
// generate: InvalidArgument for an empty prompt, a prompt longer than the method's maximum length
// or prompt + new tokens past it (checked with no new tokens too), a prompt token or `eos` outside
// the vocabulary ("token id 300 is outside the vocabulary of 256"); the method's own errors
// otherwise.
//
// The same checks for a caller that executes a token method itself (tools/run, Python's execute):
//   ES_ASSIGN_OR_RETURN(TokenBounds bounds, token_bounds(method));   // NotFound: not a token method
//   ES_RETURN_IF_ERROR(check_token_inputs(bounds, inputs, method.name()));
// Ownership: borrows the Method, which must outlive the Generator. Thread-safety: one thread at a
// time per Generator (and per Method); Generators over different Methods may run concurrently.

#ifndef EDGESHARE_GENERATION_GENERATOR_H_
#define EDGESHARE_GENERATION_GENERATOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

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

struct Generation {
  std::vector<int64_t> tokens;  // the new tokens only, in order
  double prefill_ms = 0;        // the prompt's one execute, including the first token's argmax
  // New tokens after the first, per second of decode executes (0 with fewer than two tokens).
  double decode_tokens_per_s = 0;
};

class Generator {
 public:
  static runtime::Result<Generator> create(runtime::Method* method);

  // Greedy: stops after max_new_tokens, or after `eos` (included) when eos >= 0.
  runtime::Result<Generation> generate(runtime::Span<const int64_t> prompt, size_t max_new_tokens,
                                       int64_t eos = -1);

  // The longest prompt + generated sequence the method was exported for.
  size_t max_length() const { return bounds_.max_length; }
  size_t vocab_size() const { return bounds_.vocab_size; }

 private:
  Generator(runtime::Method* method, TokenBounds bounds) : method_(method), bounds_(bounds) {}

  // One execute over `tokens` at `start`; returns the argmax of the last position's logits.
  runtime::Result<int64_t> step(runtime::Span<const int64_t> tokens, int64_t start);

  runtime::Method* method_;
  TokenBounds bounds_;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_GENERATOR_H_
