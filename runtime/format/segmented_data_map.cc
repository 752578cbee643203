#include "edgeshare/runtime/format/segmented_data_map.h"

#include <cstring>

namespace edgeshare {
namespace runtime {
namespace {

constexpr size_t kDigestSize = 32;

// Bytewise order with length as the tie-break, so keys with embedded NULs still compare correctly.
int CompareKeys(const flatbuffers::String* a, const char* b, size_t b_size) {
  const size_t n = a->size() < b_size ? a->size() : b_size;
  const int c = std::memcmp(a->data(), b, n);
  if (c != 0) return c;
  return a->size() < b_size ? -1 : (a->size() > b_size ? 1 : 0);
}

}  // namespace

Result<size_t> checked_layout_nbytes(const schema::TensorLayout& layout, const char* file,
                                     const char* what, Error invalid) {
  const auto type = static_cast<ScalarType>(layout.scalar_type());
  ES_CHECK_OR_RETURN_ERROR(is_known(type), invalid, "%s: %s has unknown scalar type %d", file, what,
                           static_cast<int>(layout.scalar_type()));
  const auto* sizes = layout.sizes();
  const auto* dim_order = layout.dim_order();
  // The exporter writes both vectors even for rank 0; readers then index them without checks.
  ES_CHECK_OR_RETURN_ERROR(sizes != nullptr && dim_order != nullptr, invalid,
                           "%s: %s has a tensor layout without %s", file, what,
                           sizes == nullptr ? "sizes" : "dim_order");
  const size_t rank = sizes->size();
  ES_CHECK_OR_RETURN_ERROR(rank <= kMaxTensorDims, invalid, "%s: %s has %zu dims (at most %zu)",
                           file, what, rank, kMaxTensorDims);
  const size_t order_rank = dim_order->size();
  ES_CHECK_OR_RETURN_ERROR(order_rank == rank, invalid,
                           "%s: %s has %zu sizes but a dim order of %zu", file, what, rank,
                           order_rank);
  bool seen[kMaxTensorDims] = {};
  for (size_t i = 0; i < order_rank; ++i) {
    const uint8_t d = dim_order->Get(static_cast<flatbuffers::uoffset_t>(i));
    ES_CHECK_OR_RETURN_ERROR(d < rank && !seen[d], invalid,
                             "%s: %s has a dim order that is not a permutation", file, what);
    seen[d] = true;
  }
  size_t nbytes = element_size(type);
  for (size_t i = 0; i < rank; ++i) {
    const int32_t s = sizes->Get(static_cast<flatbuffers::uoffset_t>(i));
    ES_CHECK_OR_RETURN_ERROR(s >= 0, invalid, "%s: %s has negative size %d", file, what, s);
    ES_CHECK_OR_RETURN_ERROR(s == 0 || nbytes <= SIZE_MAX / static_cast<size_t>(s), invalid,
                             "%s: %s is too large", file, what);
    nbytes *= static_cast<size_t>(s);
  }
  return nbytes;
}

Status check_segment(const SegmentVector* segments, uint32_t index, uint64_t segment_data_size,
                     const char* file, const char* what, Error invalid) {
  const size_t count = segments == nullptr ? 0 : segments->size();
  ES_CHECK_OR_RETURN_ERROR(index < count, invalid, "%s: %s names segment %u of %zu", file, what,
                           index, count);
  const schema::DataSegment* segment = segments->Get(index);
  ES_CHECK_OR_RETURN_ERROR(
      segment->offset() <= segment_data_size &&
          segment->size() <= segment_data_size - segment->offset(),
      invalid, "%s: %s's segment %u [%llu, +%llu) is past the segment data (%llu bytes)", file,
      what, index, static_cast<unsigned long long>(segment->offset()),
      static_cast<unsigned long long>(segment->size()),
      static_cast<unsigned long long>(segment_data_size));
  return Status();
}

Status SegmentedDataMap::validate(const NamedDataVector* entries, const SegmentVector* segments,
                                  uint64_t segment_data_size, const char* file, Error invalid) {
  if (entries == nullptr) return Status();
  const flatbuffers::String* previous = nullptr;
  for (flatbuffers::uoffset_t i = 0; i < entries->size(); ++i) {
    const schema::NamedData* entry = entries->Get(i);
    const flatbuffers::String* key = entry->key();
    ES_CHECK_OR_RETURN_ERROR(key != nullptr, invalid, "%s: named data entry %u has no key", file,
                             i);
    if (previous != nullptr) {
      const int order = CompareKeys(previous, key->data(), key->size());
      ES_CHECK_OR_RETURN_ERROR(order != 0, invalid, "%s: duplicate key '%s'", file, key->c_str());
      ES_CHECK_OR_RETURN_ERROR(order < 0, invalid, "%s: named data is not sorted at key '%s'", file,
                               key->c_str());
    }
    previous = key;
    ES_RETURN_IF_ERROR(check_segment(segments, entry->segment_index(), segment_data_size, file,
                                     key->c_str(), invalid));
    ES_CHECK_OR_RETURN_ERROR(entry->digest() != nullptr && entry->digest()->size() == kDigestSize,
                             invalid, "%s: key '%s' has no 32-byte digest", file, key->c_str());
    if (entry->tensor_layout() != nullptr) {
      ES_ASSIGN_OR_RETURN(const size_t nbytes, checked_layout_nbytes(*entry->tensor_layout(), file,
                                                                     key->c_str(), invalid));
      const uint64_t segment_size = segments->Get(entry->segment_index())->size();
      ES_CHECK_OR_RETURN_ERROR(nbytes == segment_size, invalid,
                               "%s: key '%s' has a layout of %zu bytes but a segment of %llu", file,
                               key->c_str(), nbytes, static_cast<unsigned long long>(segment_size));
    }
  }
  return Status();
}

Result<size_t> SegmentedDataMap::find_index(const char* key) const {
  ES_CHECK_OR_RETURN_ERROR(key != nullptr, Error::InvalidArgument, "%s: null key", name());
  const size_t key_size = std::strlen(key);
  size_t lo = 0;
  size_t hi = entries_ == nullptr ? 0 : entries_->size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    const schema::NamedData* entry = entries_->Get(static_cast<flatbuffers::uoffset_t>(mid));
    const int order = CompareKeys(entry->key(), key, key_size);
    if (order == 0) return mid;
    if (order < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return Status::Format(Error::NotFound, "key '%s' not found in %s", key, name());
}

Result<const schema::NamedData*> SegmentedDataMap::find(const char* key) const {
  ES_ASSIGN_OR_RETURN(const size_t index, find_index(key));
  return entries_->Get(static_cast<flatbuffers::uoffset_t>(index));
}

void SegmentedDataMap::remember_verified_content() {
  if (verified_ == nullptr) verified_.reset(new std::atomic<bool>[get_num_keys() + 1]());
}

bool SegmentedDataMap::content_verified(const char* key) const {
  if (verified_ == nullptr) return false;
  const Result<size_t> index = find_index(key);
  return index.ok() && verified_[*index].load(std::memory_order_acquire);
}

void SegmentedDataMap::set_content_verified(const char* key) const {
  if (verified_ == nullptr) return;
  const Result<size_t> index = find_index(key);
  if (index.ok()) verified_[*index].store(true, std::memory_order_release);
}

Result<TensorLayout> SegmentedDataMap::get_tensor_layout(const char* key) const {
  ES_ASSIGN_OR_RETURN(const schema::NamedData* entry, find(key));
  const schema::TensorLayout* layout = entry->tensor_layout();
  ES_CHECK_OR_RETURN_ERROR(layout != nullptr, Error::InvalidArgument,
                           "key '%s' in %s is opaque data and has no tensor layout", key, name());
  TensorLayout out;
  out.scalar_type = static_cast<ScalarType>(layout->scalar_type());
  // Both vectors are present: checked_layout_nbytes() rejected the file at load otherwise.
  out.sizes = Span<const int32_t>(layout->sizes()->data(), layout->sizes()->size());
  out.dim_order = Span<const uint8_t>(layout->dim_order()->data(), layout->dim_order()->size());
  return out;
}

Result<FreeableBuffer> SegmentedDataMap::get_data(const char* key) const {
  ES_ASSIGN_OR_RETURN(const schema::NamedData* entry, find(key));
  const schema::DataSegment* segment = segments_->Get(entry->segment_index());
  return loader_->load(static_cast<size_t>(base_ + segment->offset()),
                       static_cast<size_t>(segment->size()));
}

Status SegmentedDataMap::load_data_into(const char* key, void* dst, size_t size) const {
  ES_ASSIGN_OR_RETURN(const schema::NamedData* entry, find(key));
  const schema::DataSegment* segment = segments_->Get(entry->segment_index());
  ES_CHECK_OR_RETURN_ERROR(size >= segment->size(), Error::InvalidArgument,
                           "load_data_into: key '%s' in %s needs %llu bytes, destination has %zu",
                           key, name(), static_cast<unsigned long long>(segment->size()), size);
  return loader_->load_into(static_cast<size_t>(base_ + segment->offset()),
                            static_cast<size_t>(segment->size()), dst);
}

size_t SegmentedDataMap::get_num_keys() const { return entries_ == nullptr ? 0 : entries_->size(); }

Result<const char*> SegmentedDataMap::get_key(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < get_num_keys(), Error::OutOfRange,
                           "key index %zu is past the %zu keys of %s", index, get_num_keys(),
                           name());
  return entries_->Get(static_cast<flatbuffers::uoffset_t>(index))->key()->c_str();
}

Result<Digest> SegmentedDataMap::get_digest(const char* key) const {
  ES_ASSIGN_OR_RETURN(const schema::NamedData* entry, find(key));
  Digest digest;
  std::memcpy(digest.bytes.data(), entry->digest()->data(), kDigestSize);
  return digest;
}

}  // namespace runtime
}  // namespace edgeshare
