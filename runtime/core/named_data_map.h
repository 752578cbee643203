// NamedDataMap: read-only access to named blobs (weights, delegate data) by string key.
//
// The interface a backend depends on to fetch its constants without knowing where they live:
// the program's own named data (PteDataMap), a .ptd data file (FlatTensorDataMap), or several of
// them merged (MergedDataMap). Every entry has a SHA-256 digest written at export, so a caller can
// recognise the same bytes under another key, or in another file, without reading them.
//
//   ES_ASSIGN_OR_RETURN(TensorLayout layout, map.get_tensor_layout("layers.0.weight"));
//   ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, map.get_data("layers.0.weight"));
//   ... bytes.free();
//
// Thread-safety: every method may be called from several threads at once.
// Ownership: returned layouts, keys and digests point into the map and live as long as it does;
// a FreeableBuffer from get_data is the caller's and may be held until the map is destroyed.

#ifndef EDGESHARE_RUNTIME_CORE_NAMED_DATA_MAP_H_
#define EDGESHARE_RUNTIME_CORE_NAMED_DATA_MAP_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/scalar_type.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace runtime {

// How a tensor entry's bytes are laid out. Opaque entries have none.
struct TensorLayout {
  ScalarType scalar_type = ScalarType::Float;
  Span<const int32_t> sizes;
  Span<const uint8_t> dim_order;

  size_t numel() const {
    size_t n = 1;
    for (int32_t s : sizes) n *= static_cast<size_t>(s);
    return n;
  }
  size_t nbytes() const { return numel() * element_size(scalar_type); }
};

// SHA-256 of an entry's bytes.
struct Digest {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const Digest& other) const { return bytes == other.bytes; }
  bool operator!=(const Digest& other) const { return !(*this == other); }
};

class NamedDataMap {
 public:
  virtual ~NamedDataMap() = default;

  // The layout of a tensor entry. Errors: NotFound (no such key), InvalidArgument (an opaque entry,
  // which has no layout).
  virtual Result<TensorLayout> get_tensor_layout(const char* key) const = 0;

  // The entry's bytes, zero-copy where the loader allows. Errors: NotFound, loader errors.
  virtual Result<FreeableBuffer> get_data(const char* key) const = 0;

  // Copies the entry into dst. Errors: NotFound, InvalidArgument if `size` is smaller than the
  // entry, loader errors.
  virtual Status load_data_into(const char* key, void* dst, size_t size) const = 0;

  // The number of keys, and the i-th key (in the map's order). get_key errors: OutOfRange.
  virtual size_t get_num_keys() const = 0;
  virtual Result<const char*> get_key(size_t index) const = 0;

  // The entry's SHA-256, as written at export. Errors: NotFound.
  virtual Result<Digest> get_digest(const char* key) const = 0;

  // Which file(s) this map reads, for messages, e.g. "foundation.ptd". Never null.
  virtual const char* name() const = 0;

  // Content-verification memo. A map whose bytes cannot change while it lives (a read-only mapping,
  // which every zero-copy constant already trusts to stay put) may remember that an entry's bytes
  // matched its own digest, so that acquiring the entry again, e.g. an adapter swapped back in,
  // does not hash it again. The default remembers nothing; wrappers forward to the map they wrap.
  virtual bool content_verified(const char* key) const {
    (void)key;
    return false;
  }
  virtual void set_content_verified(const char* key) const { (void)key; }
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_NAMED_DATA_MAP_H_
