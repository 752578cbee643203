// CountingDataMap: a NamedDataMap that forwards to another and counts, per key, how many times the
// bytes were fetched (get_data or load_data_into), whoever fetched them: a delegate's weights cache
// or the executor reading an external constant for a portable kernel. The tools hand it to every
// load_method, so "fetched once" is counted where the bytes leave the data file.
//
//   CountingDataMap counted(merged);
//   ES_ASSIGN_OR_RETURN(Method m, program.load_method("forward", &counted));
//   for (const auto& [key, n] : counted.fetches()) printf("%s fetched %zu\n", key.c_str(), n);
//
// Tool code. Ownership: borrows `inner`, which must outlive this map (and so every Method loaded
// against it). Thread-safety: every method may be called from several threads at once (the counts
// are guarded by a mutex). Errors: those of the inner map, unchanged.

#ifndef EDGESHARE_TOOLS_COUNTING_DATA_MAP_H_
#define EDGESHARE_TOOLS_COUNTING_DATA_MAP_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "edgeshare/runtime/core/named_data_map.h"

namespace edgeshare {
namespace tools {

class CountingDataMap final : public runtime::NamedDataMap {
 public:
  explicit CountingDataMap(const runtime::NamedDataMap& inner) : inner_(inner) {}

  runtime::Result<runtime::TensorLayout> get_tensor_layout(const char* key) const override {
    return inner_.get_tensor_layout(key);
  }
  runtime::Result<runtime::FreeableBuffer> get_data(const char* key) const override;
  runtime::Status load_data_into(const char* key, void* dst, size_t size) const override;
  size_t get_num_keys() const override { return inner_.get_num_keys(); }
  runtime::Result<const char*> get_key(size_t index) const override {
    return inner_.get_key(index);
  }
  runtime::Result<runtime::Digest> get_digest(const char* key) const override {
    return inner_.get_digest(key);
  }
  const char* name() const override { return inner_.name(); }

  // Key -> successful fetches so far (a copy).
  std::map<std::string, size_t> fetches() const;

 private:
  void count(const char* key) const;

  const runtime::NamedDataMap& inner_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, size_t> fetches_;
};

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_COUNTING_DATA_MAP_H_
