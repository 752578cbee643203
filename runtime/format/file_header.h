// Internal: the 48-byte header that opens every .pte and .ptd file, and its bounds checks.
//
// Layout (little-endian): magic[4], u32 version, u32 header size, u32 reserved, u64 flatbuffer
// offset, u64 flatbuffer size, u64 segment base offset, u64 segment data size. Everything is
// checked against the loader's size before anything else is read.

#ifndef EDGESHARE_RUNTIME_FORMAT_FILE_HEADER_H_
#define EDGESHARE_RUNTIME_FORMAT_FILE_HEADER_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

constexpr size_t kFileHeaderSize = 48;
constexpr uint32_t kFormatVersion = 1;
constexpr char kProgramMagic[4] = {'E', 'S', 'P', 'T'};
constexpr char kDataMagic[4] = {'E', 'S', 'T', 'D'};

struct FileHeader {
  uint64_t flatbuffer_offset = 0;
  uint64_t flatbuffer_size = 0;
  uint64_t segment_base_offset = 0;
  uint64_t segment_data_size = 0;
};

// Reads and validates the header. `kind` names the file kind for messages (".pte" / ".ptd").
// Errors: InvalidProgram (.pte) or InvalidData (.ptd) naming the file and field; loader errors.
Result<FileHeader> read_file_header(const DataLoader& loader, const char (&magic)[4],
                                    const char* kind, Error invalid);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_FORMAT_FILE_HEADER_H_
