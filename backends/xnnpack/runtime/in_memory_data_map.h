// InMemoryDataMap: a test-only NamedDataMap over heap bytes, which counts what it is asked.
//
// Every entry is a float tensor added by the test; its digest is the SHA-256 of its bytes (as the
// exporter writes it; the delegate checks fetched bytes against it) unless the test gives one, e.g.
// to make a map whose bytes were changed under their recorded digest. get_data() hands out a heap
// copy whose free callback counts, so tests can assert that the delegate gave unpacked weights
// back; a map made with Buffers::kViews hands out zero-copy views instead (as an mmapped .ptd
// does), still counting their frees, for benchmarks that must not time a copy.
//
//   InMemoryDataMap map("foundation.ptd");
//   map.add("layers.0.weight", weights);            // std::vector<float>
//   ... init a delegate over &map ...
//   EXPECT_EQ(map.get_data_calls("layers.0.weight"), 1);
//   EXPECT_EQ(map.frees(), map.get_data_calls());
//
// Errors: NotFound for unknown keys. Thread-safety: counters are atomic-safe under a mutex.
// Ownership: the map owns its entries; buffers from get_data are copies owned by the caller, or
// (kViews) views valid while the map and the entry live.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_IN_MEMORY_DATA_MAP_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_IN_MEMORY_DATA_MAP_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/named_data_map.h"

namespace edgeshare {
namespace xnnpack {

class InMemoryDataMap final : public runtime::NamedDataMap {
 public:
  enum class Buffers { kCopies, kViews };
  explicit InMemoryDataMap(std::string name, Buffers buffers = Buffers::kCopies)
      : name_(std::move(name)), buffers_(buffers) {}

  // Adds (or replaces) `key`; returns the digest recorded for it.
  runtime::Digest add(const std::string& key, const std::vector<float>& values);
  runtime::Digest add(const std::string& key, const std::vector<float>& values,
                      const runtime::Digest& digest);
  // The content digest add() would record for these values.
  static runtime::Digest digest_of(const std::vector<float>& values);

  runtime::Result<runtime::TensorLayout> get_tensor_layout(const char* key) const override;
  runtime::Result<runtime::FreeableBuffer> get_data(const char* key) const override;
  runtime::Status load_data_into(const char* key, void* dst, size_t size) const override;
  size_t get_num_keys() const override;
  runtime::Result<const char*> get_key(size_t index) const override;
  runtime::Result<runtime::Digest> get_digest(const char* key) const override;
  const char* name() const override { return name_.c_str(); }

  // Counters.
  size_t get_data_calls() const;
  size_t get_data_calls(const std::string& key) const;
  size_t frees() const;
  // Every call of any NamedDataMap method (get_digest and get_tensor_layout included), per key.
  size_t calls(const std::string& key) const;
  size_t live_buffers() const;

 private:
  struct Entry {
    std::vector<float> values;
    std::vector<int32_t> sizes;
    runtime::Digest digest;
  };
  static void free_copy(void* context, const void* data, size_t size);
  static void free_view(void* context, const void* data, size_t size);

  std::string name_;
  Buffers buffers_;
  std::map<std::string, Entry> entries_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, size_t> get_data_calls_;
  mutable size_t frees_ = 0;
  mutable std::map<std::string, size_t> calls_;
  void count_call(const char* key) const;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_IN_MEMORY_DATA_MAP_H_
