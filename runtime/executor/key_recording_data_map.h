// KeyRecordingDataMap: a NamedDataMap that forwards to another and remembers which keys were
// asked for. Method gives it to its delegates at load, so Method::rebind_data can refuse to swap a
// constant a delegate has already read (and packed): swapping it under the delegate would leave
// the old bytes in use. Executor-internal.
//
// Thread-safety: every call may come from any thread (the record is locked). Ownership: borrows the
// wrapped map, which must outlive it.

#ifndef EDGESHARE_RUNTIME_EXECUTOR_KEY_RECORDING_DATA_MAP_H_
#define EDGESHARE_RUNTIME_EXECUTOR_KEY_RECORDING_DATA_MAP_H_

#include <mutex>
#include <set>
#include <string>

#include "edgeshare/runtime/core/named_data_map.h"

namespace edgeshare {
namespace runtime {

class KeyRecordingDataMap final : public NamedDataMap {
 public:
  explicit KeyRecordingDataMap(const NamedDataMap* inner) : inner_(inner) {}

  Result<TensorLayout> get_tensor_layout(const char* key) const override {
    record(key);
    return inner_->get_tensor_layout(key);
  }
  Result<FreeableBuffer> get_data(const char* key) const override {
    record(key);
    return inner_->get_data(key);
  }
  Status load_data_into(const char* key, void* dst, size_t size) const override {
    record(key);
    return inner_->load_data_into(key, dst, size);
  }
  size_t get_num_keys() const override { return inner_->get_num_keys(); }
  Result<const char*> get_key(size_t index) const override { return inner_->get_key(index); }
  Result<Digest> get_digest(const char* key) const override {
    record(key);
    return inner_->get_digest(key);
  }
  const char* name() const override { return inner_->name(); }

  bool was_read(const char* key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return keys_.count(key) > 0;
  }

 private:
  void record(const char* key) const {
    if (key == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    keys_.insert(key);
  }

  const NamedDataMap* inner_;
  mutable std::mutex mutex_;
  mutable std::set<std::string> keys_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_EXECUTOR_KEY_RECORDING_DATA_MAP_H_
