#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

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

constexpr uint8_t kFullyConnectedF32 = 1;
// f16 weights and bias, f16 input and output: never the same entry as an f32 operator, even if a
// digest ever matched (the identity's dtype differs too).
constexpr uint8_t kFullyConnectedF16 = 2;

// Process-wide bookkeeping behind weight_sharing.h: counters summed over every cache,
// and the set of live caches (for entry counts and names). Leaked on purpose, like the shared cache.
struct Process {
  std::mutex mutex;  // Guards everything below. Taken after a cache's lock, never before one.
  std::map<std::string, size_t> fetches;
  uint64_t bytes_fetched = 0;
  uint64_t packs = 0;
  uint64_t cache_hits = 0;
  uint64_t verifications = 0;
  uint64_t bytes_verified = 0;
  uint64_t verification_failures = 0;
};

Process& process() {
  static Process* p = new Process();
  return *p;
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

Status check_fully_connected_dtypes(const ConstantRef& weight, const ConstantRef* bias) {
  const runtime::ScalarType dtype = weight.identity.dtype;
  ES_CHECK_OR_RETURN_ERROR(
      dtype == runtime::ScalarType::Float || dtype == runtime::ScalarType::Half,
      Error::InvalidArgument, "fully connected weight '%s' has dtype %s; Float or Half only",
      or_inline(weight.key), runtime::to_string(dtype));
  ES_CHECK_OR_RETURN_ERROR(bias == nullptr || bias->identity.dtype == dtype, Error::InvalidArgument,
                           "fully connected weight '%s' is %s but its bias '%s' is %s",
                           or_inline(weight.key), runtime::to_string(dtype),
                           bias == nullptr ? "" : or_inline(bias->key),
                           bias == nullptr ? "" : runtime::to_string(bias->identity.dtype));
  return Status();
}

// What XNNPACK's answer to creating a fully connected operator means for the caller.
Status create_status(xnn_status status, bool f16, const ConstantRef& weight,
                     size_t input_channels, size_t output_channels) {
  ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                           "XNNPACK could not create the %s fully connected operator for weight "
                           "'%s' [%zu x %zu] (status %d%s)",
                           f16 ? "f16" : "f32", or_inline(weight.key), output_channels,
                           input_channels, static_cast<int>(status),
                           status == xnn_status_unsupported_hardware
                               ? ": this CPU lacks the instructions XNNPACK's f16 kernels need; "
                                 "export with fp32 fully connected weights"
                               : "");
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
         has_bias == other.has_bias &&
         (!has_bias || bias == other.bias) && input_channels == other.input_channels &&
         output_channels == other.output_channels;
}

size_t WeightsCache::PackedKeyHash::operator()(const PackedKey& key) const {
  IdentityHash identity_hash;
  size_t h = hash_combine(key.op_kind * 2u + key.verified, identity_hash(key.weight));
  h = hash_combine(h, key.has_bias ? identity_hash(key.bias) + 1 : 0);
  h = hash_combine(h, key.input_channels);
  return hash_combine(h, key.output_channels);
}

PackedOperator::~PackedOperator() {
  // The last user is gone; the packed weights go with the operator.
  if (op_ != nullptr) xnn_delete_operator(op_);
}

Status PackedOperator::run_fully_connected(size_t batch_size, const float* input, float* output) {
  if (weight_dtype_ != runtime::ScalarType::Float) {
    return Status::Format(Error::InvalidArgument,
                          "fully connected entry over '%s' is f16; run it with f16 buffers",
                          weight_key_.c_str());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pthreadpool_t pool = threadpool();
  xnn_status status = xnn_setup_fully_connected_nc_f32(op_, batch_size, input, output, pool);
  if (status != xnn_status_success) {
    return Status::Format(Error::DelegateExecutionFailed,
                          "XNNPACK fully connected setup over '%s' failed (status %d)",
                          weight_key_.c_str(), static_cast<int>(status));
  }
  status = xnn_run_operator(op_, pool);
  if (status != xnn_status_success) {
    return Status::Format(Error::DelegateExecutionFailed,
                          "XNNPACK fully connected run over '%s' failed (status %d)",
                          weight_key_.c_str(), static_cast<int>(status));
  }
  return Status();
}

Status PackedOperator::run_fully_connected_f16(size_t batch_size, const void* input, void* output) {
  if (weight_dtype_ != runtime::ScalarType::Half) {
    return Status::Format(Error::InvalidArgument,
                          "fully connected entry over '%s' is f32; run it with float buffers",
                          weight_key_.c_str());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pthreadpool_t pool = threadpool();
  xnn_status status = xnn_setup_fully_connected_nc_f16(op_, batch_size, input, output, pool);
  if (status != xnn_status_success) {
    return Status::Format(Error::DelegateExecutionFailed,
                          "XNNPACK f16 fully connected setup over '%s' failed (status %d)",
                          weight_key_.c_str(), static_cast<int>(status));
  }
  status = xnn_run_operator(op_, pool);
  if (status != xnn_status_success) {
    return Status::Format(Error::DelegateExecutionFailed,
                          "XNNPACK f16 fully connected run over '%s' failed (status %d)",
                          weight_key_.c_str(), static_cast<int>(status));
  }
  return Status();
}

WeightsCache::WeightsCache() {
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
  free_unpacked_data_locked();
  packed_.clear();
  retained_.clear();
}

WeightsCache& WeightsCache::shared() {
  static WeightsCache* cache = new WeightsCache();
  return *cache;
}

Result<FreeableBuffer> WeightsCache::fetch_locked(const NamedDataMap* map, const ConstantRef& ref) {
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
  const size_t got = bytes->size();
  counters_.named_data_fetches[ref.key] += 1;
  counters_.bytes_fetched += got;
  {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.fetches[ref.key] += 1;
    p.bytes_fetched += got;
  }
  ES_CHECK_OR_RETURN_ERROR(bytes->data() != nullptr && got >= ref.identity.nbytes(),
                           Error::InvalidData,
                           "XNNPACK delegate: key '%s' in %s holds %zu bytes, the graph needs %zu",
                           key, map->name(), got, ref.identity.nbytes());
  return bytes;
}

void WeightsCache::count_hit_locked() {
  counters_.cache_hits += 1;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.cache_hits += 1;
}

void WeightsCache::count_pack_locked() {
  counters_.packs += 1;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.packs += 1;
}

Status WeightsCache::count_verification_locked(const NamedDataMap* map, const ConstantRef& ref,
                                              size_t size, const Status& status) {
  counters_.verifications += 1;
  counters_.bytes_verified += size;
  if (!status.ok()) counters_.verification_failures += 1;
  {
    Process& p = process();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.verifications += 1;
    p.bytes_verified += size;
    if (!status.ok()) p.verification_failures += 1;
  }
  if (status.ok()) return status;
  return status.WithContext("XNNPACK delegate: key '%s' in %s (nothing was cached)",
                            ref.key.c_str(), map->name());
}

PackedOperator* WeightsCache::find_packed_locked(PackedKey* key, bool verify) {
  // A checked entry serves every load; an unchecked one only loads that check nothing either.
  key->verified = true;
  auto it = packed_.find(*key);
  if (it == packed_.end() && !verify) {
    key->verified = false;
    it = packed_.find(*key);
  }
  key->verified = verify;  // What a new entry made for this key will be.
  return it == packed_.end() ? nullptr : it->second.get();
}

RetainedConstant* WeightsCache::find_retained_locked(const ConstantIdentity& identity,
                                                     bool verify) {
  RetainedKey key{identity, true};
  auto it = retained_.find(key);
  if (it == retained_.end() && !verify) {
    key.verified = false;
    it = retained_.find(key);
  }
  return it == retained_.end() ? nullptr : it->second.get();
}

Result<WeightsCache::Bytes> WeightsCache::bytes_locked(const NamedDataMap* map,
                                                       const ConstantRef& ref, bool verify) {
  Bytes bytes;
  if (ref.identity.is_inline) {
    // The graph carries these bytes and they are their own identity: nothing to check.
    bytes.data = ref.identity.inline_bytes.data();
    bytes.size = ref.identity.inline_bytes.size();
    return bytes;
  }
  // Bytes an elementwise op already holds (same identity, so the same bytes) need no fetch.
  if (const RetainedConstant* retained = find_retained_locked(ref.identity, verify)) {
    bytes.data = retained->data();
    bytes.size = retained->size();
    return bytes;
  }
  // Fetched once: the same bytes asked twice before the buffers are freed are reused.
  for (const Unpacked& u : unpacked_) {
    if (u.key == ref.key && u.digest == ref.identity.digest && (u.verified || !verify)) {
      bytes.data = u.buffer.data();
      bytes.size = u.buffer.size();
      return bytes;
    }
  }
  ES_ASSIGN_OR_RETURN(bytes.owned, fetch_locked(map, ref));
  bytes.data = bytes.owned.data();
  bytes.size = bytes.owned.size();
  bytes.unchecked = verify;
  return bytes;
}

Result<const void*> WeightsCache::load_unpacked_data(const NamedDataMap* map,
                                                     const ConstantRef& ref) {
  const bool verify = verify_content_enabled();
  std::lock_guard<std::mutex> lock(mutex_);
  ES_ASSIGN_OR_RETURN(Bytes bytes, bytes_locked(map, ref, verify));
  if (bytes.owned.data() == nullptr) return bytes.data;  // Inline, retained or already held.
  if (bytes.unchecked) {
    ES_RETURN_IF_ERROR(count_verification_locked(
        map, ref, bytes.size, runtime::check_sha256(bytes.data, bytes.size, ref.identity.digest)));
  }
  unpacked_.push_back(Unpacked{ref.key, ref.identity.digest, verify, std::move(bytes.owned)});
  return bytes.data;
}

void WeightsCache::free_unpacked_data_locked() {
  // FreeableBuffer::free hands the bytes back to their loader (munmap for an mmapped file).
  for (Unpacked& u : unpacked_) u.buffer.free();
  unpacked_.clear();
}

void WeightsCache::free_unpacked_data() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_unpacked_data_locked();
}

// One miss's work: create the XNNPACK operator (packing the weights) and hash the fetched bytes,
// as two tasks of one pthreadpool call, so that with 2+ threads a miss costs the longer of the
// two, not their sum. Nothing in it touches the cache: the caller holds the cache's lock and
// publishes the result afterwards.
struct WeightsCache::PackJob {
  bool f16 = false;
  size_t input_channels = 0;
  size_t output_channels = 0;
  const void* kernel = nullptr;
  const void* bias = nullptr;
  xnn_operator_t op = nullptr;
  xnn_status status = xnn_status_success;
  // Bytes to hash against their digests (weight and bias), and each check's outcome.
  const Bytes* hash[2] = {nullptr, nullptr};
  const runtime::Digest* digest[2] = {nullptr, nullptr};
  Status hashed[2];
  // pthreadpool hands the job between threads with its own (uninstrumented) atomics; these make
  // the same happens-before visible to ThreadSanitizer. `failed` lets a sequential run skip the
  // pack once the hash (task 0) has failed.
  std::atomic<bool> started{false};
  std::atomic<int> finished{0};
  std::atomic<bool> failed{false};

  static void task(void* context, size_t index) {
    PackJob* job = static_cast<PackJob*>(context);
    (void)job->started.load(std::memory_order_acquire);
    if (index == 0) {
      job->check();
    } else {
      job->pack();
    }
    job->finished.fetch_add(1, std::memory_order_acq_rel);
  }

  void check() {
    for (int i = 0; i < 2; ++i) {
      if (hash[i] == nullptr) continue;
      hashed[i] = runtime::check_sha256(hash[i]->data, hash[i]->size, *digest[i]);
      if (!hashed[i].ok()) failed.store(true, std::memory_order_relaxed);
    }
  }

  void pack() {
    if (failed.load(std::memory_order_relaxed)) return;
    // Shared operators are created unclamped: a clamp is a property of the node using the
    // weights, not of the weights, so clamping here would split one weight into several entries.
    const float lo = -std::numeric_limits<float>::infinity();
    const float hi = std::numeric_limits<float>::infinity();
    // f16 weights (and bias) are IEEE half bytes, packed as they are by the f16 operator.
    status = f16 ? xnn_create_fully_connected_nc_f16(input_channels, output_channels,
                                                     /*input_stride=*/input_channels,
                                                     /*output_stride=*/output_channels, kernel,
                                                     bias, lo, hi, /*flags=*/0, &op)
                 : xnn_create_fully_connected_nc_f32(
                       input_channels, output_channels, /*input_stride=*/input_channels,
                       /*output_stride=*/output_channels, static_cast<const float*>(kernel),
                       static_cast<const float*>(bias), lo, hi, /*flags=*/0, &op);
  }

  void run() {
    started.store(true, std::memory_order_release);
    if (hash[0] == nullptr && hash[1] == nullptr) {
      pack();
    } else {
      // Null pool (1 thread): both tasks on this thread, hash first. Otherwise one task per thread.
      pthreadpool_parallelize_1d(threadpool(), &PackJob::task, this, /*range=*/2, /*flags=*/0);
      (void)finished.load(std::memory_order_acquire);
    }
  }
};

Result<PackedOperator*> WeightsCache::get_or_pack_fully_connected(const NamedDataMap* map,
                                                                  const ConstantRef& weight,
                                                                  const ConstantRef* bias,
                                                                  size_t input_channels,
                                                                  size_t output_channels) {
  const runtime::ScalarType dtype = weight.identity.dtype;
  ES_RETURN_IF_ERROR(check_fully_connected_dtypes(weight, bias));
  const bool f16 = dtype == runtime::ScalarType::Half;
  const bool verify = verify_content_enabled();
  PackedKey key;
  key.op_kind = f16 ? kFullyConnectedF16 : kFullyConnectedF32;
  key.weight = weight.identity;
  key.has_bias = bias != nullptr;
  if (bias != nullptr) key.bias = bias->identity;
  key.input_channels = input_channels;
  key.output_channels = output_channels;

  // The lock covers lookup, fetch, hashing and packing: a second thread asking for the same weight
  // waits and then hits, instead of fetching and packing a second copy.
  std::lock_guard<std::mutex> lock(mutex_);
  if (PackedOperator* hit = find_packed_locked(&key, verify)) {
    hit->refs_ += 1;
    count_hit_locked();
    return hit;
  }
  // Fetched bytes are owned here: any early return gives them back.
  ES_ASSIGN_OR_RETURN(Bytes kernel, bytes_locked(map, weight, verify));
  Bytes bias_bytes;
  if (bias != nullptr) {
    ES_ASSIGN_OR_RETURN(bias_bytes, bytes_locked(map, *bias, verify));
  }

  std::unique_ptr<PackedOperator> entry(new PackedOperator());
  PackJob job;
  job.f16 = f16;
  job.input_channels = input_channels;
  job.output_channels = output_channels;
  job.kernel = kernel.data;
  job.bias = bias != nullptr ? bias_bytes.data : nullptr;
  if (kernel.unchecked) {
    job.hash[0] = &kernel;
    job.digest[0] = &weight.identity.digest;
  }
  if (bias_bytes.unchecked) {
    job.hash[1] = &bias_bytes;
    job.digest[1] = &bias->identity.digest;
  }
  job.run();
  // Owned by the entry from here on, so that every return below deletes an unpublished operator.
  entry->op_ = job.op;
  // XNNPACK copied the weights into its packed buffer: the unpacked bytes can go back now.
  kernel.owned.free();
  bias_bytes.owned.free();
  free_unpacked_data_locked();
  // A wrong digest is reported before anything XNNPACK said: the bytes were not what was exported.
  const Status weight_check =
      job.hash[0] == nullptr
          ? Status()
          : count_verification_locked(map, weight, kernel.size, job.hashed[0]);
  const Status bias_check =
      job.hash[1] == nullptr
          ? Status()
          : count_verification_locked(map, *bias, bias_bytes.size, job.hashed[1]);
  ES_RETURN_IF_ERROR(weight_check);
  ES_RETURN_IF_ERROR(bias_check);
  ES_RETURN_IF_ERROR(create_status(job.status, f16, weight, input_channels, output_channels));
  count_pack_locked();
  entry->refs_ = 1;
  entry->weight_dtype_ = dtype;
  entry->input_channels_ = input_channels;
  entry->output_channels_ = output_channels;
  entry->weight_key_ = weight.key;
  if (bias != nullptr) entry->bias_key_ = bias->key;
  PackedOperator* result = entry.get();
  packed_.emplace(std::move(key), std::move(entry));
  return result;
}

void WeightsCache::release(PackedOperator* entry) {
  if (entry == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = packed_.begin(); it != packed_.end(); ++it) {
    if (it->second.get() != entry) continue;
    if (--entry->refs_ == 0) packed_.erase(it);
    return;
  }
}

Result<RetainedConstant*> WeightsCache::retain_constant(const NamedDataMap* map,
                                                        const ConstantRef& ref) {
  const bool verify = verify_content_enabled();
  std::lock_guard<std::mutex> lock(mutex_);
  if (RetainedConstant* hit = find_retained_locked(ref.identity, verify)) {
    hit->refs_ += 1;
    count_hit_locked();
    return hit;
  }
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, fetch_locked(map, ref));
  // Nothing to overlap with here: an elementwise operand is read as it is, so it is hashed first.
  if (verify) {
    ES_RETURN_IF_ERROR(count_verification_locked(
        map, ref, bytes.size(), runtime::check_sha256(bytes.data(), bytes.size(),
                                                      ref.identity.digest)));
  }
  std::unique_ptr<RetainedConstant> constant(new RetainedConstant());
  constant->buffer_ = std::move(bytes);
  constant->refs_ = 1;
  constant->key_ = ref.key;
  RetainedConstant* result = constant.get();
  retained_.emplace(RetainedKey{ref.identity, verify}, std::move(constant));
  return result;
}

void WeightsCache::release(RetainedConstant* constant) {
  if (constant == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = retained_.begin(); it != retained_.end(); ++it) {
    if (it->second.get() != constant) continue;
    if (--constant->refs_ == 0) retained_.erase(it);
    return;
  }
}

std::vector<std::string> WeightsCache::get_packed_data_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& entry : packed_) {
    if (!entry.second->weight_key_.empty()) names.push_back(entry.second->weight_key_);
    if (!entry.second->bias_key_.empty()) names.push_back(entry.second->bias_key_);
  }
  append_sorted_unique(&names);
  return names;
}

std::vector<std::string> WeightsCache::get_unpacked_data_names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const Unpacked& u : unpacked_) names.push_back(u.key);
  append_sorted_unique(&names);
  return names;
}

size_t WeightsCache::get_num_packed_data() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return packed_.size();
}

WeightsCacheStats WeightsCache::stats() const {
  WeightsCacheStats stats;
  stats.packed_data_names = get_packed_data_names();
  stats.unpacked_data_names = get_unpacked_data_names();
  std::lock_guard<std::mutex> lock(mutex_);
  stats.named_data_fetches = counters_.named_data_fetches;
  stats.bytes_fetched = counters_.bytes_fetched;
  stats.packs = counters_.packs;
  stats.cache_hits = counters_.cache_hits;
  stats.verifications = counters_.verifications;
  stats.bytes_verified = counters_.bytes_verified;
  stats.verification_failures = counters_.verification_failures;
  stats.num_packed_entries = packed_.size();
  for (const auto& r : retained_) stats.retained_data_names.push_back(r.second->key_);
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
      total.packed_data_names.insert(total.packed_data_names.end(),
                                     one.packed_data_names.begin(), one.packed_data_names.end());
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
  total.named_data_fetches = p.fetches;
  total.bytes_fetched = p.bytes_fetched;
  total.packs = p.packs;
  total.cache_hits = p.cache_hits;
  total.verifications = p.verifications;
  total.bytes_verified = p.bytes_verified;
  total.verification_failures = p.verification_failures;
  return total;
}

void reset_weights_cache_counters() {
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.fetches.clear();
  p.bytes_fetched = 0;
  p.packs = 0;
  p.cache_hits = 0;
  p.verifications = 0;
  p.bytes_verified = 0;
  p.verification_failures = 0;
}

}  // namespace xnnpack
}  // namespace edgeshare
