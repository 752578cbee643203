#include "edgeshare/generation/adapter_tables.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace edgeshare {
namespace generation {

using runtime::Digest;
using runtime::Error;
using runtime::FreeableBuffer;
using runtime::NamedDataMap;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;
using runtime::TensorLayout;

namespace {

constexpr size_t kAlignment = 64;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

const char* dtype_name(ScalarType type) {
  return type == ScalarType::Half ? "float16" : type == ScalarType::Float ? "float32" : "other";
}

}  // namespace

Result<std::unique_ptr<AdapterTables>> AdapterTables::create(const NamedDataMap& initial,
                                                             const Digest* foundation) {
  std::unique_ptr<AdapterTables> tables(new AdapterTables());
  if (foundation != nullptr) tables->foundation_ = *foundation;
  const size_t keys = initial.get_num_keys();
  ES_CHECK_OR_RETURN_ERROR(keys > 0, Error::InvalidProgram, "%s holds no adapter tables",
                           initial.name());
  tables->tables_.reserve(keys);
  for (size_t i = 0; i < keys; ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, initial.get_key(i));
    ES_ASSIGN_OR_RETURN(TensorLayout layout, initial.get_tensor_layout(key));
    Table table;
    table.key = key;
    ES_CHECK_OR_RETURN_ERROR(
        ends_with(table.key, ".lora_a") || ends_with(table.key, ".lora_b"), Error::InvalidProgram,
        "%s: '%s' is not an adapter table (.lora_a or .lora_b)", initial.name(), key);
    table.is_a = ends_with(table.key, ".lora_a");
    const bool typed =
        layout.scalar_type == ScalarType::Float || layout.scalar_type == ScalarType::Half;
    ES_CHECK_OR_RETURN_ERROR(typed && layout.sizes.size() == 3, Error::InvalidProgram,
                             "%s: table '%s' is not a float32 or float16 [slots, rows, cols] table",
                             initial.name(), key);
    ES_CHECK_OR_RETURN_ERROR(i == 0 || layout.scalar_type == tables->dtype_, Error::InvalidProgram,
                             "%s: table '%s' is %s, the others %s", initial.name(), key,
                             dtype_name(layout.scalar_type), dtype_name(tables->dtype_));
    tables->dtype_ = layout.scalar_type;
    tables->element_size_ = layout.scalar_type == ScalarType::Half ? 2 : sizeof(float);
    for (size_t d = 0; d < 3; ++d) table.sizes[d] = layout.sizes[d];
    const size_t slots = static_cast<size_t>(table.sizes[0]);
    const size_t rank = static_cast<size_t>(table.is_a ? table.sizes[1] : table.sizes[2]);
    ES_CHECK_OR_RETURN_ERROR(i == 0 || (slots == tables->slots_ && rank == tables->rank_),
                             Error::InvalidProgram,
                             "%s: table '%s' has %zu slots of rank %zu, the others %zu of rank %zu",
                             initial.name(), key, slots, rank, tables->slots_, tables->rank_);
    tables->slots_ = slots;
    tables->rank_ = rank;
    const size_t bytes = table.numel() * tables->element_size_;
    const size_t nbytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    table.data = std::unique_ptr<uint8_t, void (*)(void*)>(
        static_cast<uint8_t*>(std::aligned_alloc(kAlignment, nbytes > 0 ? nbytes : kAlignment)),
        std::free);
    ES_CHECK_OR_RETURN_ERROR(table.data != nullptr, Error::MemoryAllocationFailed,
                             "no memory for adapter table '%s' (%zu bytes)", key, nbytes);
    ES_RETURN_IF_ERROR(initial.load_data_into(key, table.data.get(), bytes));
    ES_ASSIGN_OR_RETURN(table.digest, initial.get_digest(key));
    tables->tables_.push_back(std::move(table));
  }
  return tables;
}

const AdapterTables::Table* AdapterTables::find(const char* key) const {
  for (const Table& t : tables_) {
    if (t.key == key) return &t;
  }
  return nullptr;
}

Status AdapterTables::load(size_t slot, const runtime::DataFile& adapter) {
  const NamedDataMap& map = adapter.map();
  ES_CHECK_OR_RETURN_ERROR(slot < slots_, Error::OutOfRange, "adapter slot %zu is outside 0..%zu",
                           slot, slots_ - 1);
  if (foundation_.has_value()) {
    const Digest* recorded = adapter.foundation_digest();
    ES_CHECK_OR_RETURN_ERROR(
        recorded != nullptr && *recorded == *foundation_, Error::InvalidArgument,
        "%s is not an adapter of this batch program's foundation (%s)", adapter.path(),
        recorded == nullptr ? "it records no foundation" : "it was exported over another one");
  }
  const size_t keys = map.get_num_keys();
  ES_CHECK_OR_RETURN_ERROR(keys > 0, Error::InvalidArgument, "%s holds no adapter factors",
                           adapter.path());
  for (size_t i = 0; i < keys; ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, map.get_key(i));
    const Table* table = find(key);
    ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::InvalidArgument,
                             "%s: '%s' is not a layer of this batch program's adapters",
                             adapter.path(), key);
    ES_ASSIGN_OR_RETURN(TensorLayout layout, map.get_tensor_layout(key));
    const bool fits = layout.scalar_type == dtype_ && layout.sizes.size() == 2 &&
                      (table->is_a ? layout.sizes[0] <= static_cast<int32_t>(rank_) &&
                                         layout.sizes[1] == table->sizes[2]
                                   : layout.sizes[0] == table->sizes[1] &&
                                         layout.sizes[1] <= static_cast<int32_t>(rank_));
    ES_CHECK_OR_RETURN_ERROR(
        fits, Error::InvalidArgument, "%s: '%s' is not a %s %s of at most rank %zu", adapter.path(),
        key, dtype_name(dtype_), table->is_a ? "[rank, in] factor" : "[out, rank] factor", rank_);
  }
  ES_RETURN_IF_ERROR(clear(slot));
  for (size_t i = 0; i < keys; ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, map.get_key(i));
    const Table& table = *find(key);
    ES_ASSIGN_OR_RETURN(TensorLayout layout, map.get_tensor_layout(key));
    ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, map.get_data(key));
    const auto* from = static_cast<const uint8_t*>(bytes.data());
    const size_t rows = static_cast<size_t>(table.sizes[1]),
                 cols = static_cast<size_t>(table.sizes[2]), e = element_size_;
    uint8_t* to = table.data.get() + slot * rows * cols * e;
    if (table.is_a) {
      std::memcpy(to, from, layout.numel() * e);
    } else {
      const size_t r = static_cast<size_t>(layout.sizes[1]);
      for (size_t o = 0; o < rows; ++o) std::memcpy(to + o * cols * e, from + o * r * e, r * e);
    }
  }
  return Status();
}

Status AdapterTables::clear(size_t slot) {
  ES_CHECK_OR_RETURN_ERROR(slot < slots_, Error::OutOfRange, "adapter slot %zu is outside 0..%zu",
                           slot, slots_ - 1);
  for (Table& table : tables_) {
    const size_t per_slot = static_cast<size_t>(table.sizes[1]) * table.sizes[2];
    std::memset(table.data.get() + slot * per_slot * element_size_, 0, per_slot * element_size_);
  }
  return Status();
}

Result<TensorLayout> AdapterTables::get_tensor_layout(const char* key) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  TensorLayout layout;
  layout.scalar_type = dtype_;
  layout.sizes = Span<const int32_t>(table->sizes, 3);
  layout.dim_order = Span<const uint8_t>(table->dim_order, 3);
  return layout;
}

Result<FreeableBuffer> AdapterTables::get_data(const char* key) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  return FreeableBuffer(table->data.get(), table->numel() * element_size_, nullptr);
}

Status AdapterTables::load_data_into(const char* key, void* dst, size_t size) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  const size_t nbytes = table->numel() * element_size_;
  ES_CHECK_OR_RETURN_ERROR(size >= nbytes, Error::InvalidArgument,
                           "adapter table '%s' has %zu bytes, the buffer %zu", key, nbytes, size);
  std::memcpy(dst, table->data.get(), nbytes);
  return Status();
}

Result<const char*> AdapterTables::get_key(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < tables_.size(), Error::OutOfRange, "no adapter table %zu",
                           index);
  return tables_[index].key.c_str();
}

Result<Digest> AdapterTables::get_digest(const char* key) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  return table->digest;
}

bool AdapterTables::content_verified(const char* key) const { return find(key) != nullptr; }

}  // namespace generation
}  // namespace edgeshare
