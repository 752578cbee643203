#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"

#include <cstring>

#include "edgeshare/runtime/core/sha256.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Digest;
using runtime::Error;
using runtime::FreeableBuffer;
using runtime::Result;
using runtime::Status;

Digest InMemoryDataMap::digest_of(const std::vector<float>& values) {
  // The real SHA-256 of the bytes get_data() hands out, as an exporter records it: the weights
  // cache hashes fetched bytes and compares.
  return *runtime::sha256(values.data(), values.size() * sizeof(float));
}

Digest InMemoryDataMap::add(const std::string& key, const std::vector<float>& values) {
  return add(key, values, digest_of(values));
}

Digest InMemoryDataMap::add(const std::string& key, const std::vector<float>& values,
                            const Digest& digest) {
  Entry& e = entries_[key];
  e.values = values;
  e.sizes = {static_cast<int32_t>(values.size())};
  e.digest = digest;
  return digest;
}

void InMemoryDataMap::count_call(const char* key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  calls_[key] += 1;
}

size_t InMemoryDataMap::calls(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = calls_.find(key);
  return it == calls_.end() ? 0 : it->second;
}

Result<runtime::TensorLayout> InMemoryDataMap::get_tensor_layout(const char* key) const {
  count_call(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Format(Error::NotFound, "key '%s' missing", key);
  runtime::TensorLayout layout;
  layout.sizes = runtime::Span<const int32_t>(it->second.sizes.data(), it->second.sizes.size());
  return layout;
}

void InMemoryDataMap::free_copy(void* context, const void* data, size_t size) {
  InMemoryDataMap* self = static_cast<InMemoryDataMap*>(context);
  delete[] static_cast<const uint8_t*>(data);
  std::lock_guard<std::mutex> lock(self->mutex_);
  self->frees_ += 1;
}

void InMemoryDataMap::free_view(void* context, const void* /*data*/, size_t /*size*/) {
  InMemoryDataMap* self = static_cast<InMemoryDataMap*>(context);
  std::lock_guard<std::mutex> lock(self->mutex_);
  self->frees_ += 1;
}

Result<FreeableBuffer> InMemoryDataMap::get_data(const char* key) const {
  count_call(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return Status::Format(Error::NotFound, "key '%s' missing in %s", key, name_.c_str());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    get_data_calls_[key] += 1;
  }
  const size_t n = it->second.values.size() * sizeof(float);
  auto* self = const_cast<InMemoryDataMap*>(this);
  if (buffers_ == Buffers::kViews) {
    return FreeableBuffer(it->second.values.data(), n, &InMemoryDataMap::free_view, self);
  }
  uint8_t* copy = new uint8_t[n > 0 ? n : 1];
  std::memcpy(copy, it->second.values.data(), n);
  return FreeableBuffer(copy, n, &InMemoryDataMap::free_copy, self);
}

Status InMemoryDataMap::load_data_into(const char* key, void* dst, size_t size) const {
  count_call(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Format(Error::NotFound, "key '%s' missing", key);
  const size_t n = it->second.values.size() * sizeof(float);
  if (size < n) return Status::Format(Error::InvalidArgument, "buffer too small for '%s'", key);
  std::memcpy(dst, it->second.values.data(), n);
  return Status();
}

size_t InMemoryDataMap::get_num_keys() const { return entries_.size(); }

Result<const char*> InMemoryDataMap::get_key(size_t index) const {
  if (index >= entries_.size()) return Status::Format(Error::OutOfRange, "no key %zu", index);
  auto it = entries_.begin();
  std::advance(it, index);
  return it->first.c_str();
}

Result<Digest> InMemoryDataMap::get_digest(const char* key) const {
  count_call(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return Status::Format(Error::NotFound, "key '%s' missing in %s", key, name_.c_str());
  }
  return it->second.digest;
}

size_t InMemoryDataMap::get_data_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& c : get_data_calls_) total += c.second;
  return total;
}

size_t InMemoryDataMap::get_data_calls(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = get_data_calls_.find(key);
  return it == get_data_calls_.end() ? 0 : it->second;
}

size_t InMemoryDataMap::frees() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return frees_;
}

size_t InMemoryDataMap::live_buffers() const { return get_data_calls() - frees(); }

}  // namespace xnnpack
}  // namespace edgeshare
