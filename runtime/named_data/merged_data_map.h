// MergedDataMap: several NamedDataMaps seen as one, e.g. a program's own named data plus the .ptd
// files it was loaded with. A key present in two of them is an error at creation (compared by
// length and bytes), never first-wins, so where a weight comes from is never ambiguous.
//
//   ES_ASSIGN_OR_RETURN(MergedDataMap all, MergedDataMap::create({&foundation->map(), &adapter}));
//   all.get_data("layers.0.weight");
//
// Errors: AlreadyExists naming the key and both files. Thread-safe for reads. Borrows the maps,
// which must outlive it. get_num_keys/get_key enumerate the maps in order.

#ifndef EDGESHARE_RUNTIME_NAMED_DATA_MERGED_DATA_MAP_H_
#define EDGESHARE_RUNTIME_NAMED_DATA_MERGED_DATA_MAP_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

class MergedDataMap final : public NamedDataMap {
 public:
  // Null entries are skipped.
  static Result<MergedDataMap> create(std::vector<const NamedDataMap*> maps);

  Result<TensorLayout> get_tensor_layout(const char* key) const override;
  Result<FreeableBuffer> get_data(const char* key) const override;
  Status load_data_into(const char* key, void* dst, size_t size) const override;
  size_t get_num_keys() const override;
  Result<const char*> get_key(size_t index) const override;
  Result<Digest> get_digest(const char* key) const override;
  // The maps' names joined with ", ".
  const char* name() const override { return name_.c_str(); }
  // The memo of the map holding `key`.
  bool content_verified(const char* key) const override;
  void set_content_verified(const char* key) const override;

 private:
  MergedDataMap(std::vector<const NamedDataMap*> maps, std::string name)
      : maps_(std::move(maps)), name_(std::move(name)) {}
  // The map that holds `key`, or NotFound naming every file.
  Result<const NamedDataMap*> owner(const char* key) const;
  std::vector<const NamedDataMap*> maps_;
  std::string name_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_NAMED_DATA_MERGED_DATA_MAP_H_
