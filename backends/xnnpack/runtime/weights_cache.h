// WeightsCache: the XNNPACK delegate's store of packed weights, shared by every method and program.
//
// The XNNPACK here has no weights-cache hook, so the delegate packs weights itself: a packed entry
// is a PackedOperator (packed_operator.h: it owns its packed weights and bias). Entries are keyed
// by what the weights are (SHA-256 digest + dtype + dims, from the delegate graph), never by key
// name, plus the op kind and packing parameters; the key of a missing bias is an explicit "no
// bias". Because the graph carries identities, the cache is asked BEFORE anything is fetched: a hit
// costs no NamedDataMap call and no hashing.
//
// On a miss, for each named constant: (1) the map's recorded digest for the key must equal the
// graph's (a cheap check that the right file was given, which a hostile file passes by copying the
// digest; no bytes read); (2) the bytes are fetched once and must be at least as large as dtype x
// dims; (3) with content verification on (the default, see weight_sharing.h) the SHA-256 of ALL
// fetched bytes (the whole entry) is computed and must equal that digest. Only then is an entry
// published: the slabs' operators are created while the bytes are hashed and deleted unpublished
// if the hash differs; a retained constant is hashed before it is kept. Either way a failed check
// caches nothing, so a file with bytes changed under their digests fails for its own load and
// cannot poison the entry another (honest) program gets later. The fetched bytes are given back as
// soon as they are hashed and packed. Inline constants (carried in the graph) are their own
// identity and are not hashed.
//
// A graph asks for all its fully connected entries in ONE call (the batch form of
// get_or_pack_fully_connected): every miss is reserved and fetched first, then all their hashes
// (one task per entry: SHA-256 is sequential within one entry) and all their slab packs (one task
// per slab) go to the delegate's threadpool in one call, so with 2+ threads a first load keeps
// every thread busy to the end instead of one thread hashing while the others wait for it.
//
//   WeightsCache& cache = WeightsCache::shared();   // or a private WeightsCache
//   ES_ASSIGN_OR_RETURN(PackedOperator* fc,
//       cache.get_or_pack_fully_connected(map, weight_ref, &bias_ref, in_channels, out_channels));
//   ES_RETURN_IF_ERROR(fc->run_fully_connected(batch, input, output, pool));   // any thread
//   cache.release(fc);                                                   // when the handle goes
//
// Errors: NotFound (key missing in the map), InvalidData (recorded digest differs from the graph's,
// too few bytes, or bytes whose SHA-256 differs from the digest), DelegateInitFailed (XNNPACK
// refused to create the operator), loader errors, each naming the key and the map's file(s). A
// failed call leaves the cache as it was (only its counters move): no entry added, no reference
// taken, no bytes held.
// Thread-safety: every member may be called from any thread. A call reserves its misses under the
// cache's lock ("being packed" entries), then fetches, hashes and packs WITHOUT the lock and
// publishes the entries under it: loads of different weights pack at the same time, while a
// requester of a key being packed elsewhere waits, holding no reservation of its own (so two
// loads never wait for each other), until that entry is published (then hits it) or dropped
// because that load's bytes failed their checks (then packs it itself), so no entry is ever
// packed twice. A PackedOperator serialises its own setup + run under its own lock, so two handles
// sharing it may run on two threads. A miss hashes and packs on the pool of the calling thread's
// current Threads (threadpool.h).
// Ownership: entries are reference-counted by their users (get_or_pack / retain_constant add one,
// release drops one; the last release deletes). Pointers stay valid until that last release.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHTS_CACHE_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHTS_CACHE_H_

#include <xnnpack.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/packed_operator.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/scalar_type.h"
#include "edgeshare/runtime/executor/external_constants.h"

namespace edgeshare {
namespace xnnpack {

// What a constant is, independent of the key it is stored under. Named constants are identified by
// digest; inline constants (tiny, carried in the graph) by their bytes.
struct ConstantIdentity {
  runtime::Digest digest;
  bool is_inline = false;
  std::vector<uint8_t> inline_bytes;
  runtime::ScalarType dtype = runtime::ScalarType::Float;
  std::vector<uint32_t> dims;

  size_t numel() const;
  size_t nbytes() const { return numel() * runtime::element_size(dtype); }
  bool operator==(const ConstantIdentity& other) const;
  bool operator!=(const ConstantIdentity& other) const { return !(*this == other); }
};

// A constant as the graph names it: its key (empty when inline) and its identity.
struct ConstantRef {
  std::string key;
  ConstantIdentity identity;
};

// One fully connected entry a graph needs: weight [output_channels, input_channels] and, with
// has_bias, bias [output_channels]; an int8 (Char, QC8W) weight has its float scales
// [output_channels] (has_scales), which are part of the entry's identity as the weight is.
struct FullyConnectedRequest {
  // The weight's format row (fc_format.h); null: the row of the weight's dtype (fc_format(dtype)),
  // which is the only row of every dtype but int8's.
  const FcFormat* format = nullptr;
  ConstantRef weight;
  bool has_bias = false;
  ConstantRef bias;
  bool has_scales = false;
  ConstantRef scales;
  size_t input_channels = 0;
  size_t output_channels = 0;
};

// Raw bytes of a named constant that an operator reads at every run (an elementwise operand), kept
// alive and shared by identity until its last user releases it.
class RetainedConstant {
 public:
  RetainedConstant(runtime::FreeableBuffer buffer, std::string key)
      : buffer_(std::move(buffer)), key_(std::move(key)) {}
  const float* data() const { return static_cast<const float*>(buffer_.data()); }
  size_t size() const { return buffer_.size(); }
  const std::string& key() const { return key_; }

 private:
  runtime::FreeableBuffer buffer_;
  std::string key_;
};

class WeightsCache {
 public:
  // Slabs of about `slab_bytes` packed bytes each; 0 packs every weight as one operator. The
  // default is the measured best (slabs_bench.cc); other values are for measuring.
  explicit WeightsCache(size_t slab_bytes = default_slab_bytes());
  // Deletes whatever is left (a leak elsewhere must not leak XNNPACK operators too).
  ~WeightsCache();
  WeightsCache(const WeightsCache&) = delete;
  WeightsCache& operator=(const WeightsCache&) = delete;

  // The process-wide cache (never destroyed, so static destructors cannot race with users).
  static WeightsCache& shared();

  // The fully connected operator for weight [out, in] and optional bias [out] (null: no bias),
  // packed on the first request and shared afterwards. Adds one reference. Named constants are
  // fetched from `map` only on a miss; inline ones come from their identity's bytes. A Float
  // weight makes an f32 operator, a Half weight the delegate's f16w packing (a different op kind
  // in the key, so the two never share an entry); the bias, if any, has the weight's dtype. A
  // Char (int8) weight comes through the batch form with its scales (FullyConnectedRequest) and a
  // Float bias.
  // Errors: see the header comment; InvalidArgument when a named constant is needed and map is
  // null, or when the weight is neither Float nor Half or the bias dtype differs from the weight's.
  runtime::Result<PackedOperator*> get_or_pack_fully_connected(const runtime::NamedDataMap* map,
                                                               const ConstantRef& weight,
                                                               const ConstantRef* bias,
                                                               size_t input_channels,
                                                               size_t output_channels);
  // The entries of several fully connected ops at once (a graph's, in node order): the same
  // result, errors, counters and cache state as calling the form above once per request in order
  // and stopping at the first failure, but all misses are fetched first and then hashed and packed
  // in one threadpool call (see the header comment). On success `entries` gets one entry (one
  // reference) per request, in order. On failure nothing is held (entries cleared, every reference
  // the call took given back, nothing published), `*failed` is the index of the first request
  // that failed and the Status is its error; work already done on later requests is dropped
  // uncounted, as if those requests had never been made.
  runtime::Status get_or_pack_fully_connected(const runtime::NamedDataMap* map,
                                              const std::vector<FullyConnectedRequest>& requests,
                                              std::vector<PackedOperator*>* entries,
                                              size_t* failed);
  void release(PackedOperator* entry);

  // The bytes of a named constant, fetched on the first request and kept until the last release.
  runtime::Result<RetainedConstant*> retain_constant(const runtime::NamedDataMap* map,
                                                     const ConstantRef& ref);
  void release(RetainedConstant* constant);

  // Live packed entries.
  size_t get_num_packed_data() const;

  // This cache's counters (since it was made) and contents.
  WeightsCacheStats stats() const;

 private:
  struct PackedKey {
    uint8_t op_kind = 0;
    // Packed from hashed bytes. Unchecked entries (verification off) serve only unchecked loads.
    bool verified = false;
    ConstantIdentity weight;
    bool has_bias = false;
    ConstantIdentity bias;
    bool has_scales = false;
    ConstantIdentity scales;
    size_t input_channels = 0;
    size_t output_channels = 0;
    bool operator==(const PackedKey& other) const;
  };
  struct PackedKeyHash {
    size_t operator()(const PackedKey& key) const;
  };
  struct IdentityHash {
    size_t operator()(const ConstantIdentity& identity) const;
  };
  struct RetainedKey {
    ConstantIdentity identity;
    bool verified = false;  // As PackedKey::verified.
    bool operator==(const RetainedKey& other) const {
      return verified == other.verified && identity == other.identity;
    }
  };
  struct RetainedKeyHash {
    size_t operator()(const RetainedKey& key) const {
      return IdentityHash()(key.identity) ^ static_cast<size_t>(key.verified);
    }
  };
  // A packed entry and its users. `op` is set when the entry is published; until then the entry
  // is a reservation ("being packed": a requester of the same key waits for it).
  struct PackedEntry {
    std::unique_ptr<PackedOperator> op;
    size_t refs = 0;
    bool packing = true;
  };
  struct RetainedEntry {
    std::unique_ptr<RetainedConstant> constant;
    size_t refs = 0;
  };
  // The bytes of one constant for a miss: borrowed (inline, or a retained constant pinned by one
  // more reference until the miss ends; already checked if they needed it) or fetched by this miss
  // (to be hashed when `unchecked`; its key is among held_ until the miss ends).
  struct Bytes {
    const void* data = nullptr;
    size_t size = 0;
    runtime::FreeableBuffer owned;
    RetainedConstant* pinned = nullptr;
    runtime::ExternalConstant shared;  // bytes the executor holds for the same identity
    bool unchecked = false;
    bool from_map = false;  // Fetched from the map by this miss: one fetch to count.
    std::string held_key;   // Its entry in held_, when from_map.
  };
  struct Miss;
  struct BatchJob;

  // The map's bytes for `ref` after checking its digest, not yet counted: no lock needed.
  runtime::Result<runtime::FreeableBuffer> fetch_unlocked(const runtime::NamedDataMap* map,
                                                          const ConstantRef& ref);
  // Counts one fetch of `size` bytes of `ref`.
  void count_fetch_locked(const ConstantRef& ref, size_t size);
  runtime::Result<runtime::FreeableBuffer> fetch_locked(const runtime::NamedDataMap* map,
                                                        const ConstantRef& ref);
  // Sorted, duplicate-free keys of the published entries.
  std::vector<std::string> packed_names_locked() const;
  // Bytes the cache already has for `ref` (see Bytes); false when they must be fetched.
  bool borrow_locked(const ConstantRef& ref, bool verify, Bytes* bytes);
  // Borrowed or fetched bytes for a miss (a fetch is counted later, by finish_locked); takes the
  // lock only around the cache's own state.
  runtime::Status bytes_for_miss(const runtime::NamedDataMap* map, const ConstantRef& ref,
                                 bool verify, Bytes* bytes);
  // Gives back a miss's bytes (owned ones freed, a pinned constant released).
  void drop_bytes_locked(Bytes* bytes);
  // Fills in the key of each request's miss, up to the first request whose dtypes are refused:
  // returns its index (with its error), or the number of requests.
  static size_t key_misses(const std::vector<FullyConnectedRequest>& requests, Miss* misses,
                           runtime::Status* error);
  // Waits (holding no reservation) until no key of misses[0, count) is being packed by another
  // load, then hits or reserves each: a "being packed" entry for a new key, or the entry of an
  // earlier miss of the batch with the same key.
  void reserve_locked(std::unique_lock<std::mutex>* lock, Miss* misses, size_t count, bool verify);
  // Fills in a reserved entry's shape and slabs and gets its bytes, the lock not held.
  runtime::Status fetch_miss(const runtime::NamedDataMap* map, bool verify, Miss* miss);
  // Hashes and packs the reserved misses among misses[0, count), the lock not held.
  void hash_and_pack(Miss* misses, size_t count);
  // Counts and publishes one miss that got its bytes (or takes its hit), in request order; its
  // error if it failed (the reserved entry is removed then).
  runtime::Status finish_locked(const runtime::NamedDataMap* map, Miss* miss);
  // finish_locked for misses[0, fetched) in order, then the error `stop_error` of misses[fetched]
  // (when fetched < count), stopping at the first failure (its index in *failed); the misses
  // after it are abandoned. On failure every reference the batch took is given back.
  runtime::Status publish_locked(const runtime::NamedDataMap* map, Miss* misses, size_t count,
                                 size_t fetched, const runtime::Status& stop_error, size_t* failed);
  // Removes a miss's reserved entry uncounted, or gives back its hit's reference.
  void abandon_locked(Miss* miss);
  // Publishes a reserved entry with its operator (`status` ok) or removes it, and wakes waiting
  // requesters.
  void finish_reserved_locked(PackedEntry* entry, std::unique_ptr<PackedOperator> op,
                              const runtime::Status& status);
  // Drops one reference (the last one deletes the entry).
  void release_locked(PackedEntry* entry);
  PackedEntry* find_packed_locked(PackedKey* key, bool verify);
  RetainedEntry* find_retained_locked(const ConstantIdentity& identity, bool verify);
  void release_locked(RetainedConstant* constant);
  size_t published_count_locked() const;
  void count_hit_locked();
  void count_pack_locked();
  // Counts one hash of `size` bytes and, when `status` failed, returns it naming key and file.
  runtime::Status count_verification_locked(const runtime::NamedDataMap* map,
                                            const ConstantRef& ref, size_t size,
                                            const runtime::Status& status);

  const size_t slab_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable packed_cv_;  // Signalled when an entry stops being packed.
  std::unordered_map<PackedKey, PackedEntry, PackedKeyHash> packed_;
  std::unordered_map<RetainedKey, RetainedEntry, RetainedKeyHash> retained_;
  // Keys of the bytes loads in progress fetched and still hold (once per fetch).
  std::multiset<std::string> held_;
  WeightsCacheCounters counters_;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHTS_CACHE_H_
