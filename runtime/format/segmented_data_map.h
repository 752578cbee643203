// Internal: a NamedDataMap over a file's `named_data` table and its segments, shared by the
// program's own named data (PteDataMap) and .ptd files (FlatTensorDataMap).
//
// validate() checks every entry once (key order and uniqueness, segment bounds, layout sizes
// against segment sizes, digest length) so that lookups afterwards need no further checks.
// Thread-safe for concurrent reads. Borrows the flatbuffer tables and the loader: both must outlive
// the map.

#ifndef EDGESHARE_RUNTIME_FORMAT_SEGMENTED_DATA_MAP_H_
#define EDGESHARE_RUNTIME_FORMAT_SEGMENTED_DATA_MAP_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/schema/named_data_generated.h"

namespace edgeshare {
namespace runtime {

using NamedDataVector = flatbuffers::Vector<flatbuffers::Offset<schema::NamedData>>;
using SegmentVector = flatbuffers::Vector<const schema::DataSegment*>;

// The most dims a tensor in a file may have.
constexpr size_t kMaxTensorDims = 8;

// Checks a tensor layout from a file and returns its byte size; `what` names it for messages.
Result<size_t> checked_layout_nbytes(const schema::TensorLayout& layout, const char* file,
                                     const char* what, Error invalid);

// Checks that segment `index` exists and lies inside the segment data area.
Status check_segment(const SegmentVector* segments, uint32_t index, uint64_t segment_data_size,
                     const char* file, const char* what, Error invalid);

class SegmentedDataMap : public NamedDataMap {
 public:
  // Validates `entries` against `segments`. `invalid` is the code for a malformed file.
  static Status validate(const NamedDataVector* entries, const SegmentVector* segments,
                         uint64_t segment_data_size, const char* file, Error invalid);

  Result<TensorLayout> get_tensor_layout(const char* key) const override;
  Result<FreeableBuffer> get_data(const char* key) const override;
  Status load_data_into(const char* key, void* dst, size_t size) const override;
  size_t get_num_keys() const override;
  Result<const char*> get_key(size_t index) const override;
  Result<Digest> get_digest(const char* key) const override;
  const char* name() const override { return loader_->name(); }
  bool content_verified(const char* key) const override;
  void set_content_verified(const char* key) const override;

  // Turns the content-verification memo on (off by default): only for a loader whose bytes cannot
  // change while the map lives, such as a read-only mapping (a copying loader re-reads the file).
  void remember_verified_content();

 protected:
  // The tables must have passed validate().
  SegmentedDataMap(const NamedDataVector* entries, const SegmentVector* segments,
                   uint64_t segment_base_offset, const DataLoader* loader)
      : entries_(entries), segments_(segments), base_(segment_base_offset), loader_(loader) {}

 private:
  Result<size_t> find_index(const char* key) const;
  Result<const schema::NamedData*> find(const char* key) const;
  const NamedDataVector* entries_;
  const SegmentVector* segments_;
  uint64_t base_;
  const DataLoader* loader_;
  // One flag per entry once remember_verified_content() ran; null while the memo is off.
  std::unique_ptr<std::atomic<bool>[]> verified_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_FORMAT_SEGMENTED_DATA_MAP_H_
