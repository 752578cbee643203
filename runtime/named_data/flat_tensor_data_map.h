// FlatTensorDataMap: the NamedDataMap of one .ptd data file (e.g. foundation.ptd).
//
// load() verifies the header, the FlatTensor flatbuffer and every entry (segment bounds and
// alignment, layout vs. segment size, digest, key order) before returning; get_data() then hands
// out zero-copy views when the loader is an MmapDataLoader. Most callers want DataFile::open(),
// which opens and maps each file once per process.
//
//   ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from("foundation.ptd"));
//   ES_ASSIGN_OR_RETURN(FlatTensorDataMap map, FlatTensorDataMap::load(&loader));
//
// Errors: InvalidData naming the file and field for anything malformed; loader errors.
// Thread-safe for reads. Borrows the loader, which must outlive the map. Move-only.

#ifndef EDGESHARE_RUNTIME_NAMED_DATA_FLAT_TENSOR_DATA_MAP_H_
#define EDGESHARE_RUNTIME_NAMED_DATA_FLAT_TENSOR_DATA_MAP_H_

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/format/segmented_data_map.h"

namespace edgeshare {
namespace runtime {

class FlatTensorDataMap final : public SegmentedDataMap {
 public:
  static Result<FlatTensorDataMap> load(const DataLoader* loader);

  FlatTensorDataMap(FlatTensorDataMap&&) = default;
  FlatTensorDataMap& operator=(FlatTensorDataMap&&) = delete;

  // An adapter file's record of the foundation it was exported for (see DataFile::identity()), or
  // null when the file has none (a foundation's own file, or an older file).
  const Digest* foundation_digest() const { return has_foundation_ ? &foundation_ : nullptr; }

 private:
  FlatTensorDataMap(FreeableBuffer flatbuffer, const NamedDataVector* entries,
                    const SegmentVector* segments, uint64_t segment_base_offset,
                    const DataLoader* loader)
      : SegmentedDataMap(entries, segments, segment_base_offset, loader),
        flatbuffer_(std::move(flatbuffer)) {}
  FreeableBuffer flatbuffer_;
  Digest foundation_;
  bool has_foundation_ = false;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_NAMED_DATA_FLAT_TENSOR_DATA_MAP_H_
