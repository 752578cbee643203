// BatchEngine: many generation requests at once over one batch method ("forward_batch", exported by
// exir's export_hf_batch), each request in its own KV-cache slot and on its own adapter slot (or
// none), every step one pass over the foundation for all of them (continuous batching).
//
// A request is a prompt, an adapter slot, generation options (max_new_tokens, sampling, stop ids)
// and callbacks. submit() queues it; each step() admits queued requests into free cache slots (in
// submission order), then runs one execute of at most `max_rows` rows: first one decode row per
// running sequence (sorted by adapter, so rows of one adapter are one low-rank product), then
// prefill chunks of admitted prompts in admission order, as the row budget allows. A sequence whose
// last known token ran this step samples its next token from that row's logits: the token goes to
// `on_token`, and the sequence ends at a stop id (kStopId), after max_new_tokens (kMaxNewTokens),
// when it fills its slot's max_seq_len positions (kSequenceBound), or when `on_token` returns false
// or cancel() was called (kCaller). An ended sequence frees its slot before the next step's
// admission and `on_finish` is called once with the reason. A slot is reused without clearing:
// a row at position p reads only positions 0..p, which its own sequence wrote.
//
// Each row is computed as in a single-sequence run (activations are quantized per row and
// attention reads only the row's own slot), so a sequence's tokens do not depend on what else is in
// the batch or when it joined.
//
//   BatchLimits limits{/*slots=*/8, /*max_seq_len=*/128, /*adapter_slots=*/8};   // batch.json
//   ES_ASSIGN_OR_RETURN(std::unique_ptr<BatchEngine> engine,
//                       BatchEngine::create(&method, limits, BatchEngine::Options()));
//   BatchRequest request;
//   request.prompt = ids;  request.adapter = 3;  request.options.max_new_tokens = 64;
//   request.on_token = [](int64_t token) { stream(token); return true; };
//   ES_ASSIGN_OR_RETURN(RequestId id, engine->submit(std::move(request)));
//   while (engine->busy()) ES_RETURN_IF_ERROR(engine->step().status());
//
// Errors: create: InvalidArgument when the method does not take (input_ids [1, N], positions [N],
// slots [N], adapters [N], logit_rows [M]) -> logits [1, M, vocab], or for limits of zero.
// submit: InvalidArgument for an empty prompt, a prompt of max_seq_len tokens or more (no room for
// one new token), a token or stop id outside the vocabulary, an adapter slot outside
// -1..adapter_slots-1 or holding no adapter (or being unloaded), max_new_tokens 0, cached_tokens
// set, or sampling options out of range; ResourceExhausted when `max_queue` requests are queued
// already. The request is not queued then. cancel: NotFound for an id that is not queued or
// running. step: the method's errors; the sequences that had rows in the failed step end with it
// (their on_finish gets the error), the others are untouched. Ownership: borrows the Method, which
// must outlive the engine and be executed by nothing else. Thread-safety: submit(), cancel(),
// busy() and the counts may be called from any thread at any time; step() from one thread at a
// time. Callbacks run on the thread calling step(), without the engine's lock held (they may submit
// or cancel). Memory: per slot a Sampler (allocated at admission) and the tokens of its sequence;
// the rows' inputs are allocated once by create(), so a step allocates nothing but a sequence's
// token growth.

#ifndef EDGESHARE_GENERATION_BATCH_ENGINE_H_
#define EDGESHARE_GENERATION_BATCH_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "edgeshare/generation/adapter_tables.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/generation/sampler.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/executor/method.h"

namespace edgeshare {
namespace generation {

// What the batch program holds (batch.json's "slots", "max_seq_len", "adapter_slots", and how
// many of its "adapters" fill the first adapter slots of its tables).
struct BatchLimits {
  size_t slots = 0;
  size_t max_seq_len = 0;
  size_t adapter_slots = 0;
  size_t loaded_adapters = 0;
};

using RequestId = uint64_t;

struct BatchRequest {
  std::vector<int64_t> prompt;
  int64_t adapter = -1;     // an adapter slot, or -1 for the bare foundation
  GenerateOptions options;  // max_new_tokens >= 1; cached_tokens must be 0
  TokenCallback on_token;   // each new token; false ends the sequence after it (kCaller)
  // Once, when the request ends: its reason and OK, or the step's error (reason kNone).
  std::function<void(FinishReason, const runtime::Status&)> on_finish;
};

class BatchEngine {
 public:
  struct Options {
    size_t max_queue = 64;  // requests waiting for a slot
    // Most prompt rows one sequence runs in a step (0: the method's row bound): bounds how long a
    // long prompt's prefill holds the running sequences' next decode step.
    size_t prefill_chunk = 0;
  };

  // `tables` (may be null: the adapters stay as loaded) is the map `method` was loaded over, for
  // load_adapter and unload_adapter; it must outlive the engine.
  static runtime::Result<std::unique_ptr<BatchEngine>> create(runtime::Method* method,
                                                              const BatchLimits& limits,
                                                              const Options& options,
                                                              AdapterTables* tables = nullptr);

  runtime::Result<RequestId> submit(BatchRequest request);
  runtime::Status cancel(RequestId id);

  // Puts an adapter file into an adapter slot that no queued or running request uses (replacing
  // what it held), while other requests run. Errors: InvalidState without tables, or when
  // requests use the slot; OutOfRange; AdapterTables::load's (then the slot is as before).
  runtime::Status load_adapter(size_t slot, const runtime::DataFile& adapter);
  // Empties an adapter slot: at once when no request uses it, else when its last request ends;
  // from now on requests on it are refused. Errors: InvalidState without tables or for a slot
  // that holds no adapter; OutOfRange.
  runtime::Status unload_adapter(size_t slot);
  // Whether a request may name the slot now (it holds an adapter that is not being unloaded).
  bool adapter_loaded(size_t slot) const;

  // One step; returns the rows it ran (0: nothing queued or running).
  runtime::Result<size_t> step();

  bool busy() const;
  size_t running() const;
  size_t queued() const;
  size_t max_rows() const { return max_rows_; }
  size_t vocab_size() const { return vocab_size_; }

  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

 private:
  struct Sequence;
  struct Row;
  struct Draws;
  BatchEngine(runtime::Method* method, AdapterTables* tables, const BatchLimits& limits,
              const Options& options, size_t max_rows, size_t vocab_size);
  // Under the lock: ends cancelled sequences (into `ended`), admits queued requests into free
  // slots.
  void admit_locked(std::vector<std::unique_ptr<Sequence>>* ended);
  runtime::Status execute_rows(size_t rows, size_t kept);
  static void finish(Sequence& sequence, FinishReason reason, const runtime::Status& status);

  // Under the lock: a request on `adapter` ended; an unloading slot empties with its last user.
  void release_adapter_locked(int64_t adapter);

  runtime::Method* method_;
  AdapterTables* tables_;
  BatchLimits limits_;
  Options options_;
  size_t max_rows_;
  size_t vocab_size_;
  TokenBounds bounds_;

  mutable std::mutex mutex_;
  RequestId next_id_ = 1;
  std::deque<std::unique_ptr<Sequence>> queue_;
  std::vector<std::unique_ptr<Sequence>> slots_;  // per cache slot: its sequence or null
  std::vector<RequestId> cancelled_;
  // Per adapter slot: requests queued or running on it, whether it holds an adapter, and whether
  // it empties when they end.
  std::vector<size_t> adapter_users_;
  std::vector<uint8_t> adapter_loaded_, adapter_unloading_;

  // The rows of a step and its sequences, reused (step() runs on one thread at a time).
  std::vector<Row> rows_;
  std::vector<std::unique_ptr<Sequence>> ended_;
  std::vector<Sequence*> decoding_, prefilling_;
  std::vector<int64_t> ids_, positions_, row_slots_, adapters_, logit_rows_;
  // The sequences that sample this step, in row order, and their tokens.
  std::vector<Sequence*> sampling_;
  std::vector<int64_t> tokens_;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_BATCH_ENGINE_H_
