// SHA-256 of bytes in memory, and the check of bytes against a digest recorded at export.
//
// Every named entry of a .pte/.ptd carries the SHA-256 of its bytes; code that is about to trust
// fetched bytes (the XNNPACK weights cache before it shares a packed weight, later the executor for
// zero-copy constants) checks them here. Hashing is OpenSSL's libcrypto (EVP SHA-256, which uses
// the CPU's SHA extensions where it has them: ~1.9 GB/s on the project's machines).
//
//   ES_ASSIGN_OR_RETURN(Digest d, sha256(bytes.data(), bytes.size()));
//   Status s = check_sha256(bytes.data(), bytes.size(), *map.get_digest(key));
//   if (!s.ok()) return s.WithContext("key '%s' in %s", key, map.name());
//
// Errors: InvalidArgument (null data with a non-zero size), Internal (libcrypto failed: out of
// memory, or no SHA-256 provider), InvalidData (check_sha256: the bytes hash to something else).
// Thread-safety: both functions may be called from any number of threads at once.
// Ownership: nothing is kept; `data` is only read during the call. Allocation: none here beyond
// OpenSSL's own per-call digest context (the SHA-256 implementation is fetched once per process).

#ifndef EDGESHARE_RUNTIME_CORE_SHA256_H_
#define EDGESHARE_RUNTIME_CORE_SHA256_H_

#include <cstddef>

#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

// The SHA-256 of `size` bytes at `data` (data may be null when size is 0).
Result<Digest> sha256(const void* data, size_t size);

// Ok when the bytes hash to `expected`; otherwise InvalidData saying how many bytes were hashed and
// the first bytes of both digests. The caller adds which key and file (WithContext).
Status check_sha256(const void* data, size_t size, const Digest& expected);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_SHA256_H_
