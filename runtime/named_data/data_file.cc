#include "edgeshare/runtime/named_data/data_file.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "edgeshare/runtime/core/sha256.h"

namespace edgeshare {
namespace runtime {
namespace {

using FileId = std::pair<unsigned long, unsigned long>;

struct OpenFiles {
  std::mutex mutex;
  std::map<FileId, std::weak_ptr<const DataFile>> files;
};

OpenFiles& open_files() {
  static OpenFiles* files = new OpenFiles();  // Never destroyed: DataFiles may die at exit.
  return *files;
}

// SHA-256 over the entries' digests in the map's (key) order.
Result<Digest> foundation_identity(const NamedDataMap& map) {
  std::vector<uint8_t> digests;
  digests.reserve(map.get_num_keys() * sizeof(Digest::bytes));
  for (size_t i = 0; i < map.get_num_keys(); ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, map.get_key(i));
    ES_ASSIGN_OR_RETURN(const Digest digest, map.get_digest(key));
    digests.insert(digests.end(), digest.bytes.begin(), digest.bytes.end());
  }
  return sha256(digests.data(), digests.size());
}

}  // namespace

Result<std::shared_ptr<const DataFile>> DataFile::open(const char* path) {
  ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from(path));
  const FileId id(loader.device(), loader.inode());
  OpenFiles& registry = open_files();
  // Held across the load so that two threads opening one file map it once.
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto it = registry.files.find(id);
  if (it != registry.files.end()) {
    if (std::shared_ptr<const DataFile> existing = it->second.lock()) return existing;
  }
  std::shared_ptr<DataFile> file(new DataFile(std::move(loader)));
  ES_ASSIGN_OR_RETURN(FlatTensorDataMap map, FlatTensorDataMap::load(&file->loader_));
  file->map_.emplace(std::move(map));
  ES_ASSIGN_OR_RETURN(file->identity_, foundation_identity(*file->map_));
  // The file is mapped read-only for the DataFile's life: an entry hashed once need not be hashed
  // again (an adapter swapped back in).
  file->map_->remember_verified_content();
  registry.files[id] = file;
  return std::shared_ptr<const DataFile>(std::move(file));
}

DataFile::~DataFile() {
  // A file that failed to load was never registered (and open() still holds the lock).
  if (!map_.has_value()) return;
  OpenFiles& registry = open_files();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto it = registry.files.find(FileId(loader_.device(), loader_.inode()));
  if (it != registry.files.end() && it->second.expired()) registry.files.erase(it);
}

size_t DataFile::open_count() {
  OpenFiles& registry = open_files();
  std::lock_guard<std::mutex> lock(registry.mutex);
  size_t count = 0;
  for (const auto& entry : registry.files) count += entry.second.expired() ? 0 : 1;
  return count;
}

}  // namespace runtime
}  // namespace edgeshare
