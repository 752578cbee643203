#include "edgeshare/generation/generator.h"

#include <chrono>

namespace edgeshare {
namespace generation {

using runtime::Error;
using runtime::Method;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;
using runtime::Tensor;

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Result<Generator> Generator::create(Method* method) {
  ES_CHECK_OR_RETURN_ERROR(method != nullptr, Error::InvalidArgument, "Generator: null method");
  const char* name = method->name();
  ES_CHECK_OR_RETURN_ERROR(method->num_inputs() == 2 && method->num_outputs() >= 1,
                           Error::InvalidArgument,
                           "method '%s' takes %zu inputs and returns %zu outputs; generation "
                           "needs (input_ids, start_pos) -> logits",
                           name, method->num_inputs(), method->num_outputs());
  ES_ASSIGN_OR_RETURN(Tensor ids, method->input(0));
  ES_ASSIGN_OR_RETURN(Tensor start, method->input(1));
  ES_ASSIGN_OR_RETURN(Tensor logits, method->output(0));
  ES_CHECK_OR_RETURN_ERROR(
      ids.scalar_type() == ScalarType::Long && ids.dim() == 2 && ids.size(0) == 1,
      Error::InvalidArgument, "method '%s': input 0 must be int64 input_ids [1, T]", name);
  ES_CHECK_OR_RETURN_ERROR(start.scalar_type() == ScalarType::Long && start.numel() == 1,
                           Error::InvalidArgument,
                           "method '%s': input 1 must be the int64 start position", name);
  ES_CHECK_OR_RETURN_ERROR(logits.scalar_type() == ScalarType::Float && logits.dim() == 3,
                           Error::InvalidArgument,
                           "method '%s': output 0 must be float logits [1, T, vocab]", name);
  ES_CHECK_OR_RETURN_ERROR(method->num_state() > 0, Error::InvalidArgument,
                           "method '%s' keeps no state (no KV cache); export the stateful one",
                           name);
  // input_ids' capacity (planned at the bound) is the longest sequence; its sizes are the last
  // run's once the method has run.
  return Generator(method, ids.capacity() / sizeof(int64_t), static_cast<size_t>(logits.size(2)));
}

Result<int64_t> Generator::step(Span<const int64_t> tokens, int64_t start) {
  int64_t start_value = start;
  ES_RETURN_IF_ERROR(
      method_->set_input(0, Tensor(ScalarType::Long, {1, static_cast<int32_t>(tokens.size())},
                                   const_cast<int64_t*>(tokens.data()))));
  ES_ASSIGN_OR_RETURN(Tensor slot, method_->input(1));
  ES_RETURN_IF_ERROR(method_->set_input(1, Tensor(ScalarType::Long, slot.sizes(), &start_value)));
  ES_RETURN_IF_ERROR(method_->execute());
  ES_ASSIGN_OR_RETURN(Tensor logits, method_->output(0));
  ES_CHECK_OR_RETURN_ERROR(logits.dim() == 3 && logits.size(1) >= 1 &&
                               static_cast<size_t>(logits.size(2)) == vocab_size_,
                           Error::InvalidProgram, "method '%s' returned logits of another shape",
                           method_->name());
  const float* last = logits.data<float>() + (logits.numel() - vocab_size_);
  size_t best = 0;
  for (size_t v = 1; v < vocab_size_; ++v) {
    if (last[v] > last[best]) best = v;
  }
  return static_cast<int64_t>(best);
}

Result<Generation> Generator::generate(Span<const int64_t> prompt, size_t max_new_tokens,
                                       int64_t eos) {
  ES_CHECK_OR_RETURN_ERROR(!prompt.empty(), Error::InvalidArgument, "the prompt is empty");
  ES_CHECK_OR_RETURN_ERROR(prompt.size() + max_new_tokens <= max_length_ + 1,
                           Error::InvalidArgument,
                           "a prompt of %zu tokens plus %zu new tokens is longer than the %zu "
                           "method '%s' was exported for (--max-seq-len)",
                           prompt.size(), max_new_tokens, max_length_, method_->name());
  Generation out;
  out.tokens.reserve(max_new_tokens);
  if (max_new_tokens == 0) return out;
  method_->reset_state();
  const auto prefill_start = std::chrono::steady_clock::now();
  ES_ASSIGN_OR_RETURN(int64_t token, step(prompt, 0));
  out.prefill_ms = ms_since(prefill_start);
  out.tokens.push_back(token);
  const auto decode_start = std::chrono::steady_clock::now();
  int64_t position = static_cast<int64_t>(prompt.size());
  while (out.tokens.size() < max_new_tokens && token != eos) {
    ES_ASSIGN_OR_RETURN(token, step(Span<const int64_t>(&out.tokens.back(), 1), position));
    ++position;
    out.tokens.push_back(token);
  }
  const double decode_ms = ms_since(decode_start);
  if (out.tokens.size() > 1 && decode_ms > 0) {
    out.decode_tokens_per_s = static_cast<double>(out.tokens.size() - 1) * 1000.0 / decode_ms;
  }
  return out;
}

}  // namespace generation
}  // namespace edgeshare
