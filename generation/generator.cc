#include "edgeshare/generation/generator.h"

#include <algorithm>
#include <chrono>
#include <utility>

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

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopId:
    case FinishReason::kCaller:
      return "stop";
    case FinishReason::kMaxNewTokens:
    case FinishReason::kSequenceBound:
      return "length";
    case FinishReason::kNone:
      break;
  }
  return "";
}

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
  return sampler_->sample(last);
}

Status Generator::start(Span<const int64_t> prompt, const GenerateOptions& options) {
  done_ = true;
  finish_ = FinishReason::kNone;
  const char* name = method_->name();
  const size_t max_new_tokens = options.max_new_tokens;
  const size_t cached = options.cached_tokens;
  ES_CHECK_OR_RETURN_ERROR(!prompt.empty(), Error::InvalidArgument, "the prompt is empty");
  // The prompt runs in one execute even when no token is asked for: it must fit on its own.
  ES_CHECK_OR_RETURN_ERROR(prompt.size() <= bounds_.max_length, Error::InvalidArgument,
                           "a prompt of %zu tokens is longer than the %zu method '%s' was "
                           "exported for (--max-seq-len)",
                           prompt.size(), bounds_.max_length, name);
  ES_CHECK_OR_RETURN_ERROR(cached <= cached_ && cached < prompt.size(), Error::InvalidArgument,
                           "method '%s': %zu cached tokens asked for, but the KV cache holds %zu "
                           "and the prompt has %zu (at least one token must be new)",
                           name, cached, cached_, prompt.size());
  for (int64_t id : options.stop_ids) {
    ES_CHECK_OR_RETURN_ERROR(id >= 0 && static_cast<uint64_t>(id) < bounds_.vocab_size,
                             Error::InvalidArgument,
                             "end token id %lld is outside the vocabulary of %zu of method '%s'",
                             static_cast<long long>(id), bounds_.vocab_size, name);
  }
  ES_RETURN_IF_ERROR(check_token_ids(bounds_, prompt, name));
  ES_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(options.sampling, bounds_.vocab_size));
  sampler_.emplace(std::move(sampler));
  stop_ids_ = options.stop_ids;
  max_new_tokens_ = max_new_tokens;
  // The last new token is returned without being executed, so one more than the free positions.
  room_ = bounds_.max_length + 1 - prompt.size();
  produced_ = 0;
  prefilled_ = 0;
  prefill_ms_ = 0;
  decode_ms_ = 0;
  last_ = -1;
  if (max_new_tokens == 0) {
    finish_ = FinishReason::kMaxNewTokens;
    return Status();
  }
  sampler_->reset(prompt);
  if (cached == 0) method_->reset_state();
  // What the cache holds beyond `cached` is overwritten from there on.
  cached_ = 0;
  const auto prefill_start = std::chrono::steady_clock::now();
  const Span<const int64_t> fresh(prompt.data() + cached, prompt.size() - cached);
  ES_ASSIGN_OR_RETURN(pending_, step(fresh, static_cast<int64_t>(cached)));
  prefill_ms_ = ms_since(prefill_start);
  prefilled_ = fresh.size();
  position_ = static_cast<int64_t>(prompt.size());
  cached_ = prompt.size();
  done_ = false;
  return Status();
}

Result<int64_t> Generator::next() {
  ES_CHECK_OR_RETURN_ERROR(!done_, Error::InvalidState,
                           "method '%s': no generation to continue (start() first)",
                           method_->name());
  int64_t token = pending_;
  if (produced_ > 0) {
    const auto decode_start = std::chrono::steady_clock::now();
    Result<int64_t> stepped = step(Span<const int64_t>(&last_, 1), position_);
    if (!stepped.ok()) {
      done_ = true;
      cached_ = 0;
      return stepped.status();
    }
    token = *stepped;
    decode_ms_ += ms_since(decode_start);
    ++position_;
    cached_ = static_cast<size_t>(position_);
  }
  ++produced_;
  last_ = token;
  sampler_->accept(token);
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    finish_ = FinishReason::kStopId;
  } else if (produced_ >= max_new_tokens_) {
    finish_ = FinishReason::kMaxNewTokens;
  } else if (produced_ >= room_) {
    finish_ = FinishReason::kSequenceBound;
  }
  done_ = finish_ != FinishReason::kNone;
  return token;
}

double Generator::decode_tokens_per_s() const {
  if (produced_ < 2 || decode_ms_ <= 0) return 0;
  return static_cast<double>(produced_ - 1) * 1000.0 / decode_ms_;
}

Result<Generation> Generator::generate(Span<const int64_t> prompt, size_t max_new_tokens,
                                       int64_t eos) {
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  if (eos != -1) options.stop_ids.push_back(eos);
  return generate(prompt, options);
}

Result<Generation> Generator::generate(Span<const int64_t> prompt, const GenerateOptions& options,
                                       const TokenCallback& on_token) {
  Generation out;
  ES_RETURN_IF_ERROR(start(prompt, options));
  out.tokens.reserve(std::min(options.max_new_tokens, room_));
  while (!done_) {
    ES_ASSIGN_OR_RETURN(int64_t token, next());
    out.tokens.push_back(token);
    if (on_token && !on_token(token)) stop();
  }
  out.prefill_ms = prefill_ms_;
  out.decode_tokens_per_s = decode_tokens_per_s();
  out.finish_reason = finish_;
  out.prefilled_tokens = prefilled_;
  return out;
}

}  // namespace generation
}  // namespace edgeshare
