// External constants: the bytes of constants that non-delegated kernels read from data files
// (.ptd), fetched, checked and shared for Method::load (method_loader.cc), one table per process.
//
// A Method holds one ExternalConstant per external constant it reads. Under the content policy
// (runtime/core/content_policy.h): with sharing on, every Method that reads the same key of the
// same data map with the same digest holds the SAME zero-copy view, fetched from the map once and
// hashed once while any Method holds it; with verification on, the view's bytes are hashed and must
// equal the map's recorded digest before any Method gets them, and bytes fetched unchecked
// (verification off) are never handed to a checked load. A map that remembers checked entries
// (NamedDataMap::content_verified: a DataFile while it is open) is hashed once per entry, so an
// adapter swapped out and back in is not hashed again.
//
//   ES_ASSIGN_OR_RETURN(ExternalConstant c,
//                       ExternalConstant::acquire(map, "ln1.weight", *map.get_digest("ln1.weight"),
//                                                 expected_nbytes));
//   use(c.data());   // valid while c lives (and the map outlives c)
//   ExternalConstantStats s = external_constant_stats();   // s.verifications, s.shared_hits
//
// Errors (acquire): the map's get_data errors; InvalidData when the bytes have another size than
// expected or (verification on) hash to something else, naming the key and the map's file(s);
// Internal if hashing fails.
// Thread-safety: acquire, release and the stats functions may be called from any thread at once.
// Ownership: an ExternalConstant owns a hold on the bytes; `map` must outlive it (the same rule as
// for the Method that loads against it). A table entry is identified by the map's address, so it is
// dropped with its last holder: a later map at the same address never meets an old entry.

#ifndef EDGESHARE_RUNTIME_EXECUTOR_EXTERNAL_CONSTANTS_H_
#define EDGESHARE_RUNTIME_EXECUTOR_EXTERNAL_CONSTANTS_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

// Counters of the process's external constant table since the last reset, and its live entries.
struct ExternalConstantStats {
  uint64_t fetches = 0;      // get_data calls made for external constants
  uint64_t shared_hits = 0;  // acquires answered by a view another Method holds (no fetch, no hash)
  uint64_t verifications = 0;  // views hashed against their digest
  uint64_t bytes_verified = 0;
  uint64_t verification_failures = 0;
  uint64_t verifications_remembered = 0;  // views not hashed: their map had checked those bytes
  size_t live_entries = 0;                // shared views held right now
};

class ExternalConstant {
 public:
  // The bytes of `key` in `map` (nbytes long, recorded with `digest`), per the content policy.
  static Result<ExternalConstant> acquire(const NamedDataMap& map, const char* key,
                                          const Digest& digest, size_t nbytes);

  // A hold on bytes a Method already holds for `key` with `digest`, read from ANY map (the digest
  // is the identity; with `verified`, only bytes that were hashed), or an empty ExternalConstant
  // (data() null) when none is live. Never fetches. For a delegate packing a weight the executor
  // also reads (a tied embedding), so that the bytes leave the data file once.
  static ExternalConstant find_shared(const char* key, const Digest& digest, bool verified);

  ExternalConstant() = default;
  ExternalConstant(ExternalConstant&& other) noexcept;
  ExternalConstant& operator=(ExternalConstant&& other) noexcept;
  ExternalConstant(const ExternalConstant&) = delete;
  ExternalConstant& operator=(const ExternalConstant&) = delete;
  ~ExternalConstant() { release(); }

  const void* data() const;
  bool empty() const { return shared_ == nullptr && own_.data() == nullptr; }

  struct Entry;  // Opaque: a shared view in the process's table (external_constants.cc).

 private:
  explicit ExternalConstant(Entry* shared) : shared_(shared) {}
  explicit ExternalConstant(FreeableBuffer own) : own_(std::move(own)) {}
  void release();

  Entry* shared_ = nullptr;  // a hold on a table entry (sharing on), or
  FreeableBuffer own_;       // this Method's own view (sharing off)
};

ExternalConstantStats external_constant_stats();

// Whether `key` in `map` is a tensor of `type` and `sizes`, laid out contiguously: what a reader
// (named in messages, e.g. the .pte) of the external constant expects. Errors: the map's
// get_tensor_layout errors (prefixed with the key); InvalidData naming key, map and reader.
Status check_external_layout(const NamedDataMap& map, const char* key, ScalarType type,
                             Span<const int32_t> sizes, const char* reader);

// Zeroes the counters (live entries are untouched). For tests and tools.
void reset_external_constant_stats();

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_EXECUTOR_EXTERNAL_CONSTANTS_H_
