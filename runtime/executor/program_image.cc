#include "edgeshare/runtime/executor/program_image.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "edgeshare/runtime/executor/pte_data_map.h"
#include "edgeshare/runtime/format/file_header.h"
#include "edgeshare/runtime/format/segmented_data_map.h"
#include "edgeshare/schema/program_generated.h"

namespace edgeshare {
namespace runtime {
namespace {

// Segments, named data and method names: everything a later lookup relies on without checking.
// Segments are aligned as the file says (the exporter aligns constants for SIMD loads and mmap).
Status validate_tables(const schema::Program& root, const FileHeader& header, const char* file) {
  const uint64_t segment_data_size = header.segment_data_size;
  const uint32_t alignment = root.segment_alignment();
  if (root.segments() != nullptr && root.segments()->size() > 0) {
    ES_CHECK_OR_RETURN_ERROR(alignment != 0 && (alignment & (alignment - 1)) == 0,
                             Error::InvalidProgram,
                             "%s: segment_alignment %u is not a power of two", file, alignment);
    ES_CHECK_OR_RETURN_ERROR(header.segment_base_offset % alignment == 0, Error::InvalidProgram,
                             "%s: segment base offset is not %u-aligned", file, alignment);
    for (const schema::DataSegment* segment : *root.segments()) {
      ES_CHECK_OR_RETURN_ERROR(segment->offset() % alignment == 0, Error::InvalidProgram,
                               "%s: a segment at offset %llu is not %u-aligned", file,
                               static_cast<unsigned long long>(segment->offset()), alignment);
    }
  }
  if (root.segments() != nullptr) {
    for (flatbuffers::uoffset_t i = 0; i < root.segments()->size(); ++i) {
      ES_RETURN_IF_ERROR(check_segment(root.segments(), i, segment_data_size, file, "the program",
                                       Error::InvalidProgram));
    }
  }
  ES_RETURN_IF_ERROR(SegmentedDataMap::validate(root.named_data(), root.segments(),
                                                segment_data_size, file, Error::InvalidProgram));
  const auto* plans = root.execution_plans();
  if (plans != nullptr) {
    for (flatbuffers::uoffset_t i = 0; i < plans->size(); ++i) {
      for (flatbuffers::uoffset_t j = 0; j < i; ++j) {
        ES_CHECK_OR_RETURN_ERROR(plans->Get(i)->name()->str() != plans->Get(j)->name()->str(),
                                 Error::InvalidProgram, "%s: two methods are named '%s'", file,
                                 plans->Get(i)->name()->c_str());
      }
    }
  }
  return Status();
}

}  // namespace

ProgramImage::ProgramImage(ProgramImage&&) noexcept = default;
ProgramImage& ProgramImage::operator=(ProgramImage&&) noexcept = default;
ProgramImage::~ProgramImage() = default;

Result<ProgramImage> ProgramImage::load(const DataLoader* loader) {
  ES_CHECK_OR_RETURN_ERROR(loader != nullptr, Error::InvalidArgument, "Program::load: null loader");
  const char* file = loader->name();
  ES_ASSIGN_OR_RETURN(const FileHeader header,
                      read_file_header(*loader, kProgramMagic, ".pte", Error::InvalidProgram));
  ProgramImage image;
  image.loader_ = loader;
  ES_ASSIGN_OR_RETURN(image.flatbuffer_, loader->load(static_cast<size_t>(header.flatbuffer_offset),
                                                      static_cast<size_t>(header.flatbuffer_size)));
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(image.flatbuffer_.data()),
                                 image.flatbuffer_.size());
  ES_CHECK_OR_RETURN_ERROR(schema::VerifyProgramBuffer(verifier), Error::InvalidProgram,
                           "%s: the Program flatbuffer is malformed", file);
  const schema::Program* root = schema::GetProgram(image.flatbuffer_.data());
  ES_CHECK_OR_RETURN_ERROR(root->version() == kFormatVersion, Error::InvalidProgram,
                           "%s: Program version %u is not supported", file, root->version());
  ES_RETURN_IF_ERROR(validate_tables(*root, header, file));
  image.root_ = root;
  image.segment_base_offset_ = header.segment_base_offset;
  if (const flatbuffers::Vector<uint8_t>* foundation = root->foundation_digest()) {
    ES_CHECK_OR_RETURN_ERROR(foundation->size() == image.foundation_.bytes.size(),
                             Error::InvalidProgram,
                             "%s: foundation_digest has %u bytes, not 32", file, foundation->size());
    std::copy(foundation->begin(), foundation->end(), image.foundation_.bytes.begin());
    image.has_foundation_ = true;
  }
  if (root->named_data() != nullptr && root->named_data()->size() > 0) {
    image.named_data_ = std::make_unique<PteDataMap>(root->named_data(), root->segments(),
                                                     header.segment_base_offset, loader);
  }
  return image;
}

size_t ProgramImage::num_methods() const {
  return root_->execution_plans() == nullptr ? 0 : root_->execution_plans()->size();
}

const schema::ExecutionPlan& ProgramImage::method(size_t index) const {
  return *root_->execution_plans()->Get(static_cast<flatbuffers::uoffset_t>(index));
}

const schema::ExecutionPlan* ProgramImage::find_method(const char* name) const {
  // load() rejected two methods of one name, so the first match is the only one.
  for (size_t i = 0; i < num_methods(); ++i) {
    if (std::strcmp(method(i).name()->c_str(), name) == 0) return &method(i);
  }
  return nullptr;
}

size_t ProgramImage::num_segments() const {
  return root_->segments() == nullptr ? 0 : root_->segments()->size();
}

const schema::DataSegment& ProgramImage::segment(size_t index) const {
  return *root_->segments()->Get(static_cast<flatbuffers::uoffset_t>(index));
}

Result<FreeableBuffer> ProgramImage::load_segment(const schema::DataSegment& segment,
                                                  size_t size) const {
  return loader_->load(static_cast<size_t>(segment_base_offset_ + segment.offset()), size);
}

const NamedDataMap* ProgramImage::named_data() const { return named_data_.get(); }

}  // namespace runtime
}  // namespace edgeshare
