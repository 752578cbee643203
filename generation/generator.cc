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

Result<TokenBounds> token_bounds(const Method& method) {
  const char* name = method.name();
  ES_CHECK_OR_RETURN_ERROR(method.num_inputs() >= 1 && method.num_outputs() >= 1, Error::NotFound,
                           "method '%s' takes no token ids", name);
  Result<Tensor> ids = method.input(0);
  Result<Tensor> logits = method.output(0);
  ES_CHECK_OR_RETURN_ERROR(ids.ok() && ids->scalar_type() == ScalarType::Long && ids->dim() == 2 &&
                               ids->size(0) == 1,
                           Error::NotFound, "method '%s': input 0 is not int64 input_ids [1, T]",
                           name);
  ES_CHECK_OR_RETURN_ERROR(logits.ok() && logits->scalar_type() == ScalarType::Float &&
                               logits->dim() == 3 && logits->size(2) > 0,
                           Error::NotFound,
                           "method '%s': output 0 is not float logits [1, T, vocab]", name);
  TokenBounds bounds;
  // input_ids' capacity (planned at the bound) is the longest sequence; its sizes are the last
  // run's once the method has run.
  bounds.max_length = ids->capacity() / sizeof(int64_t);
  bounds.vocab_size = static_cast<size_t>(logits->size(2));
  if (method.num_inputs() == 2) {
    Result<Tensor> start = method.input(1);
    bounds.start = start.ok() && start->scalar_type() == ScalarType::Long && start->numel() == 1;
  }
  return bounds;
}

Status check_token_ids(const TokenBounds& bounds, Span<const int64_t> ids,
                       const char* method_name) {
  for (size_t i = 0; i < ids.size(); ++i) {
    ES_CHECK_OR_RETURN_ERROR(ids[i] >= 0 && static_cast<uint64_t>(ids[i]) < bounds.vocab_size,
                             Error::InvalidArgument,
                             "token id %lld is outside the vocabulary of %zu (position %zu of the "
                             "input_ids of method '%s')",
                             static_cast<long long>(ids[i]), bounds.vocab_size, i, method_name);
  }
  return Status();
}

Status check_token_inputs(const TokenBounds& bounds, Span<const Tensor> inputs,
                          const char* method_name) {
  if (inputs.empty()) return Status();
  const Tensor& ids = inputs[0];
  if (ids.scalar_type() != ScalarType::Long || ids.dim() != 2) return Status();
  ES_RETURN_IF_ERROR(check_token_ids(
      bounds, Span<const int64_t>(static_cast<const int64_t*>(ids.const_data()), ids.numel()), method_name));
  if (!bounds.start || inputs.size() < 2) return Status();
  const Tensor& start = inputs[1];
  if (start.scalar_type() != ScalarType::Long || start.numel() != 1) return Status();
  const int64_t position = *static_cast<const int64_t*>(start.const_data());
  const size_t tokens = static_cast<size_t>(ids.size(1));
  ES_CHECK_OR_RETURN_ERROR(
      position >= 0 && static_cast<uint64_t>(position) <= bounds.max_length &&
          tokens <= bounds.max_length - static_cast<size_t>(position),
      Error::InvalidArgument,
      "start position %lld with %zu token(s) is outside the KV cache of %zu positions of method "
      "'%s'",
      static_cast<long long>(position), tokens, bounds.max_length, method_name);
  return Status();
}

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
  Result<TokenBounds> bounds = token_bounds(*method);
  if (!bounds.ok()) return Status::Format(Error::InvalidArgument, "%s", bounds.status().message());
  return Generator(method, *bounds);
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
                               static_cast<size_t>(logits.size(2)) == bounds_.vocab_size,
                           Error::InvalidProgram, "method '%s' returned logits of another shape",
                           method_->name());
  const float* last = logits.data<float>() + (logits.numel() - bounds_.vocab_size);
  size_t best = 0;
  for (size_t v = 1; v < bounds_.vocab_size; ++v) {
    if (last[v] > last[best]) best = v;
  }
  return static_cast<int64_t>(best);
}

Result<Generation> Generator::generate(Span<const int64_t> prompt, size_t max_new_tokens,
                                       int64_t eos) {
  const char* name = method_->name();
  ES_CHECK_OR_RETURN_ERROR(!prompt.empty(), Error::InvalidArgument, "the prompt is empty");
  // The prompt runs in one execute even when no token is asked for: it must fit on its own.
  ES_CHECK_OR_RETURN_ERROR(prompt.size() <= bounds_.max_length, Error::InvalidArgument,
                           "a prompt of %zu tokens is longer than the %zu method '%s' was "
                           "exported for (--max-seq-len)",
                           prompt.size(), bounds_.max_length, name);
  ES_CHECK_OR_RETURN_ERROR(max_new_tokens <= bounds_.max_length + 1 - prompt.size(),
                           Error::InvalidArgument,
                           "a prompt of %zu tokens plus %zu new tokens is longer than the %zu "
                           "method '%s' was exported for (--max-seq-len)",
                           prompt.size(), max_new_tokens, bounds_.max_length, name);
  ES_CHECK_OR_RETURN_ERROR(eos == -1 || (eos >= 0 && static_cast<uint64_t>(eos) < bounds_.vocab_size),
                           Error::InvalidArgument,
                           "end token id %lld is outside the vocabulary of %zu of method '%s'",
                           static_cast<long long>(eos), bounds_.vocab_size, name);
  ES_RETURN_IF_ERROR(check_token_ids(bounds_, prompt, name));
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
