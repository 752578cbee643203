// DataFile: a .ptd file opened, mapped and verified once per process, shared by every program.
//
// Opening the same file twice (by any path: identity is device + inode) returns the same DataFile
// while someone still holds it, so constants that several programs take from it are one mapping,
// zero-copy. The file is closed when the last holder lets go.
//
//   ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> foundation,
//   DataFile::open("foundation.ptd")); program_a.load_method("forward", &foundation->map());
//
// Errors: AccessFailed (missing file), InvalidData (malformed). Thread-safe.

#ifndef EDGESHARE_RUNTIME_NAMED_DATA_DATA_FILE_H_
#define EDGESHARE_RUNTIME_NAMED_DATA_DATA_FILE_H_

#include <memory>
#include <optional>

#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/named_data/flat_tensor_data_map.h"

namespace edgeshare {
namespace runtime {

class DataFile {
 public:
  static Result<std::shared_ptr<const DataFile>> open(const char* path);

  const NamedDataMap& map() const { return *map_; }
  const char* path() const { return loader_.name(); }

  // The file's identity as a foundation: SHA-256 over the 32-byte digests of its entries, in key
  // order (what the exporter records in the programs and adapter files made over it). Computed at
  // open from the digests the file records; no weight is hashed.
  const Digest& identity() const { return identity_; }
  // For an adapter's file: the identity of the foundation it was exported for; null for a file
  // that records none (a foundation's own file, or one written before adapters recorded it).
  const Digest* foundation_digest() const { return map_->foundation_digest(); }

  // How many distinct data files this process has open right now (for tests and tools).
  static size_t open_count();

  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  ~DataFile();

 private:
  explicit DataFile(MmapDataLoader loader) : loader_(std::move(loader)) {}
  MmapDataLoader loader_;
  std::optional<FlatTensorDataMap> map_;
  Digest identity_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_NAMED_DATA_DATA_FILE_H_
