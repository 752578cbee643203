#include "edgeshare/generation/adapter_tables.h"

#include <sys/mman.h>

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
constexpr size_t kHugePage = size_t{2} << 20;

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

const char* dtype_name(ScalarType type) {
  switch (type) {
    case ScalarType::Half:
      return "float16";
    case ScalarType::Float:
      return "float32";
    case ScalarType::Char:
      return "int8";
    default:
      return "other";
  }
}

// The key of the factor whose row scales `key` holds ("x.lora_a" of "x.lora_a_scales").
std::string factor_of(const std::string& key) {
  return key.substr(0, key.size() - std::strlen("_scales"));
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
  bool have_factor = false;
  size_t total = 0;
  for (size_t i = 0; i < keys; ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, initial.get_key(i));
    ES_ASSIGN_OR_RETURN(TensorLayout layout, initial.get_tensor_layout(key));
    Table table;
    table.key = key;
    table.scales = ends_with(table.key, ".lora_a_scales") || ends_with(table.key, ".lora_b_scales");
    ES_CHECK_OR_RETURN_ERROR(
        table.scales || ends_with(table.key, ".lora_a") || ends_with(table.key, ".lora_b"),
        Error::InvalidProgram,
        "%s: '%s' is not an adapter table (.lora_a, .lora_b or their _scales)", initial.name(),
        key);
    table.is_a = ends_with(table.key, table.scales ? ".lora_a_scales" : ".lora_a");
    table.type = layout.scalar_type;
    table.element_size = runtime::element_size(layout.scalar_type);
    table.dims = table.scales ? 2 : 3;
    if (table.scales) {
      ES_CHECK_OR_RETURN_ERROR(layout.scalar_type == ScalarType::Float && layout.sizes.size() == 2,
                               Error::InvalidProgram,
                               "%s: table '%s' is not a float32 [slots, rows] scales table",
                               initial.name(), key);
    } else {
      const bool typed = layout.scalar_type == ScalarType::Float ||
                         layout.scalar_type == ScalarType::Half ||
                         layout.scalar_type == ScalarType::Char;
      ES_CHECK_OR_RETURN_ERROR(
          typed && layout.sizes.size() == 3, Error::InvalidProgram,
          "%s: table '%s' is not a float32, float16 or int8 [slots, rows, cols] table",
          initial.name(), key);
      ES_CHECK_OR_RETURN_ERROR(!have_factor || layout.scalar_type == tables->dtype_,
                               Error::InvalidProgram, "%s: table '%s' is %s, the others %s",
                               initial.name(), key, dtype_name(layout.scalar_type),
                               dtype_name(tables->dtype_));
      tables->dtype_ = layout.scalar_type;
    }
    for (size_t d = 0; d < table.dims; ++d) table.sizes[d] = layout.sizes[d];
    const size_t slots = static_cast<size_t>(table.sizes[0]);
    ES_CHECK_OR_RETURN_ERROR(i == 0 || slots == tables->slots_, Error::InvalidProgram,
                             "%s: table '%s' has %zu slots, the others %zu", initial.name(), key,
                             slots, tables->slots_);
    tables->slots_ = slots;
    if (!table.scales) {
      // a [slots, rank, in], b [slots, rank, out]: rank is dim 1 of both.
      const size_t rank = static_cast<size_t>(table.sizes[1]);
      ES_CHECK_OR_RETURN_ERROR(!have_factor || rank == tables->rank_, Error::InvalidProgram,
                               "%s: table '%s' has rank %zu, the others %zu", initial.name(), key,
                               rank, tables->rank_);
      tables->rank_ = rank;
      have_factor = true;
    }
    table.offset = total;
    total += (table.numel() * table.element_size + kAlignment - 1) / kAlignment * kAlignment;
    ES_ASSIGN_OR_RETURN(table.digest, initial.get_digest(key));
    tables->tables_.push_back(std::move(table));
  }
  ES_CHECK_OR_RETURN_ERROR(have_factor, Error::InvalidProgram, "%s holds no adapter factors",
                           initial.name());
  // int8 factors come with their rows' scales ([slots, rank] for a, [slots, out] for b), and
  // scales only with int8 factors.
  const bool quantized = tables->dtype_ == ScalarType::Char;
  for (const Table& table : tables->tables_) {
    if (table.scales) {
      ES_CHECK_OR_RETURN_ERROR(quantized, Error::InvalidProgram,
                               "%s: '%s' holds scales, but the factors are not int8",
                               initial.name(), table.key.c_str());
      const std::string factor = factor_of(table.key);
      const Table* of = tables->find(factor.c_str());
      ES_CHECK_OR_RETURN_ERROR(of != nullptr, Error::InvalidProgram,
                               "%s: scales '%s' have no factor '%s'", initial.name(),
                               table.key.c_str(), factor.c_str());
      // a's scales are one per rank row (its dim 1), b's one per output (its dim 2).
      const int32_t rows = of->sizes[table.is_a ? 1 : 2];
      ES_CHECK_OR_RETURN_ERROR(table.sizes[1] == rows, Error::InvalidProgram,
                               "%s: scales '%s' have %d rows, their factor %d", initial.name(),
                               table.key.c_str(), table.sizes[1], rows);
    } else if (quantized) {
      const std::string scales = table.key + "_scales";
      ES_CHECK_OR_RETURN_ERROR(tables->find(scales.c_str()) != nullptr, Error::InvalidProgram,
                               "%s: int8 table '%s' has no '%s'", initial.name(), table.key.c_str(),
                               scales.c_str());
    }
  }
  // One region for every table, in huge pages where the kernel gives them: a decode step reads
  // every live adapter's rows of every table, a few kilobytes here and there over tens of
  // megabytes, which in 4 KiB pages is a TLB miss per page.
  const size_t region = (total + kHugePage - 1) / kHugePage * kHugePage;
  tables->region_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, region)));
  ES_CHECK_OR_RETURN_ERROR(tables->region_ != nullptr, Error::MemoryAllocationFailed,
                           "no memory for the adapter tables (%zu bytes)", region);
  ::madvise(tables->region_.get(), region, MADV_HUGEPAGE);  // Advice: 4 KiB pages work too.
  for (Table& table : tables->tables_) {
    table.data = tables->region_.get() + table.offset;
    ES_RETURN_IF_ERROR(
        initial.load_data_into(table.key.c_str(), table.data, table.numel() * table.element_size));
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
    ES_RETURN_IF_ERROR(check_entry(adapter, key, *table));
  }
  ES_RETURN_IF_ERROR(clear(slot));
  for (size_t i = 0; i < keys; ++i) {
    ES_ASSIGN_OR_RETURN(const char* key, map.get_key(i));
    const Table& table = *find(key);
    ES_ASSIGN_OR_RETURN(TensorLayout layout, map.get_tensor_layout(key));
    ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, map.get_data(key));
    const auto* from = static_cast<const uint8_t*>(bytes.data());
    const size_t e = table.element_size;
    uint8_t* to = table.data + slot * table.slot_bytes();
    if (table.is_a || table.scales) {
      // [r, in] or [r] / [out]: the slot's first rows.
      std::memcpy(to, from, layout.numel() * e);
    } else {
      // The file's B [out, r] goes in transposed: the slot's first r rows of [rank, out].
      const size_t out = static_cast<size_t>(table.sizes[2]);
      const size_t r = static_cast<size_t>(layout.sizes[1]);
      for (size_t o = 0; o < out; ++o) {
        for (size_t p = 0; p < r; ++p) {
          std::memcpy(to + (p * out + o) * e, from + (o * r + p) * e, e);
        }
      }
    }
  }
  return Status();
}

Status AdapterTables::check_entry(const runtime::DataFile& adapter, const char* key,
                                  const Table& table) const {
  const NamedDataMap& map = adapter.map();
  ES_ASSIGN_OR_RETURN(TensorLayout layout, map.get_tensor_layout(key));
  const int32_t rank = static_cast<int32_t>(rank_);
  if (table.scales) {
    // Its factor's rows: a's r (that factor's own rank), b's outputs.
    const std::string factor = factor_of(table.key);
    Result<TensorLayout> of = map.get_tensor_layout(factor.c_str());
    const bool fits = layout.scalar_type == ScalarType::Float && layout.sizes.size() == 1 &&
                      of.ok() && of->sizes.size() == 2 &&
                      layout.sizes[0] == (table.is_a ? of->sizes[0] : table.sizes[1]);
    ES_CHECK_OR_RETURN_ERROR(fits, Error::InvalidArgument,
                             "%s: '%s' is not the float32 [%s] scales of its '%s'", adapter.path(),
                             key, table.is_a ? "rank" : "out", factor.c_str());
    return Status();
  }
  const bool fits = layout.scalar_type == dtype_ && layout.sizes.size() == 2 &&
                    (table.is_a ? layout.sizes[0] <= rank && layout.sizes[1] == table.sizes[2]
                                : layout.sizes[0] == table.sizes[2] && layout.sizes[1] <= rank);
  ES_CHECK_OR_RETURN_ERROR(
      fits, Error::InvalidArgument, "%s: '%s' is not a %s factor in %s of at most rank %zu",
      adapter.path(), key, table.is_a ? "[rank, in]" : "[out, rank]", dtype_name(dtype_), rank_);
  if (dtype_ == ScalarType::Char) {
    const std::string scales = table.key + "_scales";
    ES_CHECK_OR_RETURN_ERROR(map.get_tensor_layout(scales.c_str()).ok(), Error::InvalidArgument,
                             "%s: int8 factor '%s' comes without its '%s'", adapter.path(), key,
                             scales.c_str());
  }
  return Status();
}

Status AdapterTables::clear(size_t slot) {
  ES_CHECK_OR_RETURN_ERROR(slot < slots_, Error::OutOfRange, "adapter slot %zu is outside 0..%zu",
                           slot, slots_ - 1);
  for (Table& table : tables_) {
    std::memset(table.data + slot * table.slot_bytes(), 0, table.slot_bytes());
  }
  return Status();
}

Result<TensorLayout> AdapterTables::get_tensor_layout(const char* key) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  TensorLayout layout;
  layout.scalar_type = table->type;
  layout.sizes = Span<const int32_t>(table->sizes, table->dims);
  layout.dim_order = Span<const uint8_t>(table->dim_order, table->dims);
  return layout;
}

Result<FreeableBuffer> AdapterTables::get_data(const char* key) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  return FreeableBuffer(table->data, table->numel() * table->element_size, nullptr);
}

Status AdapterTables::load_data_into(const char* key, void* dst, size_t size) const {
  const Table* table = find(key);
  ES_CHECK_OR_RETURN_ERROR(table != nullptr, Error::NotFound, "no adapter table '%s'", key);
  const size_t nbytes = table->numel() * table->element_size;
  ES_CHECK_OR_RETURN_ERROR(size >= nbytes, Error::InvalidArgument,
                           "adapter table '%s' has %zu bytes, the buffer %zu", key, nbytes, size);
  std::memcpy(dst, table->data, nbytes);
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
