#include "edgeshare/generation/batch_engine.h"

#include <algorithm>
#include <utility>

#include "edgeshare/runtime/core/threads.h"

namespace edgeshare {
namespace generation {

using runtime::Error;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;
using runtime::Tensor;
using runtime::Threads;
using runtime::ThreadsScope;

struct BatchEngine::Sequence {
  RequestId id = 0;
  BatchRequest request;
  std::optional<Sampler> sampler;
  std::vector<int64_t> tokens;  // the prompt, then every new token
  size_t cached = 0;            // leading tokens whose keys and values are in the slot
  size_t generated = 0;
  size_t slot = 0;
  FinishReason reason = FinishReason::kNone;
};

// One row of a step: a sequence's token at a position; `sample` when its logits are kept.
struct BatchEngine::Row {
  Sequence* sequence = nullptr;
  size_t count = 0;  // rows of this sequence in the step, this one the first
  bool sample = false;
};

// Each sampling sequence's token from its row of logits. A sampler belongs to its sequence alone,
// so the rows draw at once on the method's threads: a draw scans the whole vocabulary (49152
// scores for SmolLM2), which on the calling thread alone left the other threads idle.
struct BatchEngine::Draws {
  Sequence* const* sequences;
  const float* logits;
  size_t vocab_size;
  int64_t* tokens;

  static void draw(void* context, size_t i) {
    const Draws& d = *static_cast<const Draws*>(context);
    d.tokens[i] = d.sequences[i]->sampler->sample(d.logits + i * d.vocab_size);
  }
};

namespace {

constexpr size_t kInputs = 5;

Status check_signature(const runtime::Method& method) {
  const char* name = method.name();
  ES_CHECK_OR_RETURN_ERROR(method.num_inputs() == kInputs && method.num_outputs() == 1,
                           Error::InvalidArgument,
                           "method '%s' is not a batch method (input_ids, positions, slots, "
                           "adapters, logit_rows -> logits)",
                           name);
  for (size_t i = 1; i < kInputs; ++i) {
    Result<Tensor> input = method.input(i);
    ES_CHECK_OR_RETURN_ERROR(
        input.ok() && input->scalar_type() == ScalarType::Long && input->dim() == 1,
        Error::InvalidArgument, "method '%s': input %zu is not an int64 vector as a batch method's",
        name, i);
  }
  return Status();
}

}  // namespace

BatchEngine::BatchEngine(runtime::Method* method, AdapterTables* tables, const BatchLimits& limits,
                         const Options& options, size_t max_rows, size_t vocab_size)
    : method_(method),
      tables_(tables),
      limits_(limits),
      options_(options),
      max_rows_(max_rows),
      vocab_size_(vocab_size),
      slots_(limits.slots),
      adapter_users_(limits.adapter_slots, 0),
      adapter_loaded_(limits.adapter_slots, 0),
      adapter_unloading_(limits.adapter_slots, 0) {
  for (size_t k = 0; k < limits.loaded_adapters && k < limits.adapter_slots; ++k) {
    adapter_loaded_[k] = 1;
  }
  bounds_.max_length = limits.max_seq_len;
  bounds_.vocab_size = vocab_size;
  rows_.reserve(max_rows);
  sampling_.reserve(max_rows);
  tokens_.reserve(max_rows);
  ended_.reserve(limits.slots + options.max_queue);
  decoding_.reserve(limits.slots);
  prefilling_.reserve(limits.slots);
  for (std::vector<int64_t>* v : {&ids_, &positions_, &row_slots_, &adapters_, &logit_rows_}) {
    v->reserve(max_rows);
  }
}

BatchEngine::~BatchEngine() = default;

Result<std::unique_ptr<BatchEngine>> BatchEngine::create(runtime::Method* method,
                                                         const BatchLimits& limits,
                                                         const Options& options,
                                                         AdapterTables* tables) {
  ES_CHECK_OR_RETURN_ERROR(method != nullptr, Error::InvalidArgument, "BatchEngine: null method");
  ES_CHECK_OR_RETURN_ERROR(limits.slots > 0 && limits.max_seq_len > 1 && limits.adapter_slots > 0,
                           Error::InvalidArgument,
                           "BatchEngine: slots, max_seq_len and adapter_slots must be positive "
                           "(got %zu, %zu, %zu)",
                           limits.slots, limits.max_seq_len, limits.adapter_slots);
  Result<TokenBounds> bounds = token_bounds(*method);
  if (!bounds.ok()) return Status::Format(Error::InvalidArgument, "%s", bounds.status().message());
  ES_RETURN_IF_ERROR(check_signature(*method));
  ES_CHECK_OR_RETURN_ERROR(limits.loaded_adapters <= limits.adapter_slots, Error::InvalidArgument,
                           "BatchEngine: %zu loaded adapters do not fit %zu adapter slots",
                           limits.loaded_adapters, limits.adapter_slots);
  ES_CHECK_OR_RETURN_ERROR(tables == nullptr || tables->slots() == limits.adapter_slots,
                           Error::InvalidArgument,
                           "BatchEngine: the tables have %zu adapter slots, the limits %zu",
                           tables == nullptr ? 0 : tables->slots(), limits.adapter_slots);
  return std::unique_ptr<BatchEngine>(
      new BatchEngine(method, tables, limits, options, bounds->max_length, bounds->vocab_size));
}

Result<RequestId> BatchEngine::submit(BatchRequest request) {
  const char* name = method_->name();
  const std::vector<int64_t>& prompt = request.prompt;
  ES_CHECK_OR_RETURN_ERROR(!prompt.empty(), Error::InvalidArgument, "the prompt is empty");
  ES_CHECK_OR_RETURN_ERROR(prompt.size() < limits_.max_seq_len, Error::InvalidArgument,
                           "a prompt of %zu tokens leaves no room in a sequence of %zu positions",
                           prompt.size(), limits_.max_seq_len);
  ES_RETURN_IF_ERROR(
      check_token_ids(bounds_, Span<const int64_t>(prompt.data(), prompt.size()), name));
  const std::vector<int64_t>& stops = request.options.stop_ids;
  ES_RETURN_IF_ERROR(
      check_token_ids(bounds_, Span<const int64_t>(stops.data(), stops.size()), name));
  ES_CHECK_OR_RETURN_ERROR(
      request.adapter >= -1 && request.adapter < static_cast<int64_t>(limits_.adapter_slots),
      Error::InvalidArgument, "adapter slot %lld is outside -1..%zu",
      static_cast<long long>(request.adapter), limits_.adapter_slots - 1);
  ES_CHECK_OR_RETURN_ERROR(request.options.max_new_tokens > 0, Error::InvalidArgument,
                           "max_new_tokens must be at least 1");
  ES_CHECK_OR_RETURN_ERROR(request.options.cached_tokens == 0, Error::InvalidArgument,
                           "a batch request starts with an empty cache (cached_tokens 0)");
  ES_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(request.options.sampling, vocab_size_));
  auto sequence = std::make_unique<Sequence>();
  sequence->sampler.emplace(std::move(sampler));
  sequence->sampler->reset(Span<const int64_t>(prompt.data(), prompt.size()));
  sequence->tokens = prompt;
  sequence->tokens.reserve(
      std::min(limits_.max_seq_len, prompt.size() + request.options.max_new_tokens));
  sequence->request = std::move(request);
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t adapter = sequence->request.adapter;
  ES_CHECK_OR_RETURN_ERROR(
      adapter < 0 || (adapter_loaded_[adapter] && !adapter_unloading_[adapter]),
      Error::InvalidArgument, "adapter slot %lld holds no adapter%s",
      static_cast<long long>(adapter),
      adapter >= 0 && adapter_unloading_[adapter] ? " (it is being unloaded)" : "");
  ES_CHECK_OR_RETURN_ERROR(queue_.size() < options_.max_queue, Error::ResourceExhausted,
                           "the queue is full (%zu requests wait for a slot)", queue_.size());
  if (adapter >= 0) ++adapter_users_[adapter];
  sequence->id = next_id_++;
  const RequestId id = sequence->id;
  queue_.push_back(std::move(sequence));
  return id;
}

Status BatchEngine::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool known =
      std::any_of(queue_.begin(), queue_.end(), [id](const auto& s) { return s->id == id; }) ||
      std::any_of(slots_.begin(), slots_.end(), [id](const auto& s) { return s && s->id == id; });
  ES_CHECK_OR_RETURN_ERROR(known, Error::NotFound, "no request %llu is queued or running",
                           static_cast<unsigned long long>(id));
  if (std::find(cancelled_.begin(), cancelled_.end(), id) == cancelled_.end()) {
    cancelled_.push_back(id);
  }
  return Status();
}

void BatchEngine::release_adapter_locked(int64_t adapter) {
  if (adapter < 0 || --adapter_users_[adapter] > 0 || !adapter_unloading_[adapter]) return;
  if (tables_ != nullptr) (void)tables_->clear(static_cast<size_t>(adapter));
  adapter_unloading_[adapter] = 0;
  adapter_loaded_[adapter] = 0;
}

Status BatchEngine::load_adapter(size_t slot, const runtime::DataFile& adapter) {
  ES_CHECK_OR_RETURN_ERROR(tables_ != nullptr, Error::InvalidState,
                           "this engine was made without adapter tables: its adapters are fixed");
  std::lock_guard<std::mutex> lock(mutex_);
  ES_CHECK_OR_RETURN_ERROR(slot < limits_.adapter_slots, Error::OutOfRange,
                           "adapter slot %zu is outside 0..%zu", slot, limits_.adapter_slots - 1);
  ES_CHECK_OR_RETURN_ERROR(adapter_users_[slot] == 0, Error::InvalidState,
                           "adapter slot %zu is in use by %zu requests", slot,
                           adapter_users_[slot]);
  ES_RETURN_IF_ERROR(tables_->load(slot, adapter));
  adapter_loaded_[slot] = 1;
  adapter_unloading_[slot] = 0;
  return Status();
}

Status BatchEngine::unload_adapter(size_t slot) {
  ES_CHECK_OR_RETURN_ERROR(tables_ != nullptr, Error::InvalidState,
                           "this engine was made without adapter tables: its adapters are fixed");
  std::lock_guard<std::mutex> lock(mutex_);
  ES_CHECK_OR_RETURN_ERROR(slot < limits_.adapter_slots, Error::OutOfRange,
                           "adapter slot %zu is outside 0..%zu", slot, limits_.adapter_slots - 1);
  ES_CHECK_OR_RETURN_ERROR(adapter_loaded_[slot] && !adapter_unloading_[slot], Error::InvalidState,
                           "adapter slot %zu holds no adapter", slot);
  adapter_unloading_[slot] = 1;
  ++adapter_users_[slot];
  release_adapter_locked(static_cast<int64_t>(slot));
  return Status();
}

bool BatchEngine::adapter_loaded(size_t slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slot < adapter_loaded_.size() && adapter_loaded_[slot] && !adapter_unloading_[slot];
}

bool BatchEngine::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !queue_.empty() ||
         std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; });
}

size_t BatchEngine::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; }));
}

size_t BatchEngine::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void BatchEngine::finish(Sequence& sequence, FinishReason reason, const Status& status) {
  if (sequence.request.on_finish) sequence.request.on_finish(reason, status);
}

void BatchEngine::admit_locked(std::vector<std::unique_ptr<Sequence>>* ended) {
  for (RequestId id : cancelled_) {
    for (auto& s : slots_) {
      if (s && s->id == id) {
        s->reason = FinishReason::kCaller;
        ended->push_back(std::move(s));
      }
    }
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if ((*it)->id == id) {
        (*it)->reason = FinishReason::kCaller;
        ended->push_back(std::move(*it));
        queue_.erase(it);
        break;
      }
    }
  }
  cancelled_.clear();
  for (size_t slot = 0; slot < slots_.size() && !queue_.empty(); ++slot) {
    if (slots_[slot]) continue;
    slots_[slot] = std::move(queue_.front());
    queue_.pop_front();
    slots_[slot]->slot = slot;
  }
}

Status BatchEngine::execute_rows(size_t rows, size_t kept) {
  const auto n = static_cast<int32_t>(rows);
  ES_RETURN_IF_ERROR(method_->set_input(0, Tensor(ScalarType::Long, {1, n}, ids_.data())));
  ES_RETURN_IF_ERROR(method_->set_input(1, Tensor(ScalarType::Long, {n}, positions_.data())));
  ES_RETURN_IF_ERROR(method_->set_input(2, Tensor(ScalarType::Long, {n}, row_slots_.data())));
  ES_RETURN_IF_ERROR(method_->set_input(3, Tensor(ScalarType::Long, {n}, adapters_.data())));
  ES_RETURN_IF_ERROR(method_->set_input(
      4, Tensor(ScalarType::Long, {static_cast<int32_t>(kept)}, logit_rows_.data())));
  return method_->execute();
}

Result<size_t> BatchEngine::step() {
  std::vector<std::unique_ptr<Sequence>>& ended = ended_;
  std::vector<Sequence*>& decoding = decoding_;
  std::vector<Sequence*>& prefilling = prefilling_;
  ended.clear();
  decoding.clear();
  prefilling.clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    admit_locked(&ended);
    for (auto& s : ended) release_adapter_locked(s->request.adapter);
    for (auto& s : slots_) {
      if (s) (s->cached + 1 == s->tokens.size() ? decoding : prefilling).push_back(s.get());
    }
  }
  for (auto& s : ended) finish(*s, s->reason, Status());
  ended.clear();

  // Decode rows first (one per sequence with all but its last token cached), grouped by adapter;
  // then prefill chunks in admission order.
  rows_.clear();
  std::stable_sort(decoding.begin(), decoding.end(), [](const Sequence* a, const Sequence* b) {
    return a->request.adapter < b->request.adapter;
  });
  std::sort(prefilling.begin(), prefilling.end(),
            [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
  const size_t chunk = options_.prefill_chunk > 0 ? options_.prefill_chunk : max_rows_;
  ids_.clear();
  positions_.clear();
  row_slots_.clear();
  adapters_.clear();
  logit_rows_.clear();
  auto add = [&](Sequence* s, size_t count) {
    for (size_t k = 0; k < count; ++k) {
      const size_t position = s->cached + k;
      ids_.push_back(s->tokens[position]);
      positions_.push_back(static_cast<int64_t>(position));
      row_slots_.push_back(static_cast<int64_t>(s->slot));
      adapters_.push_back(s->request.adapter);
    }
    Row row;
    row.sequence = s;
    row.count = count;
    row.sample = s->cached + count == s->tokens.size();
    if (row.sample) logit_rows_.push_back(static_cast<int64_t>(ids_.size() - 1));
    rows_.push_back(row);
  };
  for (Sequence* s : decoding) {
    if (ids_.size() < max_rows_) add(s, 1);
  }
  for (Sequence* s : prefilling) {
    const size_t room = max_rows_ - ids_.size();
    if (room == 0) break;
    add(s, std::min({s->tokens.size() - s->cached, chunk, room}));
  }
  if (ids_.empty()) return size_t{0};
  const size_t rows = ids_.size();
  const size_t sampled = logit_rows_.size();
  // A step of prefill chunks only samples nothing, but the method returns at least one row.
  if (sampled == 0) logit_rows_.push_back(static_cast<int64_t>(rows - 1));

  const Status status = execute_rows(rows, logit_rows_.size());
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Row& row : rows_) {
      release_adapter_locked(row.sequence->request.adapter);
      ended.push_back(std::move(slots_[row.sequence->slot]));
    }
  } else {
    ES_ASSIGN_OR_RETURN(Tensor logits, method_->output(0));
    ES_CHECK_OR_RETURN_ERROR(
        logits.dim() == 3 && static_cast<size_t>(logits.size(1)) == logit_rows_.size() &&
            static_cast<size_t>(logits.size(2)) == vocab_size_,
        Error::InvalidProgram, "method '%s' returned logits of another shape", method_->name());
    sampling_.clear();
    for (const Row& row : rows_) {
      if (row.sample) sampling_.push_back(row.sequence);
    }
    tokens_.resize(sampling_.size());
    Draws draws{sampling_.data(), logits.data<float>(), vocab_size_, tokens_.data()};
    {
      const Threads* threads = method_->threads();
      const ThreadsScope scope(threads != nullptr ? threads : runtime::current_threads());
      runtime::parallel_for(sampling_.size(), &Draws::draw, &draws);
    }
    size_t kept = 0;
    for (const Row& row : rows_) {
      Sequence& s = *row.sequence;
      s.cached += row.count;
      if (!row.sample) continue;
      const int64_t token = tokens_[kept++];
      s.sampler->accept(token);
      s.tokens.push_back(token);
      ++s.generated;
      const std::vector<int64_t>& stops = s.request.options.stop_ids;
      const bool go_on = !s.request.on_token || s.request.on_token(token);
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        s.reason = FinishReason::kStopId;
      } else if (s.generated >= s.request.options.max_new_tokens) {
        s.reason = FinishReason::kMaxNewTokens;
      } else if (s.tokens.size() >= limits_.max_seq_len) {
        s.reason = FinishReason::kSequenceBound;
      } else if (!go_on) {
        s.reason = FinishReason::kCaller;
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Row& row : rows_) {
      if (row.sequence->reason != FinishReason::kNone) {
        release_adapter_locked(row.sequence->request.adapter);
        ended.push_back(std::move(slots_[row.sequence->slot]));
      }
    }
  }
  for (auto& s : ended) finish(*s, s->reason, status);
  if (!status.ok()) return status;
  return rows;
}

}  // namespace generation
}  // namespace edgeshare
