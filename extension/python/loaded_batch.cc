#include "edgeshare/extension/python/loaded_batch.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

namespace edgeshare {
namespace python {

using generation::AdapterTables;
using generation::BatchEngine;
using generation::BatchRequest;
using generation::FinishReason;
using runtime::DataFile;
using runtime::Error;
using runtime::Result;
using runtime::Status;

namespace {

Status read_manifest(const std::string& folder, generation::BatchLimits* limits,
                     std::vector<std::string>* adapters) {
  const std::string path = folder + "/batch.json";
  std::ifstream file(path);
  ES_CHECK_OR_RETURN_ERROR(file.is_open(), Error::AccessFailed,
                           "cannot open %s (a folder export_lora --batch-slots wrote?)",
                           path.c_str());
  const nlohmann::json json = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  const auto count = [&](const char* key) -> size_t {
    const auto it = json.is_object() ? json.find(key) : json.end();
    return it != json.end() && it->is_number_unsigned() ? it->get<size_t>() : 0;
  };
  limits->slots = count("slots");
  limits->max_seq_len = count("max_seq_len");
  limits->adapter_slots = count("adapter_slots");
  const auto names = json.is_object() ? json.find("adapters") : json.end();
  const bool ok = limits->slots > 0 && limits->max_seq_len > 0 && limits->adapter_slots > 0 &&
                  names != json.end() && names->is_array();
  ES_CHECK_OR_RETURN_ERROR(
      ok, Error::InvalidData,
      "%s is not a batch manifest (slots, max_seq_len, adapter_slots, adapters)", path.c_str());
  for (const auto& name : *names) {
    ES_CHECK_OR_RETURN_ERROR(name.is_string(), Error::InvalidData,
                             "%s: an adapter name is not a string", path.c_str());
    adapters->push_back(name.get<std::string>());
  }
  limits->loaded_adapters = adapters->size();
  return Status();
}

}  // namespace

Result<std::shared_ptr<LoadedBatch>> LoadedBatch::open(const std::string& folder,
                                                       const BatchOpenOptions& options) {
  std::shared_ptr<LoadedBatch> batch(new LoadedBatch());
  ES_RETURN_IF_ERROR(read_manifest(folder, &batch->limits_, &batch->adapters_));
  ES_ASSIGN_OR_RETURN(runtime::Threads threads, runtime::Threads::create(options.threads));
  batch->threads_ = std::make_unique<runtime::Threads>(std::move(threads));
  ES_ASSIGN_OR_RETURN(batch->foundation_, DataFile::open((folder + "/foundation.ptd").c_str()));
  {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> initial,
                        DataFile::open((folder + "/batch_tables.ptd").c_str()));
    ES_ASSIGN_OR_RETURN(batch->tables_,
                        AdapterTables::create(initial->map(), &batch->foundation_->identity()));
  }
  ES_ASSIGN_OR_RETURN(
      runtime::MergedDataMap data,
      runtime::MergedDataMap::create({&batch->foundation_->map(), batch->tables_.get()}));
  batch->data_ = std::make_unique<runtime::MergedDataMap>(std::move(data));
  const std::string program = folder + "/batch.pte";
  ES_ASSIGN_OR_RETURN(runtime::MmapDataLoader loader,
                      runtime::MmapDataLoader::from(program.c_str()));
  batch->loader_ = std::make_unique<runtime::MmapDataLoader>(std::move(loader));
  ES_ASSIGN_OR_RETURN(runtime::Program loaded, runtime::Program::load(batch->loader_.get()));
  batch->program_ = std::make_unique<runtime::Program>(std::move(loaded));
  ES_ASSIGN_OR_RETURN(
      runtime::Method method,
      batch->program_->load_method("forward_batch", batch->data_.get(), batch->threads_.get()));
  batch->method_ = std::make_unique<runtime::Method>(std::move(method));
  BatchEngine::Options engine_options;
  engine_options.max_queue = options.max_queue;
  engine_options.prefill_chunk = options.prefill_chunk;
  ES_ASSIGN_OR_RETURN(batch->engine_, BatchEngine::create(batch->method_.get(), batch->limits_,
                                                          engine_options, batch->tables_.get()));
  batch->driver_ = std::thread([raw = batch.get()] { raw->drive(); });
  return batch;
}

LoadedBatch::~LoadedBatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  if (driver_.joinable()) driver_.join();
}

void LoadedBatch::drive() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [this] { return stop_ || engine_->busy(); });
      if (stop_) return;
    }
    // A failed step ends the requests it ran with its error (their streams say so); the others
    // go on in the next step.
    (void)engine_->step();
  }
}

Result<uint64_t> LoadedBatch::submit(std::vector<int64_t> prompt, int64_t adapter,
                                     const generation::GenerateOptions& options) {
  auto stream = std::make_shared<Stream>();
  BatchRequest request;
  request.prompt = std::move(prompt);
  request.adapter = adapter;
  request.options = options;
  request.on_token = [this, stream](int64_t token) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stream->tokens.push_back(token);
      mark_changed_locked(*stream);
    }
    progress_.notify_all();
    return true;
  };
  request.on_finish = [this, stream](FinishReason reason, const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stream->done = true;
      stream->reason = reason;
      stream->status = status;
      mark_changed_locked(*stream);
    }
    progress_.notify_all();
  };
  ES_ASSIGN_OR_RETURN(uint64_t id, engine_->submit(std::move(request)));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    streams_[id] = stream;
    stream->id = id;
    stream->has_id = true;
    // Tokens the driver made before the id was known.
    mark_changed_locked(*stream);
  }
  work_.notify_all();
  return id;
}

void LoadedBatch::mark_changed_locked(Stream& stream) {
  if (!stream.has_id || stream.changed || (stream.tokens.empty() && !stream.done)) return;
  stream.changed = true;
  changed_.push_back(stream.id);
}

std::vector<uint64_t> LoadedBatch::wait_changed(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  progress_.wait_for(lock, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms),
                     [this] { return !changed_.empty() || stop_; });
  std::vector<uint64_t> ids;
  ids.swap(changed_);
  return ids;
}

Result<std::vector<int64_t>> LoadedBatch::take(uint64_t id, bool* ended) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = streams_.find(id);
  ES_CHECK_OR_RETURN_ERROR(it != streams_.end(), Error::NotFound, "no request %llu",
                           static_cast<unsigned long long>(id));
  Stream& stream = *it->second;
  stream.changed = false;
  std::vector<int64_t> tokens(stream.tokens.begin(), stream.tokens.end());
  stream.tokens.clear();
  *ended = stream.done;
  if (stream.done && !stream.status.ok()) {
    if (tokens.empty()) return stream.status;
    // The tokens first; the error on the next take.
    *ended = false;
    stream.changed = true;
    changed_.push_back(id);
  }
  return tokens;
}

Result<int64_t> LoadedBatch::next(uint64_t id) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto it = streams_.find(id);
  ES_CHECK_OR_RETURN_ERROR(it != streams_.end(), Error::NotFound, "no request %llu",
                           static_cast<unsigned long long>(id));
  const std::shared_ptr<Stream> stream = it->second;
  progress_.wait(lock, [&] { return !stream->tokens.empty() || stream->done; });
  if (!stream->tokens.empty()) {
    const int64_t token = stream->tokens.front();
    stream->tokens.pop_front();
    return token;
  }
  if (!stream->status.ok()) return stream->status;
  return int64_t{-1};
}

const char* LoadedBatch::finish_reason(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = streams_.find(id);
  if (it == streams_.end() || !it->second->done) return "";
  return generation::finish_reason_name(it->second->reason);
}

Status LoadedBatch::cancel(uint64_t id) { return engine_->cancel(id); }

void LoadedBatch::release(uint64_t id) {
  (void)engine_->cancel(id);
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.erase(id);
}

Status LoadedBatch::load_adapter(size_t slot, const std::string& path) {
  ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
  return engine_->load_adapter(slot, *file);
}

Status LoadedBatch::unload_adapter(size_t slot) { return engine_->unload_adapter(slot); }

}  // namespace python
}  // namespace edgeshare
