// Weight sharing: the switches and the statistics of the XNNPACK delegate's weights cache, for
// tools and tests. The cache itself (weights_cache.h) is the delegate's business; this header is
// all an embedder needs to turn sharing or content verification off or to report what was loaded,
// checked and packed.
//
// Sharing is on by default: every program and method in the process uses ONE cache, so a foundation
// weight is fetched from a NamedDataMap once and packed once. Turned off, each delegate handle made
// afterwards gets a private cache (handles already made keep the cache they were built with).
//
// Content verification is on by default: bytes fetched on a cache miss are hashed (SHA-256) and
// must equal the digest the delegate graph (and the data file) recorded for them before anything is
// packed or kept from them, so a data file whose bytes were changed under their digests fails to
// load (InvalidData naming the key and file) instead of running, and cannot supply a poisoned
// shared entry to other programs. A cache hit hashes nothing, so only first loads pay: SHA-256
// runs at 1.2-1.9 GB/s per core here, slower than packing, so a first load that is all packing
// takes ~3x as long with 1 delegate thread and ~1.7x with 2 (hash and pack overlap; see
// weights_cache_bench). Turning it off is the trusted-file mode: fetched bytes are used unchecked.
// Entries made while it is off are marked unchecked and are never handed to a load made while it
// is on (that load packs its own checked entry), so switching it off around trusted files cannot
// leak unchecked entries into later checked loads.
//
// Both switches are the runtime's (runtime/core/content_policy.h: set_share_constants,
// set_verify_content), which the executor honours too for the constants it reads outside the
// delegate; the functions here are thin forwards kept for existing callers.
//
//   edgeshare::xnnpack::set_weight_sharing(true);
//   ... load two programs over the same foundation.ptd ...
//   WeightsCacheStats stats = edgeshare::xnnpack::process_weights_cache_stats();
//   printf("packs=%llu hits=%llu\n", (unsigned long long)stats.packs,
//          (unsigned long long)stats.cache_hits);
//   for (const auto& [key, n] : stats.named_data_fetches) printf("%s fetched %zu\n", key.c_str(),
//   n); edgeshare::xnnpack::set_verify_content(false);   // only for files you trust
//
// Errors: none; these calls cannot fail.
// Thread-safety: every function may be called from any thread; a stats snapshot is consistent per
// cache (counters are read under the lock that updates them).
// Ownership: the stats struct is a copy; it does not point into the cache.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHT_SHARING_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHT_SHARING_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace edgeshare {
namespace xnnpack {

// What a weights cache (or all of them) fetched, packed and checked: the one set of counters each
// cache and the process keep.
struct WeightsCacheCounters {
  // How many times each key was fetched from a NamedDataMap (get_data), since the last reset.
  std::map<std::string, size_t> named_data_fetches;
  // Total bytes of those fetches.
  uint64_t bytes_fetched = 0;
  // Packed operators created (a fully connected op packs its weight and bias).
  uint64_t packs = 0;
  // Lookups answered by an already-packed entry or retained constant (no fetch, no pack, no hash).
  uint64_t cache_hits = 0;
  // Fetched buffers hashed to check them against their digest, the bytes hashed, and how many of
  // those checks failed. A hit never hashes, so an identity is hashed once while it stays cached.
  uint64_t verifications = 0;
  uint64_t bytes_verified = 0;
  uint64_t verification_failures = 0;
};

// A snapshot of a cache's (or all caches') counters and of what they hold.
struct WeightsCacheStats : WeightsCacheCounters {
  // Live packed entries, and the keys (weights and biases) they were packed from, sorted.
  size_t num_packed_entries = 0;
  std::vector<std::string> packed_data_names;
  // Keys whose fetched bytes a load in progress holds right now (from their fetch to the end of
  // that load), and keys of raw constants kept alive for elementwise operands, sorted.
  std::vector<std::string> unpacked_data_names;
  std::vector<std::string> retained_data_names;
};

// Turns process-wide sharing on (default) or off, for handles created (and Methods loaded) from
// now on. Forwards to runtime::set_share_constants.
void set_weight_sharing(bool enabled);
bool weight_sharing_enabled();

// Turns content verification on (default) or off for fetches made from now on, process-wide.
// Off means: the data files loaded while it is off are trusted as they are (see above). Forwards
// to runtime::set_verify_content.
void set_verify_content(bool enabled);
bool verify_content_enabled();

// Counters summed over every cache in the process (the shared one and every private one ever made,
// since the last reset); live entries and names summed over the caches alive right now.
WeightsCacheStats process_weights_cache_stats();

// Zeroes the process-wide counters (fetches, bytes, packs, hits, verifications); entries are
// untouched. For tests.
void reset_weights_cache_counters();

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHT_SHARING_H_
