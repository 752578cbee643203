#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <utility>

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/runtime/core/content_policy.h"
#include "edgeshare/runtime/core/sha256.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::FreeableBuffer;
using runtime::NamedDataMap;
using runtime::Result;
using runtime::Status;

namespace {

// Process-wide bookkeeping behind weight_sharing.h: counters summed over every cache,
// and the set of live caches (for entry counts and names). Leaked on purpose, like the shared
// cache.
struct Process {
  std::mutex mutex;  // Guards `counters`. Taken after a cache's lock, never before one.
  WeightsCacheCounters counters;
};

Process& process() {
  static Process* p = new Process();
  return *p;
}

// Applies `count` to a cache's counters (under that cache's lock) and to the process's.
template <typename Count>
void count_both(WeightsCacheCounters* cache, Count count) {
  count(cache);
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  count(&p.counters);
}

// Live caches; its lock is taken BEFORE a cache's lock (stats), so it is separate from Process's.
struct Registry {
  std::mutex mutex;
  std::set<const WeightsCache*> caches;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

size_t hash_combine(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

const char* or_inline(const std::string& key) { return key.empty() ? "<inline>" : key.c_str(); }

void append_sorted_unique(std::vector<std::string>* names) {
  std::sort(names->begin(), names->end());
  names->erase(std::unique(names->begin(), names->end()), names->end());
}

// A request's format row (null: none has its dtype).
const FcFormat* request_format(const FullyConnectedRequest& r) {
  return r.format != nullptr ? r.format : fc_format(r.weight.identity.dtype);
}

// The inputs per scale of a request whose format has group scales (else 0).
size_t request_group_size(const FullyConnectedRequest& r) {
  const FcFormat* format = request_format(r);
  if (format == nullptr || !format->group_scales || !r.has_scales) return 0;
  const std::vector<uint32_t>& s = r.scales.identity.dims;
  return s.size() == 2 && s[1] > 0 ? r.input_channels / s[1] : 0;
}

// A request's weight, bias and scales against its weight's format row.
Status check_fully_connected_request(const FullyConnectedRequest& r) {
  const ConstantIdentity& weight = r.weight.identity;
  const char* key = or_inline(r.weight.key);
  const FcFormat* format = request_format(r);
  ES_CHECK_OR_RETURN_ERROR(format != nullptr && format->weight_dtype == weight.dtype,
                           Error::InvalidArgument,
                           "fully connected weight '%s' has dtype %s; Float, Half, Char or Byte "
                           "only, as its format's",
                           key, runtime::to_string(weight.dtype));
  if (format->packs_values()) {
    ES_CHECK_OR_RETURN_ERROR(
        !weight.is_inline && weight.dims.size() == 2 && weight.dims[0] == r.output_channels &&
            r.input_channels * format->value_bits % 8 == 0 &&
            weight.dims[1] == format->stored_in(r.input_channels),
        Error::InvalidArgument,
        "fully connected weight '%s' is %s [%zu x %zu]: it needs named uint8 [%zu, %zu] bytes",
        key, format->what, r.output_channels, r.input_channels, r.output_channels,
        format->stored_in(r.input_channels));
  }
  if (format->group_scales) {
    const std::vector<uint32_t>& s = r.scales.identity.dims;
    const size_t groups = s.size() == 2 ? s[1] : 0;
    const size_t group = request_group_size(r);
    ES_CHECK_OR_RETURN_ERROR(
        r.has_scales && groups > 0 && r.scales.identity.dtype == format->scales_dtype &&
            s[0] == r.output_channels && (group == 32 || group == 64 || group == 128) &&
            group * groups == r.input_channels,
        Error::InvalidArgument,
        "fully connected weight '%s' is %s [%zu x %zu]: it needs %s scales [%zu, in / group] "
        "for a group of 32, 64 or 128",
        key, format->what, r.output_channels, r.input_channels,
        runtime::to_string(format->scales_dtype), r.output_channels);
  } else {
    ES_CHECK_OR_RETURN_ERROR(
        format->has_scales == r.has_scales &&
            (!format->has_scales ||
             (r.scales.identity.dtype == format->scales_dtype &&
              r.scales.identity.dims.size() == 1 &&
              r.scales.identity.dims[0] == r.output_channels && !weight.is_inline)),
        Error::InvalidArgument,
        "fully connected weight '%s' is %s: float scales [%zu] go with a named Char weight only",
        key, runtime::to_string(weight.dtype), r.output_channels);
  }
  ES_CHECK_OR_RETURN_ERROR(
      !r.has_bias || r.bias.identity.dtype == format->bias_dtype, Error::InvalidArgument,
      "fully connected weight '%s' is %s but its bias '%s' is %s", key,
      runtime::to_string(weight.dtype), r.has_bias ? or_inline(r.bias.key) : "",
      r.has_bias ? runtime::to_string(r.bias.identity.dtype) : "");
  return Status();
}

// Fetched bytes must cover what the graph says the constant is (a longer entry is padding).
Status check_fetched_size(const NamedDataMap* map, const ConstantRef& ref,
                          const FreeableBuffer& bytes) {
  ES_CHECK_OR_RETURN_ERROR(bytes.data() != nullptr && bytes.size() >= ref.identity.nbytes(),
                           Error::InvalidData,
                           "XNNPACK delegate: key '%s' in %s holds %zu bytes, the graph needs %zu",
                           ref.key.c_str(), map->name(), bytes.size(), ref.identity.nbytes());
  return Status();
}

}  // namespace

size_t ConstantIdentity::numel() const {
  size_t n = 1;
  for (uint32_t d : dims) n *= d;
  return n;
}

bool ConstantIdentity::operator==(const ConstantIdentity& other) const {
  if (is_inline != other.is_inline || dtype != other.dtype || dims != other.dims) return false;
  return is_inline ? inline_bytes == other.inline_bytes : digest == other.digest;
}

size_t WeightsCache::IdentityHash::operator()(const ConstantIdentity& identity) const {
  size_t h = static_cast<size_t>(identity.is_inline);
  if (identity.is_inline) {
    // FNV-1a over the (tiny) inline bytes.
    size_t f = 1469598103934665603ULL;
    for (uint8_t b : identity.inline_bytes) f = (f ^ b) * 1099511628211ULL;
    h = hash_combine(h, f);
  } else {
    // A SHA-256 is already uniformly spread; its first 8 bytes are a fine hash.
    uint64_t prefix;
    std::memcpy(&prefix, identity.digest.bytes.data(), sizeof(prefix));
    h = hash_combine(h, static_cast<size_t>(prefix));
  }
  h = hash_combine(h, static_cast<size_t>(identity.dtype));
  for (uint32_t d : identity.dims) h = hash_combine(h, d);
  return h;
}

bool WeightsCache::PackedKey::operator==(const PackedKey& other) const {
  return op_kind == other.op_kind && verified == other.verified && weight == other.weight &&
         has_bias == other.has_bias && (!has_bias || bias == other.bias) &&
         has_scales == other.has_scales && (!has_scales || scales == other.scales) &&
         input_channels == other.input_channels && output_channels == other.output_channels;
}

size_t WeightsCache::PackedKeyHash::operator()(const PackedKey& key) const {
  IdentityHash identity_hash;
  size_t h = hash_combine(key.op_kind * 2u + key.verified, identity_hash(key.weight));
  h = hash_combine(h, key.has_bias ? identity_hash(key.bias) + 1 : 0);
  h = hash_combine(h, key.has_scales ? identity_hash(key.scales) + 1 : 0);
  h = hash_combine(h, key.input_channels);
  return hash_combine(h, key.output_channels);
}

WeightsCache::WeightsCache(size_t slab_bytes)
    : slab_bytes_(slab_bytes) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.caches.insert(this);
}

WeightsCache::~WeightsCache() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.caches.erase(this);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  packed_.clear();
  retained_.clear();
}

WeightsCache& WeightsCache::shared() {
  static WeightsCache* cache = new WeightsCache();
  return *cache;
}

Result<FreeableBuffer> WeightsCache::fetch_unlocked(const NamedDataMap* map,
                                                    const ConstantRef& ref) {
  const char* key = ref.key.c_str();
  ES_CHECK_OR_RETURN_ERROR(map != nullptr, Error::InvalidArgument,
                           "XNNPACK delegate needs named data '%s' but was given no NamedDataMap",
                           key);
  // The map's own record of what it holds under this key must be what the graph was built
  // against: the same key in an unrelated file is a different weight.
  Result<runtime::Digest> digest = map->get_digest(key);
  if (!digest.ok()) {
    return digest.status().WithContext("XNNPACK delegate: key '%s' in %s", key, map->name());
  }
  ES_CHECK_OR_RETURN_ERROR(*digest == ref.identity.digest, Error::InvalidData,
                           "XNNPACK delegate: key '%s' in %s has a different SHA-256 than the "
                           "delegate graph expects (wrong data file?)",
                           key, map->name());
  Result<FreeableBuffer> bytes = map->get_data(key);
  if (!bytes.ok()) {
    return bytes.status().WithContext("XNNPACK delegate: key '%s' in %s", key, map->name());
  }
  return bytes;
}

void WeightsCache::count_fetch_locked(const ConstantRef& ref, size_t size) {
  count_both(&counters_, [&ref, size](WeightsCacheCounters* c) {
    c->named_data_fetches[ref.key] += 1;
    c->bytes_fetched += size;
  });
}

Result<FreeableBuffer> WeightsCache::fetch_locked(const NamedDataMap* map, const ConstantRef& ref) {
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, fetch_unlocked(map, ref));
  count_fetch_locked(ref, bytes.size());
  ES_RETURN_IF_ERROR(check_fetched_size(map, ref, bytes));
  return bytes;
}

void WeightsCache::count_hit_locked() {
  count_both(&counters_, [](WeightsCacheCounters* c) { c->cache_hits += 1; });
}

void WeightsCache::count_pack_locked() {
  count_both(&counters_, [](WeightsCacheCounters* c) { c->packs += 1; });
}

Status WeightsCache::count_verification_locked(const NamedDataMap* map, const ConstantRef& ref,
                                               size_t size, const Status& status) {
  count_both(&counters_, [size, &status](WeightsCacheCounters* c) {
    c->verifications += 1;
    c->bytes_verified += size;
    if (!status.ok()) c->verification_failures += 1;
  });
  if (status.ok()) return status;
  return status.WithContext("XNNPACK delegate: key '%s' in %s (nothing was cached)",
                            ref.key.c_str(), map->name());
}

WeightsCache::PackedEntry* WeightsCache::find_packed_locked(PackedKey* key, bool verify) {
  // A checked entry serves every load; an unchecked one only loads that check nothing either.
  key->verified = true;
  auto it = packed_.find(*key);
  if (it == packed_.end() && !verify) {
    key->verified = false;
    it = packed_.find(*key);
  }
  key->verified = verify;  // What a new entry made for this key will be.
  return it == packed_.end() ? nullptr : &it->second;
}

WeightsCache::RetainedEntry* WeightsCache::find_retained_locked(const ConstantIdentity& identity,
                                                                bool verify) {
  RetainedKey key{identity, true};
  auto it = retained_.find(key);
  if (it == retained_.end() && !verify) {
    key.verified = false;
    it = retained_.find(key);
  }
  return it == retained_.end() ? nullptr : &it->second;
}

bool WeightsCache::borrow_locked(const ConstantRef& ref, bool verify, Bytes* bytes) {
  if (ref.identity.is_inline) {
    // The graph carries these bytes and they are their own identity: nothing to check.
    bytes->data = ref.identity.inline_bytes.data();
    bytes->size = ref.identity.inline_bytes.size();
    return true;
  }
  // Bytes an elementwise op already holds (same identity, so the same bytes) need no fetch; one
  // more reference keeps them while this miss packs without the lock.
  if (RetainedEntry* retained = find_retained_locked(ref.identity, verify)) {
    retained->refs += 1;
    bytes->pinned = retained->constant.get();
    bytes->data = bytes->pinned->data();
    bytes->size = bytes->pinned->size();
    return true;
  }
  // Bytes the executor already holds for a kernel (a tied embedding packed as lm_head): the same
  // identity, so the same bytes, and the data file is read once.
  runtime::ExternalConstant held =
      runtime::ExternalConstant::find_shared(ref.key.c_str(), ref.identity.digest, verify);
  if (!held.empty()) {
    bytes->data = held.data();
    bytes->size = ref.identity.nbytes();
    bytes->shared = std::move(held);
    return true;
  }
  return false;
}

Status WeightsCache::bytes_for_miss(const NamedDataMap* map, const ConstantRef& ref, bool verify,
                                    Bytes* bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (borrow_locked(ref, verify, bytes)) return Status();
  }
  // The map is read without the cache's lock (NamedDataMap is thread-safe): a slow file read of
  // one weight does not hold up the loads of others.
  ES_ASSIGN_OR_RETURN(FreeableBuffer fetched, fetch_unlocked(map, ref));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held_.insert(ref.key);
  }
  bytes->held_key = ref.key;
  bytes->from_map = true;
  bytes->size = fetched.size();
  bytes->owned = std::move(fetched);
  ES_RETURN_IF_ERROR(check_fetched_size(map, ref, bytes->owned));
  bytes->data = bytes->owned.data();
  bytes->unchecked = verify;
  return Status();
}

void WeightsCache::drop_bytes_locked(Bytes* bytes) {
  if (!bytes->held_key.empty()) {
    auto held = held_.find(bytes->held_key);
    if (held != held_.end()) held_.erase(held);
    bytes->held_key.clear();
  }
  bytes->owned.free();
  bytes->shared = runtime::ExternalConstant();
  if (bytes->pinned != nullptr) release_locked(bytes->pinned);
  bytes->pinned = nullptr;
}

// One request of a batch, from its reservation to its publication. The pool tasks write only
// their own fields of a reserved miss (hashed, the flags) and its operator's slabs; everything the
// cache owns is touched under its lock, before and after the pool call.
struct WeightsCache::Miss {
  enum class Kind {
    kHit,       // A published entry (one reference taken).
    kReserved,  // A new "being packed" entry this batch fetches, hashes and packs.
    kRepeat,    // The same key as an earlier request of the batch: a hit on that one's entry.
  };
  const FullyConnectedRequest* request = nullptr;
  PackedKey key;
  Kind kind = Kind::kHit;
  PackedEntry* entry = nullptr;
  // A reserved miss's operator, planned and packed without the lock; the entry gets it when
  // published.
  std::unique_ptr<PackedOperator> op;
  Bytes kernel, bias, scales;
  Status hashed[3];  // The weight's, the bias's and the scales' checks, when hashed.
  std::atomic<bool> hash_failed{false};  // Lets the packs after a failed hash skip their work.
  std::atomic<size_t> tasks_left{0};     // The last of this miss's tasks gives its bytes back.

  bool needs_hash() const { return kernel.unchecked || bias.unchecked || scales.unchecked; }

  void check() {
    const Bytes* bytes[3] = {&kernel, &bias, &scales};
    const runtime::Digest* digests[3] = {&request->weight.identity.digest,
                                         &request->bias.identity.digest,
                                         &request->scales.identity.digest};
    for (int i = 0; i < 3; ++i) {
      if (!bytes[i]->unchecked) continue;
      hashed[i] = runtime::check_sha256(bytes[i]->data, bytes[i]->size, *digests[i]);
      if (!hashed[i].ok()) hash_failed.store(true, std::memory_order_relaxed);
    }
  }

  void pack(size_t index) {
    if (hash_failed.load(std::memory_order_relaxed)) return;
    op->pack_slab(index, kernel.data, request->has_bias ? bias.data : nullptr,
                  request->has_scales ? scales.data : nullptr);
  }

  // Owned bytes go back as soon as nothing reads them: a batch holding every fetched weight to
  // its end would map the whole graph's weights at once (80 MiB more at the peak of the
  // reference model's first load).
  void task_done() {
    if (tasks_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    kernel.owned.free();
    bias.owned.free();
    scales.owned.free();
  }
};

// Every reserved miss's hash (one task each: SHA-256 is sequential over an entry) and every slab's
// pack (one task each), in ONE pthreadpool call. pthreadpool gives thread t the t-th of equal
// contiguous ranges of the tasks and lets a thread that runs out steal single tasks from the END of
// another's range. So the tasks are laid out as one lane per thread, each lane its share of the
// hashes (balanced by bytes, largest first) followed by packs: every thread starts hashing at once,
// then packs whole entries in order, and a thread that finishes early steals packs (small tasks)
// from the end of another lane. The lanes follow pthreadpool's split (the first `range % threads`
// ranges one task longer); a different split would cost balance, not correctness. Measured
// (lora_runner, reference model, verified first load, 2 threads, medians of 10 interleaved; a
// method loads as one batch per delegate partition, 8 here): 58.6 ms with lanes vs 78.0 ms with
// every hash at the start of the first range (that thread hashed nearly everything while the
// other packed and then waited).
struct WeightsCache::BatchJob {
  static constexpr size_t kHash = SIZE_MAX;  // Task::slab of a hash task.
  struct Task {
    Miss* miss;
    size_t slab;
  };
  std::vector<Task> tasks;
  // pthreadpool hands tasks between threads with its own (uninstrumented) atomics; these make the
  // same happens-before visible to ThreadSanitizer.
  std::atomic<bool> started{false};
  std::atomic<size_t> finished{0};

  // For the calling thread alone (null pool): each entry is hashed and then packed while its bytes
  // are still cached, and given back before the next is read (the peak of fetched bytes is one
  // entry, as when graphs asked node by node); a failed hash skips its entry's packs. Measured
  // (weights_cache_bench, best of 7 interleaved, load average 4): verified 116.5 ms as one batch
  // vs 117.7 ms weight by weight, unverified 47.6 vs 47.7 ms.
  void add_entry_by_entry(Miss* misses, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      if (misses[i].kind != Miss::Kind::kReserved) continue;
      if (misses[i].needs_hash()) tasks.push_back(Task{&misses[i], kHash});
      add_packs(&misses[i]);
    }
  }

  // For a pool of `threads`: one lane per thread (see above).
  void add_in_lanes(Miss* misses, size_t count, size_t threads) {
    std::vector<Miss*> hashed;
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) {
      if (misses[i].kind != Miss::Kind::kReserved) continue;
      if (misses[i].needs_hash()) hashed.push_back(&misses[i]);
      total += misses[i].op->num_slabs();
    }
    total += hashed.size();
    // std::sort with request order as tie-break: stable_sort's temporary buffer comes from nothrow
    // operator new, which allocation-counting tests do not replace (ASan alloc-dealloc mismatch).
    std::sort(hashed.begin(), hashed.end(), [](const Miss* a, const Miss* b) {
      return bytes(a) != bytes(b) ? bytes(a) > bytes(b) : a < b;  // `misses` is one array.
    });
    struct Lane {
      size_t next;  // Where its next task goes in `tasks`.
      size_t end;   // One past its last.
      size_t hash_bytes;
    };
    std::vector<Lane> lanes(threads);
    for (size_t t = 0, start = 0; t < threads; ++t) {
      const size_t length = total / threads + (t < total % threads ? 1 : 0);
      lanes[t] = Lane{start, start + length, 0};
      start += length;
    }
    tasks.assign(total, Task{nullptr, 0});
    for (Miss* m : hashed) {
      Lane* lightest = nullptr;
      for (Lane& lane : lanes) {
        if (lane.next < lane.end && (lightest == nullptr || lane.hash_bytes < lightest->hash_bytes))
          lightest = &lane;
      }
      tasks[lightest->next++] = Task{m, kHash};  // Lanes hold `total` tasks: one has room.
      lightest->hash_bytes += bytes(m);
    }
    size_t lane = 0;
    for (size_t i = 0; i < count; ++i) {
      if (misses[i].kind != Miss::Kind::kReserved) continue;
      for (size_t slab = 0; slab < misses[i].op->num_slabs(); ++slab) {
        while (lanes[lane].next == lanes[lane].end) ++lane;
        tasks[lanes[lane].next++] = Task{&misses[i], slab};
      }
    }
  }

  static size_t bytes(const Miss* m) { return m->kernel.size + m->bias.size + m->scales.size; }

  void add_packs(Miss* miss) {
    for (size_t slab = 0; slab < miss->op->num_slabs(); ++slab) tasks.push_back(Task{miss, slab});
  }

  static void task(void* context, size_t index) {
    BatchJob* job = static_cast<BatchJob*>(context);
    (void)job->started.load(std::memory_order_acquire);
    const Task& t = job->tasks[index];
    if (t.slab == kHash) {
      t.miss->check();
    } else {
      t.miss->pack(t.slab);
    }
    t.miss->task_done();
    job->finished.fetch_add(1, std::memory_order_acq_rel);
  }
};

Result<PackedOperator*> WeightsCache::get_or_pack_fully_connected(const NamedDataMap* map,
                                                                  const ConstantRef& weight,
                                                                  const ConstantRef* bias,
                                                                  size_t input_channels,
                                                                  size_t output_channels) {
  std::vector<FullyConnectedRequest> requests(1);
  requests[0].weight = weight;
  requests[0].has_bias = bias != nullptr;
  if (bias != nullptr) requests[0].bias = *bias;
  requests[0].input_channels = input_channels;
  requests[0].output_channels = output_channels;
  std::vector<PackedOperator*> entries;
  size_t failed = 0;
  ES_RETURN_IF_ERROR(get_or_pack_fully_connected(map, requests, &entries, &failed));
  return entries[0];
}

Status WeightsCache::get_or_pack_fully_connected(const NamedDataMap* map,
                                                 const std::vector<FullyConnectedRequest>& requests,
                                                 std::vector<PackedOperator*>* entries,
                                                 size_t* failed) {
  entries->clear();
  const size_t n = requests.size();
  const bool verify = verify_content_enabled();
  std::unique_ptr<Miss[]> misses(new Miss[n]);
  // The first request that fails before any hashing (dtypes refused, bytes not fetched) ends the
  // batch there, as it would end loads made one by one: nothing after it is reserved or fetched.
  Status stop_error;
  const size_t stop = key_misses(requests, misses.get(), &stop_error);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    reserve_locked(&lock, misses.get(), stop, verify);
  }
  // Reserved: fetched, hashed and packed without the lock, so other loads go on meanwhile.
  size_t fetched = 0;
  for (; fetched < stop; ++fetched) {
    if (misses[fetched].kind != Miss::Kind::kReserved) continue;
    Status got = fetch_miss(map, verify, &misses[fetched]);
    if (!got.ok()) {
      stop_error = got;
      break;
    }
  }
  hash_and_pack(misses.get(), fetched);

  std::lock_guard<std::mutex> lock(mutex_);
  *failed = n;
  const Status status = publish_locked(map, misses.get(), n, fetched, stop_error, failed);
  if (!status.ok()) return status;
  for (size_t i = 0; i < n; ++i) entries->push_back(misses[i].entry->op.get());
  return Status();
}

size_t WeightsCache::key_misses(const std::vector<FullyConnectedRequest>& requests, Miss* misses,
                                Status* error) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const FullyConnectedRequest& r = requests[i];
    Miss& m = misses[i];
    m.request = &r;
    *error = check_fully_connected_request(r);
    if (!error->ok()) return i;
    // Each format's entries are their own (an f32 operator is never an f16w packing, even if a
    // digest ever matched: the identity's dtype differs too).
    m.key.op_kind = request_format(r)->scheme;
    m.key.weight = r.weight.identity;
    m.key.has_bias = r.has_bias;
    if (r.has_bias) m.key.bias = r.bias.identity;
    m.key.has_scales = r.has_scales;
    if (r.has_scales) m.key.scales = r.scales.identity;
    m.key.input_channels = r.input_channels;
    m.key.output_channels = r.output_channels;
  }
  return requests.size();
}

Status WeightsCache::publish_locked(const NamedDataMap* map, Miss* misses, size_t count,
                                    size_t fetched, const Status& stop_error, size_t* failed) {
  // Counted and published in request order, up to the first failure; what comes after it is
  // dropped uncounted.
  Status status;
  for (size_t i = 0; i < count; ++i) {
    Miss& m = misses[i];
    if (status.ok() && i < fetched) {
      status = finish_locked(map, &m);
    } else if (status.ok() && i == fetched) {
      // The request that stopped the batch before hashing: its fetches count, as they would have.
      if (m.kernel.from_map) count_fetch_locked(m.request->weight, m.kernel.size);
      if (m.bias.from_map) count_fetch_locked(m.request->bias, m.bias.size);
      if (m.scales.from_map) count_fetch_locked(m.request->scales, m.scales.size);
      if (m.kind == Miss::Kind::kReserved) {
        finish_reserved_locked(m.entry, std::move(m.op), stop_error);
      }
      status = stop_error;
    } else {
      abandon_locked(&m);
    }
    if (!status.ok() && *failed == count) *failed = i;
    drop_bytes_locked(&m.kernel);
    drop_bytes_locked(&m.bias);
    drop_bytes_locked(&m.scales);
  }
  if (!status.ok()) {
    for (size_t i = 0; i < *failed; ++i) release_locked(misses[i].entry);
  }
  return status;
}

void WeightsCache::abandon_locked(Miss* miss) {
  if (miss->kind == Miss::Kind::kReserved) {
    // Removed, never counted.
    finish_reserved_locked(miss->entry, std::move(miss->op), Status(Error::Internal));
  } else if (miss->kind == Miss::Kind::kHit && miss->entry != nullptr) {
    release_locked(miss->entry);
  }
}

void WeightsCache::reserve_locked(std::unique_lock<std::mutex>* lock, Miss* misses, size_t count,
                                  bool verify) {
  // Another load is packing one of these keys: wait until it is published (then hit it) or
  // dropped because that load's bytes failed their checks (then pack it here). Nothing of this
  // batch is reserved while it waits, so two loads never wait for each other.
  for (bool busy = true; busy;) {
    busy = false;
    for (size_t i = 0; i < count && !busy; ++i) {
      const PackedEntry* found = find_packed_locked(&misses[i].key, verify);
      busy = found != nullptr && found->packing;
    }
    if (busy) packed_cv_.wait(*lock);
  }
  for (size_t i = 0; i < count; ++i) {
    Miss& m = misses[i];
    PackedEntry* found = find_packed_locked(&m.key, verify);
    if (found == nullptr) {
      // References to an unordered_map's values stay valid as it grows.
      m.kind = Miss::Kind::kReserved;
      m.entry = &packed_[m.key];
    } else if (found->packing) {
      m.kind = Miss::Kind::kRepeat;  // Reserved by an earlier miss of this batch.
      m.entry = found;
    } else {
      m.kind = Miss::Kind::kHit;
      m.entry = found;
      found->refs += 1;
    }
  }
}

Status WeightsCache::fetch_miss(const NamedDataMap* map, bool verify, Miss* miss) {
  const FullyConnectedRequest& r = *miss->request;
  ES_RETURN_IF_ERROR(bytes_for_miss(map, r.weight, verify, &miss->kernel));
  if (r.has_bias) ES_RETURN_IF_ERROR(bytes_for_miss(map, r.bias, verify, &miss->bias));
  if (r.has_scales) ES_RETURN_IF_ERROR(bytes_for_miss(map, r.scales, verify, &miss->scales));
  PackedOperator::Shape shape;
  shape.format = request_format(r);
  shape.input_channels = r.input_channels;
  shape.output_channels = r.output_channels;
  shape.weight_key = r.weight.key;
  if (r.has_bias) shape.bias_key = r.bias.key;
  if (r.has_scales) shape.scales_key = r.scales.key;
  shape.group_size = request_group_size(r);  // check_fully_connected_request checked it.
  shape.slab_bytes = slab_bytes_;
  miss->op = PackedOperator::plan(shape);
  return Status();
}

void WeightsCache::hash_and_pack(Miss* misses, size_t count) {
  BatchJob job;
  pthreadpool_t pool = threadpool();
  for (size_t i = 0; i < count; ++i) {
    Miss& m = misses[i];
    if (m.kind != Miss::Kind::kReserved) continue;
    m.tasks_left.store(m.op->num_slabs() + (m.needs_hash() ? 1 : 0), std::memory_order_relaxed);
  }
  if (pool == nullptr) {
    job.add_entry_by_entry(misses, count);
  } else {
    job.add_in_lanes(misses, count, pthreadpool_get_threads_count(pool));
  }
  if (job.tasks.empty()) return;
  job.started.store(true, std::memory_order_release);
  pthreadpool_parallelize_1d(pool, &BatchJob::task, &job, job.tasks.size(), /*flags=*/0);
  (void)job.finished.load(std::memory_order_acquire);
}

Status WeightsCache::finish_locked(const NamedDataMap* map, Miss* miss) {
  const FullyConnectedRequest& r = *miss->request;
  if (miss->kind == Miss::Kind::kRepeat) {
    miss->entry->refs += 1;  // Published by the earlier request: it came first and did not fail.
  }
  if (miss->kind != Miss::Kind::kReserved) {
    count_hit_locked();
    return Status();
  }
  if (miss->kernel.from_map) count_fetch_locked(r.weight, miss->kernel.size);
  if (miss->bias.from_map) count_fetch_locked(r.bias, miss->bias.size);
  if (miss->scales.from_map) count_fetch_locked(r.scales, miss->scales.size);
  // A wrong digest is reported before anything XNNPACK said: the bytes were not what was exported.
  const Status weight_check =
      miss->kernel.unchecked
          ? count_verification_locked(map, r.weight, miss->kernel.size, miss->hashed[0])
          : Status();
  const Status bias_check =
      miss->bias.unchecked
          ? count_verification_locked(map, r.bias, miss->bias.size, miss->hashed[1])
          : Status();
  const Status scales_check =
      miss->scales.unchecked
          ? count_verification_locked(map, r.scales, miss->scales.size, miss->hashed[2])
          : Status();
  Status status = !weight_check.ok() ? weight_check : !bias_check.ok() ? bias_check : scales_check;
  if (status.ok()) status = miss->op->seal();
  finish_reserved_locked(miss->entry, std::move(miss->op), status);
  return status;
}

void WeightsCache::finish_reserved_locked(PackedEntry* entry, std::unique_ptr<PackedOperator> op,
                                          const Status& status) {
  for (auto it = packed_.begin(); it != packed_.end(); ++it) {
    if (&it->second != entry) continue;
    if (status.ok()) {
      entry->op = std::move(op);
      entry->packing = false;
      entry->refs = 1;
      count_pack_locked();
    } else {
      // Nothing of a failed load stays: its operators (if any) go with `op`.
      packed_.erase(it);
    }
    break;
  }
  packed_cv_.notify_all();
}

void WeightsCache::release(PackedOperator* op) {
  if (op == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : packed_) {
    if (entry.second.op.get() == op) {
      release_locked(&entry.second);
      return;
    }
  }
}

void WeightsCache::release_locked(PackedEntry* entry) {
  for (auto it = packed_.begin(); it != packed_.end(); ++it) {
    if (&it->second != entry) continue;
    if (--entry->refs == 0) packed_.erase(it);
    return;
  }
}

Result<RetainedConstant*> WeightsCache::retain_constant(const NamedDataMap* map,
                                                        const ConstantRef& ref) {
  const bool verify = verify_content_enabled();
  std::lock_guard<std::mutex> lock(mutex_);
  if (RetainedEntry* hit = find_retained_locked(ref.identity, verify)) {
    hit->refs += 1;
    count_hit_locked();
    return hit->constant.get();
  }
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, fetch_locked(map, ref));
  // Nothing to overlap with here: an elementwise operand is read as it is, so it is hashed first.
  if (verify) {
    ES_RETURN_IF_ERROR(count_verification_locked(
        map, ref, bytes.size(),
        runtime::check_sha256(bytes.data(), bytes.size(), ref.identity.digest)));
  }
  RetainedEntry& entry = retained_[RetainedKey{ref.identity, verify}];
  entry.constant.reset(new RetainedConstant(std::move(bytes), ref.key));
  entry.refs = 1;
  return entry.constant.get();
}

void WeightsCache::release(RetainedConstant* constant) {
  if (constant == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  release_locked(constant);
}

void WeightsCache::release_locked(RetainedConstant* constant) {
  for (auto it = retained_.begin(); it != retained_.end(); ++it) {
    if (it->second.constant.get() != constant) continue;
    if (--it->second.refs == 0) retained_.erase(it);
    return;
  }
}

std::vector<std::string> WeightsCache::packed_names_locked() const {
  std::vector<std::string> names;
  for (const auto& entry : packed_) {
    if (entry.second.packing) continue;  // Not an entry until it is published.
    const PackedOperator& op = *entry.second.op;
    if (!op.weight_key().empty()) names.push_back(op.weight_key());
    if (!op.bias_key().empty()) names.push_back(op.bias_key());
    if (!op.scales_key().empty()) names.push_back(op.scales_key());
  }
  append_sorted_unique(&names);
  return names;
}

size_t WeightsCache::published_count_locked() const {
  size_t n = 0;
  for (const auto& entry : packed_) n += entry.second.packing ? 0 : 1;
  return n;
}

size_t WeightsCache::get_num_packed_data() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_count_locked();
}

WeightsCacheStats WeightsCache::stats() const {
  WeightsCacheStats stats;
  std::lock_guard<std::mutex> lock(mutex_);
  static_cast<WeightsCacheCounters&>(stats) = counters_;
  stats.packed_data_names = packed_names_locked();
  stats.unpacked_data_names.assign(held_.begin(), held_.end());
  append_sorted_unique(&stats.unpacked_data_names);
  stats.num_packed_entries = published_count_locked();
  for (const auto& r : retained_) stats.retained_data_names.push_back(r.second.constant->key());
  append_sorted_unique(&stats.retained_data_names);
  return stats;
}

// The switches live in the runtime (content_policy.h), shared with the executor's constants.
void set_weight_sharing(bool enabled) { runtime::set_share_constants(enabled); }

bool weight_sharing_enabled() { return runtime::share_constants_enabled(); }

void set_verify_content(bool enabled) { runtime::set_verify_content(enabled); }

bool verify_content_enabled() { return runtime::verify_content_enabled(); }

WeightsCacheStats process_weights_cache_stats() {
  WeightsCacheStats total;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const WeightsCache* cache : r.caches) {
      WeightsCacheStats one = cache->stats();
      total.num_packed_entries += one.num_packed_entries;
      total.packed_data_names.insert(total.packed_data_names.end(), one.packed_data_names.begin(),
                                     one.packed_data_names.end());
      total.unpacked_data_names.insert(total.unpacked_data_names.end(),
                                       one.unpacked_data_names.begin(),
                                       one.unpacked_data_names.end());
      total.retained_data_names.insert(total.retained_data_names.end(),
                                       one.retained_data_names.begin(),
                                       one.retained_data_names.end());
    }
  }
  append_sorted_unique(&total.packed_data_names);
  append_sorted_unique(&total.unpacked_data_names);
  append_sorted_unique(&total.retained_data_names);
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  static_cast<WeightsCacheCounters&>(total) = p.counters;
  return total;
}

void reset_weights_cache_counters() {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.counters = WeightsCacheCounters();
}

}  // namespace xnnpack
}  // namespace edgeshare
