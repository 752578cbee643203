#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace runtime {

Result<MergedDataMap> MergedDataMap::create(std::vector<const NamedDataMap*> maps) {
  std::vector<const NamedDataMap*> present;
  std::string name;
  for (const NamedDataMap* map : maps) {
    if (map == nullptr) continue;
    present.push_back(map);
    if (!name.empty()) name += ", ";
    name += map->name();
  }
  // Maps hold at most thousands of keys; each lookup is a binary search.
  for (size_t i = 0; i < present.size(); ++i) {
    for (size_t k = 0; k < present[i]->get_num_keys(); ++k) {
      ES_ASSIGN_OR_RETURN(const char* key, present[i]->get_key(k));
      for (size_t j = i + 1; j < present.size(); ++j) {
        const Result<Digest> other = present[j]->get_digest(key);
        ES_CHECK_OR_RETURN_ERROR(other.error() == Error::NotFound, Error::AlreadyExists,
                                 "duplicate key '%s' in %s and %s", key, present[i]->name(),
                                 present[j]->name());
      }
    }
  }
  if (name.empty()) name = "no data files";
  return MergedDataMap(std::move(present), std::move(name));
}

Result<const NamedDataMap*> MergedDataMap::owner(const char* key) const {
  for (const NamedDataMap* map : maps_) {
    const Result<Digest> digest = map->get_digest(key);
    if (digest.ok()) return map;
    if (digest.error() != Error::NotFound) return digest.status();
  }
  return Status::Format(Error::NotFound, "key '%s' not found in %s", key == nullptr ? "" : key,
                        name());
}

Result<TensorLayout> MergedDataMap::get_tensor_layout(const char* key) const {
  ES_ASSIGN_OR_RETURN(const NamedDataMap* map, owner(key));
  return map->get_tensor_layout(key);
}

Result<FreeableBuffer> MergedDataMap::get_data(const char* key) const {
  ES_ASSIGN_OR_RETURN(const NamedDataMap* map, owner(key));
  return map->get_data(key);
}

Status MergedDataMap::load_data_into(const char* key, void* dst, size_t size) const {
  ES_ASSIGN_OR_RETURN(const NamedDataMap* map, owner(key));
  return map->load_data_into(key, dst, size);
}

size_t MergedDataMap::get_num_keys() const {
  size_t count = 0;
  for (const NamedDataMap* map : maps_) count += map->get_num_keys();
  return count;
}

Result<const char*> MergedDataMap::get_key(size_t index) const {
  size_t remaining = index;
  for (const NamedDataMap* map : maps_) {
    if (remaining < map->get_num_keys()) return map->get_key(remaining);
    remaining -= map->get_num_keys();
  }
  return Status::Format(Error::OutOfRange, "key index %zu is past the %zu keys of %s", index,
                        get_num_keys(), name());
}

Result<Digest> MergedDataMap::get_digest(const char* key) const {
  ES_ASSIGN_OR_RETURN(const NamedDataMap* map, owner(key));
  return map->get_digest(key);
}

bool MergedDataMap::content_verified(const char* key) const {
  const Result<const NamedDataMap*> map = owner(key);
  return map.ok() && (*map)->content_verified(key);
}

void MergedDataMap::set_content_verified(const char* key) const {
  const Result<const NamedDataMap*> map = owner(key);
  if (map.ok()) (*map)->set_content_verified(key);
}

}  // namespace runtime
}  // namespace edgeshare
