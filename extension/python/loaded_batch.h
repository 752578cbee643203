// LoadedBatch: a batch export (export_lora --batch-slots) opened as one running BatchEngine for a
// language binding: its forward_batch loaded over foundation.ptd and adapter tables it owns, a
// driver thread that steps the engine whenever requests are queued or running, and per request a
// stream of tokens the binding waits on without holding its interpreter.
//
// This is the binding's runtime half, kept free of pybind11 (as loaded_program.h): it returns
// Result/Status, the pybind11 half converts and raises.
//
//   ES_ASSIGN_OR_RETURN(std::shared_ptr<LoadedBatch> batch, LoadedBatch::open("out", options));
//   ES_ASSIGN_OR_RETURN(uint64_t id, batch->submit(prompt, /*adapter=*/1, generate_options));
//   for (;;) { ES_ASSIGN_OR_RETURN(int64_t token, batch->next(id)); if (token < 0) break; ... }
//
// Errors: open: AccessFailed / InvalidData for a folder without a readable batch.json, and the
// errors of DataFile::open, AdapterTables::create, Program::load, load_method and
// BatchEngine::create (each naming the file). submit, cancel, load_adapter, unload_adapter: the
// engine's (load_adapter also DataFile::open's). next: NotFound for an unknown id; a request
// ended by a failed step returns that step's error.
// Thread-safety: every method from any thread. next(id) for one id from one thread at a time.
// Ownership: owns the engine, the method, its program, loader, tables and data files, and the
// driver thread, which the destructor stops and joins (pending requests end, kCaller).

#ifndef EDGESHARE_EXTENSION_PYTHON_LOADED_BATCH_H_
#define EDGESHARE_EXTENSION_PYTHON_LOADED_BATCH_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edgeshare/generation/adapter_tables.h"
#include "edgeshare/generation/batch_engine.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace python {

struct BatchOpenOptions {
  size_t threads = 1;
  size_t max_queue = 64;
  size_t prefill_chunk = 0;
};

class LoadedBatch {
 public:
  static runtime::Result<std::shared_ptr<LoadedBatch>> open(const std::string& folder,
                                                            const BatchOpenOptions& options);
  ~LoadedBatch();
  LoadedBatch(const LoadedBatch&) = delete;
  LoadedBatch& operator=(const LoadedBatch&) = delete;

  // The adapters batch.json lists, in slot order (slot i holds adapters()[i] at open).
  const std::vector<std::string>& adapters() const { return adapters_; }
  const generation::BatchLimits& limits() const { return limits_; }
  size_t vocab_size() const { return engine_->vocab_size(); }

  runtime::Result<uint64_t> submit(std::vector<int64_t> prompt, int64_t adapter,
                                   const generation::GenerateOptions& options);
  // The request's next token; -1 once it ended (its finish reason then in finish_reason()).
  // Blocks while the request runs and has no new token.
  runtime::Result<int64_t> next(uint64_t id);
  // For one consumer that serves every request (a server's event loop, through one thread): the
  // requests that have new tokens or ended since they were last taken, waiting up to timeout_ms
  // for one (then empty). Each id comes once until take() empties it.
  std::vector<uint64_t> wait_changed(int64_t timeout_ms);
  // Every token the request has made since it was last read (next() or take()), and whether it
  // ended; a request that a failed step ended returns that step's error once its tokens are
  // taken. NotFound for an unknown or released id. Never blocks.
  runtime::Result<std::vector<int64_t>> take(uint64_t id, bool* ended);
  // The reason the request ended ("stop", "length", or "" while it runs or is unknown).
  const char* finish_reason(uint64_t id);
  runtime::Status cancel(uint64_t id);
  // Forgets the request: cancels it if it still runs and drops its unread tokens.
  void release(uint64_t id);
  runtime::Status load_adapter(size_t slot, const std::string& path);
  runtime::Status unload_adapter(size_t slot);
  bool adapter_loaded(size_t slot) const { return engine_->adapter_loaded(slot); }

 private:
  struct Stream {
    std::deque<int64_t> tokens;
    uint64_t id = 0;
    bool has_id = false;   // set once submit() knows the engine's id
    bool changed = false;  // listed in changed_ until take()
    bool done = false;
    generation::FinishReason reason = generation::FinishReason::kNone;
    runtime::Status status;
  };
  LoadedBatch() = default;
  void drive();
  // Under mutex_: lists the stream in changed_ (once) if it has something to take.
  void mark_changed_locked(Stream& stream);

  // Destroyed bottom-up: the driver first (the destructor joins it), then the engine, the method
  // and what it borrows.
  std::vector<std::string> adapters_;
  generation::BatchLimits limits_;
  std::unique_ptr<runtime::Threads> threads_;
  std::shared_ptr<const runtime::DataFile> foundation_;
  std::unique_ptr<generation::AdapterTables> tables_;
  std::unique_ptr<runtime::MergedDataMap> data_;
  std::unique_ptr<runtime::MmapDataLoader> loader_;
  std::unique_ptr<runtime::Program> program_;
  std::unique_ptr<runtime::Method> method_;
  std::unique_ptr<generation::BatchEngine> engine_;

  std::mutex mutex_;                  // Guards streams_, changed_ and stop_.
  std::condition_variable work_;      // The driver waits here for requests.
  std::condition_variable progress_;  // next() and wait_changed() wait here for tokens.
  std::map<uint64_t, std::shared_ptr<Stream>> streams_;
  std::vector<uint64_t> changed_;  // ids with tokens or an end not taken yet
  bool stop_ = false;
  std::thread driver_;
};

}  // namespace python
}  // namespace edgeshare

#endif  // EDGESHARE_EXTENSION_PYTHON_LOADED_BATCH_H_
