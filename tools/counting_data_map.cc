#include "edgeshare/tools/counting_data_map.h"

namespace edgeshare {
namespace tools {

runtime::Result<runtime::FreeableBuffer> CountingDataMap::get_data(const char* key) const {
  runtime::Result<runtime::FreeableBuffer> bytes = inner_.get_data(key);
  if (bytes.ok()) count(key);
  return bytes;
}

runtime::Status CountingDataMap::load_data_into(const char* key, void* dst, size_t size) const {
  runtime::Status status = inner_.load_data_into(key, dst, size);
  if (status.ok()) count(key);
  return status;
}

std::map<std::string, size_t> CountingDataMap::fetches() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fetches_;
}

void CountingDataMap::count(const char* key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ++fetches_[key];
}

}  // namespace tools
}  // namespace edgeshare
