// PteDataMap: the NamedDataMap of a program's own named data (e.g. LoRA adapter weights and
// delegate data stored in the .pte). Owned by ProgramImage, which builds it at load when the .pte
// has named data; delegates reach it through BackendInitContext merged with the external data
// files.
//
// Thread-safe for reads. Borrows the program's flatbuffer and loader: it lives inside the
// ProgramImage that Program and its Methods share.

#ifndef EDGESHARE_RUNTIME_EXECUTOR_PTE_DATA_MAP_H_
#define EDGESHARE_RUNTIME_EXECUTOR_PTE_DATA_MAP_H_

#include "edgeshare/runtime/format/segmented_data_map.h"

namespace edgeshare {
namespace runtime {

class PteDataMap final : public SegmentedDataMap {
 public:
  // The tables must have passed SegmentedDataMap::validate().
  PteDataMap(const NamedDataVector* entries, const SegmentVector* segments,
             uint64_t segment_base_offset, const DataLoader* loader)
      : SegmentedDataMap(entries, segments, segment_base_offset, loader) {}
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_EXECUTOR_PTE_DATA_MAP_H_
