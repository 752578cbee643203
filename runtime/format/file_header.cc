#include "edgeshare/runtime/format/file_header.h"

#include <cstring>

namespace edgeshare {
namespace runtime {
namespace {

uint32_t ReadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

uint64_t ReadU64(const uint8_t* p) {
  return static_cast<uint64_t>(ReadU32(p)) | static_cast<uint64_t>(ReadU32(p + 4)) << 32;
}

}  // namespace

Result<FileHeader> read_file_header(const DataLoader& loader, const char (&magic)[4],
                                    const char* kind, Error invalid) {
  const char* file = loader.name();
  const uint64_t file_size = loader.size();
  ES_CHECK_OR_RETURN_ERROR(file_size >= kFileHeaderSize, invalid,
                           "%s is not a %s file: %llu bytes is shorter than the %zu-byte header",
                           file, kind, static_cast<unsigned long long>(file_size), kFileHeaderSize);
  uint8_t raw[kFileHeaderSize];
  ES_RETURN_IF_ERROR(loader.load_into(0, kFileHeaderSize, raw));
  ES_CHECK_OR_RETURN_ERROR(std::memcmp(raw, magic, 4) == 0, invalid,
                           "%s is not a %s file: bad magic", file, kind);
  const uint32_t version = ReadU32(raw + 4);
  ES_CHECK_OR_RETURN_ERROR(version == kFormatVersion, invalid,
                           "%s: format version %u is not supported (this runtime reads %u)", file,
                           version, kFormatVersion);
  const uint32_t header_size = ReadU32(raw + 8);
  ES_CHECK_OR_RETURN_ERROR(header_size == kFileHeaderSize, invalid, "%s: header size %u is not %zu",
                           file, header_size, kFileHeaderSize);
  FileHeader h;
  h.flatbuffer_offset = ReadU64(raw + 16);
  h.flatbuffer_size = ReadU64(raw + 24);
  h.segment_base_offset = ReadU64(raw + 32);
  h.segment_data_size = ReadU64(raw + 40);
  ES_CHECK_OR_RETURN_ERROR(h.flatbuffer_offset >= kFileHeaderSize && h.flatbuffer_offset % 8 == 0,
                           invalid, "%s: flatbuffer offset %llu is inside the header or unaligned",
                           file, static_cast<unsigned long long>(h.flatbuffer_offset));
  ES_CHECK_OR_RETURN_ERROR(
      h.flatbuffer_offset <= file_size && h.flatbuffer_size <= file_size - h.flatbuffer_offset &&
          h.flatbuffer_size > 0,
      invalid, "%s: flatbuffer [%llu, +%llu) does not fit in the file (%llu bytes)", file,
      static_cast<unsigned long long>(h.flatbuffer_offset),
      static_cast<unsigned long long>(h.flatbuffer_size),
      static_cast<unsigned long long>(file_size));
  ES_CHECK_OR_RETURN_ERROR(
      h.segment_base_offset >= h.flatbuffer_offset + h.flatbuffer_size &&
          h.segment_base_offset <= file_size &&
          h.segment_data_size <= file_size - h.segment_base_offset,
      invalid,
      "%s: segment data [%llu, +%llu) overlaps the flatbuffer or is past the end (%llu bytes)",
      file, static_cast<unsigned long long>(h.segment_base_offset),
      static_cast<unsigned long long>(h.segment_data_size),
      static_cast<unsigned long long>(file_size));
  return h;
}

}  // namespace runtime
}  // namespace edgeshare
