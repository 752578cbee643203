#include "edgeshare/runtime/named_data/flat_tensor_data_map.h"

#include <algorithm>

#include "edgeshare/runtime/format/file_header.h"
#include "edgeshare/schema/flat_tensor_generated.h"

namespace edgeshare {
namespace runtime {

Result<FlatTensorDataMap> FlatTensorDataMap::load(const DataLoader* loader) {
  ES_CHECK_OR_RETURN_ERROR(loader != nullptr, Error::InvalidArgument,
                           "FlatTensorDataMap::load: null loader");
  const char* file = loader->name();
  ES_ASSIGN_OR_RETURN(const FileHeader header,
                      read_file_header(*loader, kDataMagic, ".ptd", Error::InvalidData));
  ES_ASSIGN_OR_RETURN(FreeableBuffer flatbuffer,
                      loader->load(static_cast<size_t>(header.flatbuffer_offset),
                                   static_cast<size_t>(header.flatbuffer_size)));
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(flatbuffer.data()), flatbuffer.size());
  ES_CHECK_OR_RETURN_ERROR(schema::VerifyFlatTensorBuffer(verifier), Error::InvalidData,
                           "%s: the FlatTensor flatbuffer is malformed", file);
  const schema::FlatTensor* root = schema::GetFlatTensor(flatbuffer.data());
  ES_CHECK_OR_RETURN_ERROR(root->version() == kFormatVersion, Error::InvalidData,
                           "%s: FlatTensor version %u is not supported", file, root->version());
  const uint32_t alignment = root->tensor_alignment();
  ES_CHECK_OR_RETURN_ERROR(alignment != 0 && (alignment & (alignment - 1)) == 0, Error::InvalidData,
                           "%s: tensor_alignment %u is not a power of two", file, alignment);
  ES_CHECK_OR_RETURN_ERROR(header.segment_base_offset % alignment == 0, Error::InvalidData,
                           "%s: segment base offset is not %u-aligned", file, alignment);
  if (root->segments() != nullptr) {
    for (const schema::DataSegment* segment : *root->segments()) {
      ES_CHECK_OR_RETURN_ERROR(segment->offset() % alignment == 0, Error::InvalidData,
                               "%s: a segment at offset %llu is not %u-aligned", file,
                               static_cast<unsigned long long>(segment->offset()), alignment);
    }
  }
  ES_RETURN_IF_ERROR(SegmentedDataMap::validate(
      root->named_data(), root->segments(), header.segment_data_size, file, Error::InvalidData));
  Digest foundation;
  const flatbuffers::Vector<uint8_t>* recorded = root->foundation_digest();
  if (recorded != nullptr) {
    ES_CHECK_OR_RETURN_ERROR(recorded->size() == foundation.bytes.size(), Error::InvalidData,
                             "%s: foundation_digest has %u bytes, not 32", file, recorded->size());
    std::copy(recorded->begin(), recorded->end(), foundation.bytes.begin());
  }
  const NamedDataVector* entries = root->named_data();
  const SegmentVector* segments = root->segments();
  FlatTensorDataMap map(std::move(flatbuffer), entries, segments, header.segment_base_offset,
                        loader);
  map.foundation_ = foundation;
  map.has_foundation_ = recorded != nullptr;
  return map;
}

}  // namespace runtime
}  // namespace edgeshare
