// WeightsCache: the XNNPACK delegate's store of packed weights, shared by every method and program.
//
// The XNNPACK here has no weights-cache hook, so the delegate packs weights itself: a packed entry
// IS an XNNPACK fully connected operator (it owns its packed weights and bias). Entries are keyed
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
// soon as they are hashed and packed (free_unpacked_data for load_unpacked_data's). Inline
// constants (carried in the graph) are their own identity and are not hashed.
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
//   ES_RETURN_IF_ERROR(fc->run_fully_connected(batch, input, output));   // any thread
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
// sharing it may run on two threads. A miss hashes and packs on the delegate's threadpool, so
// set_num_threads() must not run during a load either.
// Ownership: entries are reference-counted by their users (get_or_pack / retain_constant add one,
// release drops one; the last release deletes). Pointers stay valid until that last release.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHTS_CACHE_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHTS_CACHE_H_

#include <xnnpack.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
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
// has_bias, bias [output_channels].
struct FullyConnectedRequest {
  ConstantRef weight;
  bool has_bias = false;
  ConstantRef bias;
  size_t input_channels = 0;
  size_t output_channels = 0;
};

// Whether runs on a pool of 2+ threads give each thread whole slabs, one pool call per weight
// (measured at T=32, 2 threads, 1 MiB slabs: 0.49x of one operator per weight, against 0.59x when
// each slab is split over the pool; equal at T=1; and far less hurt when other processes share
// the cores, as it waits at one barrier per weight instead of one per slab).
constexpr bool kSlabsAcrossPool = true;

// A single-slab fully connected run of fewer FLOPs (2 x batch x in x out) than this runs on the
// calling thread even with 2+ threads: e.g. a LoRA A or B matrix at T=32 (1-2 MFLOP, 8-20 us on
// one core), where a pool call's wake-up and barrier cost about as much as they save, and on a busy
// machine the barrier waits for a descheduled pool thread. Multi-slab entries use parallel_for
// (threadpool.h), which never waits for a thread that took no work.
constexpr size_t kPoolMinFlops = size_t{32} << 20;

// A packed entry: the weights of one fully connected op, packed by XNNPACK fully connected
// operators with output range (-inf, +inf). Its weight dtype picks the operator: Float packs f32
// operators (float input and output), Half f16 ones (IEEE half input and output; the caller
// converts around them).
//
// The entry is split into column slabs: each slab is its own operator over output channels
// [first, first + count) (weight rows and bias of that range), writing its columns of the output
// in place (output stride = all output channels). XNNPACK's kernels walk the whole packed matrix
// once per tile of rows, so a weight larger than L2 is read from memory ~batch/7 times; a slab
// sized for L2 is read once and reused by every row tile. The slabs together are the one packed
// copy of the weight (one pack, one entry); a weight no larger than a slab is one slab.
class PackedOperator {
 public:
  PackedOperator(const PackedOperator&) = delete;
  PackedOperator& operator=(const PackedOperator&) = delete;
  // Deletes the operators (and so the packed weights). Only the cache deletes entries.
  ~PackedOperator();

  // setup + run of every slab under this entry's lock: an operator keeps the pointers of its last
  // setup, so a setup from one thread must not be followed by another thread's run. With 2+
  // delegate threads the slabs are spread over them by parallel_for (each slab on one thread, all
  // rows), otherwise they run one after the other. Where the delegate's kernels stand in for
  // XNNPACK's (packed_gemv.h), one row runs packed_gemv and more rows packed_gemm (prefetching the
  // next slab while it computes) over the same packed bytes: bitwise the same results, no operator
  // set up, so no lock (threads running one weight run at once).
  // Never allocates.
  // Errors: DelegateExecutionFailed naming the weight key.
  runtime::Status run_fully_connected(size_t batch_size, const float* input, float* output);
  // The same for an f16 entry: input [batch, in] and output [batch, out] are IEEE half values.
  // Errors: as above; InvalidArgument when the entry's kind is not the one called.
  runtime::Status run_fully_connected_f16(size_t batch_size, const void* input, void* output);

  // Float (f32 operators) or Half (f16 operators).
  runtime::ScalarType weight_dtype() const { return weight_dtype_; }

  size_t input_channels() const { return input_channels_; }
  size_t output_channels() const { return output_channels_; }
  size_t num_slabs() const { return slabs_.size(); }
  // Whether one-row runs go through packed_gemv, and runs of more rows through packed_gemm (every
  // slab in this entry's region, the kernel checked against XNNPACK on this machine), rather than
  // XNNPACK's operators.
  bool one_row_gemv() const { return one_row_gemv_; }
  bool rows_gemm() const { return rows_gemm_; }
  const std::string& weight_key() const { return weight_key_; }

 private:
  friend class WeightsCache;
  struct Slab {
    xnn_operator_t op = nullptr;
    size_t first = 0;  // First output channel.
    size_t count = 0;  // Output channels.
    // The operator's packed weights in region_ (null when XNNPACK placed them elsewhere).
    const void* packed = nullptr;
    size_t packed_bytes = 0;
    bool gemv = false;  // packed_gemv and packed_gemm read `packed` as XNNPACK's kernels would.
  };
  struct SlabRun;
  PackedOperator() = default;
  // Plans the slabs (about `slab_bytes` packed bytes each) and the region they will be packed in.
  void plan_slabs(size_t slab_bytes);
  // Pulls a slab into this core's caches before a run over enough rows to reuse it from there.
  static void touch_for(const Slab& slab, size_t batch_size);
  runtime::Status run(size_t batch_size, const void* input, void* output);
  // One slab over every row: with `own`, packed_gemv (one row) or packed_gemm prefetching `next`
  // (touching the slab first only when it is the `first` a thread runs, nothing prefetched it);
  // else touch_for, setup and run.
  xnn_status run_slab(const Slab& slab, const Slab* next, bool first, bool own, size_t batch_size,
                      const void* input, void* output, pthreadpool_t pool) const;
  xnn_status setup_slab(const Slab& slab, size_t batch_size, const void* input, void* output,
                        pthreadpool_t pool) const;

  std::vector<Slab> slabs_;
  // Where the slabs' packed weights live; unmapped after the destructor's body deleted the
  // operators.
  std::unique_ptr<PackedRegion> region_;
  bool slabs_across_pool_ = kSlabsAcrossPool;
  // Every slab is `gemv` and the kernel checked on this machine: runs of one row (packed_gemv) or
  // of several (packed_gemm) need no operator (set once packed, before publication).
  bool one_row_gemv_ = false;
  bool rows_gemm_ = false;
  std::mutex mutex_;
  // Guarded by the cache's lock: users holding the entry, and whether it is still being packed
  // (then it is nobody's yet: a requester of the same key waits for it).
  size_t refs_ = 0;
  bool packing_ = true;
  size_t input_channels_ = 0;
  size_t output_channels_ = 0;
  runtime::ScalarType weight_dtype_ = runtime::ScalarType::Float;
  std::string weight_key_;
  std::string bias_key_;
};

// Bytes of packed weights per column slab by default: a measured fraction of this core's L2
// (sysconf(_SC_LEVEL2_CACHE_SIZE), or kFallbackL2Bytes when the system does not say); see
// slabs_bench.cc for the measurement.
size_t default_slab_bytes();

// Raw bytes of a named constant that an operator reads at every run (an elementwise operand), kept
// alive and shared by identity until its last user releases it.
class RetainedConstant {
 public:
  const float* data() const { return static_cast<const float*>(buffer_.data()); }
  size_t size() const { return buffer_.size(); }

 private:
  friend class WeightsCache;
  runtime::FreeableBuffer buffer_;
  size_t refs_ = 0;
  std::string key_;
};

class WeightsCache {
 public:
  // Slabs of about `slab_bytes` packed bytes each; 0 packs every weight as one operator. With
  // `slabs_across_pool`, a run on a pool gives each pool thread whole slabs; without, every slab
  // in turn is split over the pool's threads. The defaults are the measured best
  // (slabs_bench.cc); other values are for measuring.
  explicit WeightsCache(size_t slab_bytes = default_slab_bytes(),
                        bool slabs_across_pool = kSlabsAcrossPool);
  // Deletes whatever is left (a leak elsewhere must not leak XNNPACK operators too).
  ~WeightsCache();
  WeightsCache(const WeightsCache&) = delete;
  WeightsCache& operator=(const WeightsCache&) = delete;

  // The process-wide cache (never destroyed, so static destructors cannot race with users).
  static WeightsCache& shared();

  // The fully connected operator for weight [out, in] and optional bias [out] (null: no bias),
  // packed on the first request and shared afterwards. Adds one reference. Named constants are
  // fetched from `map` only on a miss; inline ones come from their identity's bytes. A Float
  // weight makes an f32 operator, a Half weight an f16 one (a different op kind in the key, so the
  // two never share an entry); the bias, if any, has the weight's dtype.
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

  // Fetches `ref` from `map` once (remembering key <-> bytes) after checking the map's digest for
  // the key equals the graph's, and (verification on) that the bytes hash to it; returns the
  // bytes, valid until free_unpacked_data() or the next get_or_pack_fully_connected miss.
  runtime::Result<const void*> load_unpacked_data(const runtime::NamedDataMap* map,
                                                  const ConstantRef& ref);
  // Gives back every unpacked buffer (with an mmap loader the pages are unmapped).
  void free_unpacked_data();

  std::vector<std::string> get_packed_data_names() const;
  std::vector<std::string> get_unpacked_data_names() const;
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
  struct Unpacked {
    std::string key;
    runtime::Digest digest;
    bool verified = false;
    runtime::FreeableBuffer buffer;
  };
  // The bytes of one constant for a miss: borrowed (inline, or a retained constant pinned by one
  // more reference until the miss ends; already checked if they needed it) or owned by this miss
  // (fetched, or taken over from unpacked_; to be hashed when `unchecked`).
  struct Bytes {
    const void* data = nullptr;
    size_t size = 0;
    runtime::FreeableBuffer owned;
    RetainedConstant* pinned = nullptr;
    runtime::ExternalConstant shared;  // bytes the executor holds for the same identity
    bool unchecked = false;
    bool from_map = false;  // Fetched from the map by this miss: one fetch to count.
  };
  struct Miss;
  struct BatchJob;
  struct Counters {
    std::map<std::string, size_t> named_data_fetches;
    uint64_t bytes_fetched = 0;
    uint64_t packs = 0;
    uint64_t cache_hits = 0;
    uint64_t verifications = 0;
    uint64_t bytes_verified = 0;
    uint64_t verification_failures = 0;
  };

  // The map's bytes for `ref` after checking its digest, not yet counted: no lock needed.
  runtime::Result<runtime::FreeableBuffer> fetch_unlocked(const runtime::NamedDataMap* map,
                                                          const ConstantRef& ref);
  // Counts one fetch of `size` bytes of `ref`.
  void count_fetch_locked(const ConstantRef& ref, size_t size);
  runtime::Result<runtime::FreeableBuffer> fetch_locked(const runtime::NamedDataMap* map,
                                                        const ConstantRef& ref);
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
  // Publishes a reserved entry (`status` ok) or removes it, and wakes waiting requesters.
  void finish_reserved_locked(PackedOperator* entry, const runtime::Status& status);
  // Drops one reference (the last one deletes the entry).
  void release_locked(PackedOperator* entry);
  PackedOperator* find_packed_locked(PackedKey* key, bool verify);
  RetainedConstant* find_retained_locked(const ConstantIdentity& identity, bool verify);
  void release_locked(RetainedConstant* constant);
  size_t published_count_locked() const;
  void free_unpacked_data_locked();
  void count_hit_locked();
  void count_pack_locked();
  // Counts one hash of `size` bytes and, when `status` failed, returns it naming key and file.
  runtime::Status count_verification_locked(const runtime::NamedDataMap* map,
                                            const ConstantRef& ref, size_t size,
                                            const runtime::Status& status);

  const size_t slab_bytes_;
  const bool slabs_across_pool_;
  mutable std::mutex mutex_;
  std::condition_variable packed_cv_;  // Signalled when an entry stops being packed.
  std::unordered_map<PackedKey, std::unique_ptr<PackedOperator>, PackedKeyHash> packed_;
  std::unordered_map<RetainedKey, std::unique_ptr<RetainedConstant>, RetainedKeyHash> retained_;
  std::vector<Unpacked> unpacked_;
  Counters counters_;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WEIGHTS_CACHE_H_
