// Internal to the executor: ProgramImage, what a Program is (the borrowed loader, the verified
// flatbuffer, its segments and the program's own named data), and the narrow view of it that
// Method::load reads while it loads a method.
//
// load() checks the header, verifies the flatbuffer (FlatBuffers verifier), the format version and
// every segment and named-data entry against the file size before anything else is read; after
// that the accessors need no further checks except the bounds each one states.
//
//   ES_ASSIGN_OR_RETURN(ProgramImage image, ProgramImage::load(&loader));
//   const schema::ExecutionPlan* plan = image.find_method("forward");
//   ES_ASSIGN_OR_RETURN(FreeableBuffer blob, image.load_segment(image.segment(0), size));
//
// Errors: load() gives InvalidArgument for a null loader, InvalidProgram naming the file and
// field, and the loader's errors; load_segment() gives the loader's errors.
// Thread-safety: immutable after load(); every accessor may be called concurrently.
// Ownership: borrows the loader, which must outlive the image; owns the flatbuffer bytes, which
// the schema pointers handed out (plans, segments, names) point into. Movable: the bytes and the
// named data map stay where they are, so those pointers survive a move. Program and each Method
// loaded from it share one image (std::shared_ptr); the last of them to go frees it.

#ifndef EDGESHARE_RUNTIME_EXECUTOR_PROGRAM_IMAGE_H_
#define EDGESHARE_RUNTIME_EXECUTOR_PROGRAM_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace schema {
struct DataSegment;
struct ExecutionPlan;
struct Program;
}  // namespace schema

namespace runtime {

class PteDataMap;

class ProgramImage {
 public:
  static Result<ProgramImage> load(const DataLoader* loader);

  ProgramImage(ProgramImage&&) noexcept;
  ProgramImage& operator=(ProgramImage&&) noexcept;
  ~ProgramImage();

  // The file name, for messages.
  const char* name() const { return loader_->name(); }

  size_t num_methods() const;
  // The plan of method `index`; requires index < num_methods().
  const schema::ExecutionPlan& method(size_t index) const;
  // The plan of the method called `name`, or null.
  const schema::ExecutionPlan* find_method(const char* name) const;

  size_t num_segments() const;
  // Segment `index`; requires index < num_segments(). load() checked it lies inside the file.
  const schema::DataSegment& segment(size_t index) const;
  // The first `size` bytes of `segment` (a zero-copy view when the loader can give one).
  Result<FreeableBuffer> load_segment(const schema::DataSegment& segment, size_t size) const;

  // The program's own named data, or null when the .pte has none.
  const NamedDataMap* named_data() const;
  // The identity of the foundation the program was exported over, or null when the file records
  // none.
  const Digest* foundation_digest() const { return has_foundation_ ? &foundation_ : nullptr; }

 private:
  ProgramImage() = default;
  const DataLoader* loader_ = nullptr;
  FreeableBuffer flatbuffer_;
  const schema::Program* root_ = nullptr;
  uint64_t segment_base_offset_ = 0;
  std::unique_ptr<PteDataMap> named_data_;
  Digest foundation_;
  bool has_foundation_ = false;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_EXECUTOR_PROGRAM_IMAGE_H_
