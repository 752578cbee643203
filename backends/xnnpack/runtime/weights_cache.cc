#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "edgeshare/backends/xnnpack/runtime/packed_gemv.h"
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

// Slab sizing, chosen by measurement on this project's 2 MiB-L2 AVX-512 cores. Before packed
// memory (packed_memory.h): slabs_bench.cc, the reference model's twelve weights, time relative to
// one operator per weight: at T=32 and 1 thread, slabs of L2/8 0.64x, L2/4 0.66x, L2/2 0.70x, L2
// 0.80x (the slab shares L2 with the input rows, up to 256 KiB at 2048 inputs, and the output
// tile); at T=1 the extra setup + run calls cost L2/8 +3%, L2/4 +2%, L2/2 -1%. With slabs in huge
// pages and touched before a run over many rows, paired lora_runner runs (reference model, CPU ms
// per run, 3 pairs each): T=32 L2/4 20.6/20.2/20.5 vs L2/8 19.4/19.2/19.4 vs L2/16 19.0/19.1/19.9;
// T=1 L2/4 5.3/5.0/5.0 vs L2/8 5.0/4.8/4.9 vs L2/16 (against L2/8) +3%. L2/8 it is; one layout
// serves every batch.
constexpr size_t kFallbackL2Bytes = size_t{1} << 20;
constexpr size_t kL2BytesPerSlabByte = 8;
// Slab widths are a multiple of this many output channels, which is a multiple of the column tile
// (nr: 8, 16 or 32) of XNNPACK's x86 f32/f16 kernels: only the last slab can end in a partial tile.
constexpr size_t kSlabChannelMultiple = 32;

// [first, count) output channel ranges of about `slab_bytes` packed bytes each, of equal width.
std::vector<std::pair<size_t, size_t>> plan_slabs(size_t input_channels, size_t output_channels,
                                                  size_t element_size, size_t slab_bytes) {
  const size_t row_bytes = std::max<size_t>(1, input_channels * element_size);
  size_t slabs = slab_bytes == 0 ? 1 : (output_channels * row_bytes + slab_bytes - 1) / slab_bytes;
  slabs = std::max<size_t>(1, std::min(slabs, output_channels / kSlabChannelMultiple));
  size_t width = (output_channels + slabs - 1) / slabs;
  width = (width + kSlabChannelMultiple - 1) / kSlabChannelMultiple * kSlabChannelMultiple;
  std::vector<std::pair<size_t, size_t>> plan;
  for (size_t first = 0; first < output_channels; first += width) {
    plan.emplace_back(first, std::min(width, output_channels - first));
  }
  return plan;
}

// Process-wide bookkeeping behind weight_sharing.h: counters summed over every cache,
// and the set of live caches (for entry counts and names). Leaked on purpose, like the shared
// cache.
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
Status create_status(xnn_status status, bool f16, const ConstantRef& weight, size_t input_channels,
                     size_t output_channels) {
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
         input_channels == other.input_channels && output_channels == other.output_channels;
}

size_t WeightsCache::PackedKeyHash::operator()(const PackedKey& key) const {
  IdentityHash identity_hash;
  size_t h = hash_combine(key.op_kind * 2u + key.verified, identity_hash(key.weight));
  h = hash_combine(h, key.has_bias ? identity_hash(key.bias) + 1 : 0);
  h = hash_combine(h, key.input_channels);
  return hash_combine(h, key.output_channels);
}

PackedOperator::~PackedOperator() {
  // The last user is gone; the packed weights go with the operators.
  for (const Slab& slab : slabs_) {
    if (slab.op != nullptr) xnn_delete_operator(slab.op);
  }
}

xnn_status PackedOperator::setup_slab(const Slab& slab, size_t batch_size, const void* input,
                                      void* output, pthreadpool_t pool) const {
  // Each slab writes its own columns of the shared [batch, out] output (row stride: all columns).
  if (weight_dtype_ == runtime::ScalarType::Half) {
    return xnn_setup_fully_connected_nc_f16(slab.op, batch_size, input,
                                            static_cast<uint16_t*>(output) + slab.first, pool);
  }
  return xnn_setup_fully_connected_nc_f32(slab.op, batch_size, static_cast<const float*>(input),
                                          static_cast<float*>(output) + slab.first, pool);
}

// Every slab over all rows, one slab per parallel_for item: each thread keeps its slab in its own
// L2 while it runs every row tile over it, instead of all threads sweeping each slab together.
struct PackedOperator::SlabRun {
  const PackedOperator* entry = nullptr;
  size_t batch_size = 0;
  const void* input = nullptr;
  void* output = nullptr;
  bool own = false;  // packed_gemv / packed_gemm instead of the slabs' operators.
  size_t threads = 1;
  // parallel_for's own atomics already order the items; these keep the job's state explicit
  // (status from any thread) and visible to ThreadSanitizer whatever runs the items.
  std::atomic<bool> started{false};
  std::atomic<int> finished{0};
  std::atomic<int> failed_status{0};

  static void task(void* context, size_t index) {
    SlabRun* run = static_cast<SlabRun*>(context);
    (void)run->started.load(std::memory_order_acquire);
    const std::vector<Slab>& slabs = run->entry->slabs_;
    // Each thread takes about every `threads`-th slab: that one is the slab to prefetch.
    const size_t next = index + run->threads;
    const xnn_status status = run->entry->run_slab(
        slabs[index], next < slabs.size() ? &slabs[next] : nullptr, index < run->threads, run->own,
        run->batch_size, run->input, run->output, nullptr);
    if (status != xnn_status_success) {
      run->failed_status.store(static_cast<int>(status), std::memory_order_relaxed);
    }
    run->finished.fetch_add(1, std::memory_order_acq_rel);
  }
};

xnn_status PackedOperator::run_slab(const Slab& slab, const Slab* next, bool first, bool own,
                                    size_t batch_size, const void* input, void* output,
                                    pthreadpool_t pool) const {
  const float* x = static_cast<const float*>(input);
  float* y = static_cast<float*>(output) + slab.first;
  if (own && batch_size == 1) {
    packed_gemv(slab.packed, input_channels_, slab.count, x, y);
    return xnn_status_success;
  }
  if (own) {
    // The slab before came with this one prefetched; the first is read here.
    if (first) touch_for(slab, batch_size);
    packed_gemm(slab.packed, input_channels_, slab.count, batch_size, x, y, output_channels_,
                next != nullptr ? next->packed : nullptr, next != nullptr ? next->packed_bytes : 0);
    return xnn_status_success;
  }
  touch_for(slab, batch_size);
  const xnn_status status = setup_slab(slab, batch_size, input, output, pool);
  return status == xnn_status_success ? xnn_run_operator(slab.op, pool) : status;
}

Status PackedOperator::run(size_t batch_size, const void* input, void* output) {
  // packed_gemv and packed_gemm set no operator up, so their runs need no lock.
  const bool own = batch_size == 1 ? one_row_gemv_ : rows_gemm_;
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  if (!own) lock.lock();
  // A small entry runs on the calling thread: see kPoolMinFlops.
  const size_t flops = 2 * batch_size * input_channels_ * output_channels_;
  pthreadpool_t pool = flops >= kPoolMinFlops || slabs_.size() > 1 ? threadpool() : nullptr;
  const char* kind = weight_dtype_ == runtime::ScalarType::Half ? "f16 " : "";
  if (slabs_across_pool_ && pool != nullptr && slabs_.size() > 1) {
    SlabRun job;
    job.entry = this;
    job.batch_size = batch_size;
    job.input = input;
    job.output = output;
    job.own = own;
    job.threads = num_threads();
    job.started.store(true, std::memory_order_release);
    parallel_for(slabs_.size(), &SlabRun::task, &job);
    (void)job.finished.load(std::memory_order_acquire);
    const int status = job.failed_status.load(std::memory_order_relaxed);
    ES_CHECK_OR_RETURN_ERROR(status == 0, Error::DelegateExecutionFailed,
                             "XNNPACK %sfully connected run over '%s' failed (status %d)", kind,
                             weight_key_.c_str(), status);
    return Status();
  }
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const Slab* next = i + 1 < slabs_.size() ? &slabs_[i + 1] : nullptr;
    const xnn_status status =
        run_slab(slabs_[i], next, i == 0, own, batch_size, input, output, pool);
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                             "XNNPACK %sfully connected run over '%s' failed (status %d)", kind,
                             weight_key_.c_str(), static_cast<int>(status));
  }
  return Status();
}

void PackedOperator::plan_slabs(size_t slab_bytes) {
  const size_t element = weight_dtype_ == runtime::ScalarType::Half ? 2 : 4;
  size_t capacity = 0;
  for (const auto& range :
       xnnpack::plan_slabs(input_channels_, output_channels_, element, slab_bytes)) {
    slabs_.push_back(Slab{nullptr, range.first, range.second});
    // XNNPACK's packing of a slab: output channels rounded up to its column tile (at most 64
    // here), each with its inputs and a bias; the slack covers its padding. Over-estimates are
    // given back once every slab is placed.
    capacity += ((range.second + 63) / 64 * 64) * (input_channels_ + 1) * element + 4096;
  }
  region_.reset(new PackedRegion(capacity, slabs_.size()));
}

void PackedOperator::touch_for(const Slab& slab, size_t batch_size) {
  if (batch_size >= kTouchMinRows) touch(slab.packed, slab.packed_bytes);
}

Status PackedOperator::run_fully_connected(size_t batch_size, const float* input, float* output) {
  if (weight_dtype_ != runtime::ScalarType::Float) {
    return Status::Format(Error::InvalidArgument,
                          "fully connected entry over '%s' is f16; run it with f16 buffers",
                          weight_key_.c_str());
  }
  return run(batch_size, input, output);
}

Status PackedOperator::run_fully_connected_f16(size_t batch_size, const void* input, void* output) {
  if (weight_dtype_ != runtime::ScalarType::Half) {
    return Status::Format(Error::InvalidArgument,
                          "fully connected entry over '%s' is f32; run it with float buffers",
                          weight_key_.c_str());
  }
  return run(batch_size, input, output);
}

size_t default_slab_bytes() {
  static const size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    const size_t l2_bytes = l2 > 0 ? static_cast<size_t>(l2) : kFallbackL2Bytes;
    return l2_bytes / kL2BytesPerSlabByte;
  }();
  return bytes;
}

WeightsCache::WeightsCache(size_t slab_bytes, bool slabs_across_pool)
    : slab_bytes_(slab_bytes), slabs_across_pool_(slabs_across_pool) {
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
  counters_.named_data_fetches[ref.key] += 1;
  counters_.bytes_fetched += size;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.fetches[ref.key] += 1;
  p.bytes_fetched += size;
}

Result<FreeableBuffer> WeightsCache::fetch_locked(const NamedDataMap* map, const ConstantRef& ref) {
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, fetch_unlocked(map, ref));
  count_fetch_locked(ref, bytes.size());
  ES_RETURN_IF_ERROR(check_fetched_size(map, ref, bytes));
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

bool WeightsCache::borrow_locked(const ConstantRef& ref, bool verify, Bytes* bytes) {
  if (ref.identity.is_inline) {
    // The graph carries these bytes and they are their own identity: nothing to check.
    bytes->data = ref.identity.inline_bytes.data();
    bytes->size = ref.identity.inline_bytes.size();
    return true;
  }
  // Bytes an elementwise op already holds (same identity, so the same bytes) need no fetch; one
  // more reference keeps them while this miss packs without the lock.
  if (RetainedConstant* retained = find_retained_locked(ref.identity, verify)) {
    retained->refs_ += 1;
    bytes->pinned = retained;
    bytes->data = retained->data();
    bytes->size = retained->size();
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
  // Fetched once: bytes load_unpacked_data() holds are taken over (a miss ends by freeing every
  // unpacked buffer anyway), so that no other miss can free them under this one.
  for (auto it = unpacked_.begin(); it != unpacked_.end(); ++it) {
    if (it->key == ref.key && it->digest == ref.identity.digest && (it->verified || !verify)) {
      bytes->owned = std::move(it->buffer);
      unpacked_.erase(it);
      bytes->data = bytes->owned.data();
      bytes->size = bytes->owned.size();
      return true;
    }
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
  bytes->from_map = true;
  bytes->size = fetched.size();
  bytes->owned = std::move(fetched);
  ES_RETURN_IF_ERROR(check_fetched_size(map, ref, bytes->owned));
  bytes->data = bytes->owned.data();
  bytes->unchecked = verify;
  return Status();
}

void WeightsCache::drop_bytes_locked(Bytes* bytes) {
  bytes->owned.free();
  bytes->shared = runtime::ExternalConstant();
  if (bytes->pinned != nullptr) release_locked(bytes->pinned);
  bytes->pinned = nullptr;
}

Result<const void*> WeightsCache::load_unpacked_data(const NamedDataMap* map,
                                                     const ConstantRef& ref) {
  const bool verify = verify_content_enabled();
  std::lock_guard<std::mutex> lock(mutex_);
  if (ref.identity.is_inline) return static_cast<const void*>(ref.identity.inline_bytes.data());
  if (const RetainedConstant* retained = find_retained_locked(ref.identity, verify)) {
    return static_cast<const void*>(retained->data());
  }
  for (const Unpacked& u : unpacked_) {
    if (u.key == ref.key && u.digest == ref.identity.digest && (u.verified || !verify)) {
      return u.buffer.data();
    }
  }
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, fetch_locked(map, ref));
  if (verify) {
    ES_RETURN_IF_ERROR(count_verification_locked(
        map, ref, bytes.size(),
        runtime::check_sha256(bytes.data(), bytes.size(), ref.identity.digest)));
  }
  const void* data = bytes.data();
  unpacked_.push_back(Unpacked{ref.key, ref.identity.digest, verify, std::move(bytes)});
  return data;
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

// One request of a batch, from its reservation to its publication. The pool tasks write only
// their own fields of a reserved miss (hashed, created, the flags) and the entry's slab
// operators; everything the cache owns is touched under its lock, before and after the pool call.
struct WeightsCache::Miss {
  enum class Kind {
    kHit,       // A published entry (one reference taken).
    kReserved,  // A new "being packed" entry this batch fetches, hashes and packs.
    kRepeat,    // The same key as an earlier request of the batch: a hit on that one's entry.
  };
  const FullyConnectedRequest* request = nullptr;
  PackedKey key;
  Kind kind = Kind::kHit;
  PackedOperator* entry = nullptr;
  Bytes kernel, bias;
  Status hashed[2];                      // The weight's and the bias's checks, when hashed.
  std::vector<xnn_status> created;       // Per slab.
  std::atomic<bool> hash_failed{false};  // Lets the packs after a failed hash skip their work.
  std::atomic<size_t> tasks_left{0};     // The last of this miss's tasks gives its bytes back.

  bool needs_hash() const { return kernel.unchecked || bias.unchecked; }

  void check() {
    const Bytes* bytes[2] = {&kernel, &bias};
    const runtime::Digest* digests[2] = {&request->weight.identity.digest,
                                         &request->bias.identity.digest};
    for (int i = 0; i < 2; ++i) {
      if (!bytes[i]->unchecked) continue;
      hashed[i] = runtime::check_sha256(bytes[i]->data, bytes[i]->size, *digests[i]);
      if (!hashed[i].ok()) hash_failed.store(true, std::memory_order_relaxed);
    }
  }

  void pack(size_t index) {
    if (hash_failed.load(std::memory_order_relaxed)) return;
    PackedOperator::Slab& slab = entry->slabs_[index];
    const size_t in = entry->input_channels_, out = entry->output_channels_;
    const bool f16 = entry->weight_dtype_ == runtime::ScalarType::Half;
    const size_t element = f16 ? 2 : 4;
    const uint8_t* w = static_cast<const uint8_t*>(kernel.data) + slab.first * in * element;
    const uint8_t* b =
        request->has_bias ? static_cast<const uint8_t*>(bias.data) + slab.first * element : nullptr;
    // Shared operators are created unclamped: a clamp is a property of the node using the
    // weights, not of the weights, so clamping here would split one weight into several entries.
    const float lo = -std::numeric_limits<float>::infinity();
    const float hi = std::numeric_limits<float>::infinity();
    // Asked before the scope: their first calls pack probe weights of their own.
    const bool gemv = !f16 && (packed_gemv_usable() || packed_gemm_usable());
    // f16 weights (and bias) are IEEE half bytes, packed as they are by the f16 operator.
    PackedRegionScope scope(entry->region_.get());
    created[index] = f16 ? xnn_create_fully_connected_nc_f16(in, slab.count, /*input_stride=*/in,
                                                             /*output_stride=*/out, w, b, lo, hi,
                                                             /*flags=*/0, &slab.op)
                         : xnn_create_fully_connected_nc_f32(
                               in, slab.count, /*input_stride=*/in,
                               /*output_stride=*/out, reinterpret_cast<const float*>(w),
                               reinterpret_cast<const float*>(b), lo, hi,
                               /*flags=*/0, &slab.op);
    slab.packed = scope.last_block();
    slab.packed_bytes = scope.last_size();
    slab.gemv = gemv && created[index] == xnn_status_success && slab.packed != nullptr &&
                slab.packed_bytes == packed_gemv_bytes(in, slab.count);
  }

  // Owned bytes go back as soon as nothing reads them: a batch holding every fetched weight to
  // its end would map the whole graph's weights at once (80 MiB more at the peak of the
  // reference model's first load).
  void task_done() {
    if (tasks_left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    kernel.owned.free();
    bias.owned.free();
  }

  xnn_status first_failure() const {
    for (xnn_status s : created) {
      if (s != xnn_status_success) return s;
    }
    return xnn_status_success;
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
      total += misses[i].entry->slabs_.size();
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
      for (size_t slab = 0; slab < misses[i].entry->slabs_.size(); ++slab) {
        while (lanes[lane].next == lanes[lane].end) ++lane;
        tasks[lanes[lane].next++] = Task{&misses[i], slab};
      }
    }
  }

  static size_t bytes(const Miss* m) { return m->kernel.size + m->bias.size; }

  void add_packs(Miss* miss) {
    for (size_t slab = 0; slab < miss->entry->slabs_.size(); ++slab)
      tasks.push_back(Task{miss, slab});
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
  for (size_t i = 0; i < n; ++i) entries->push_back(misses[i].entry);
  return Status();
}

size_t WeightsCache::key_misses(const std::vector<FullyConnectedRequest>& requests, Miss* misses,
                                Status* error) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const FullyConnectedRequest& r = requests[i];
    Miss& m = misses[i];
    m.request = &r;
    *error = check_fully_connected_dtypes(r.weight, r.has_bias ? &r.bias : nullptr);
    if (!error->ok()) return i;
    m.key.op_kind = r.weight.identity.dtype == runtime::ScalarType::Half ? kFullyConnectedF16
                                                                         : kFullyConnectedF32;
    m.key.weight = r.weight.identity;
    m.key.has_bias = r.has_bias;
    if (r.has_bias) m.key.bias = r.bias.identity;
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
  bool any_fetched = false;
  for (size_t i = 0; i < count; ++i) {
    Miss& m = misses[i];
    if (status.ok() && i < fetched) {
      status = finish_locked(map, &m);
      any_fetched = any_fetched || m.kind == Miss::Kind::kReserved;
    } else if (status.ok() && i == fetched) {
      // The request that stopped the batch before hashing: its fetches count, as they would have.
      if (m.kernel.from_map) count_fetch_locked(m.request->weight, m.kernel.size);
      if (m.bias.from_map) count_fetch_locked(m.request->bias, m.bias.size);
      if (m.kind == Miss::Kind::kReserved) finish_reserved_locked(m.entry, stop_error);
      status = stop_error;
    } else {
      abandon_locked(&m);
    }
    if (!status.ok() && *failed == count) *failed = i;
    drop_bytes_locked(&m.kernel);
    drop_bytes_locked(&m.bias);
  }
  // Bytes load_unpacked_data() held were either taken over by a miss or are no longer needed.
  if (any_fetched) free_unpacked_data_locked();
  if (!status.ok()) {
    for (size_t i = 0; i < *failed; ++i) release_locked(misses[i].entry);
  }
  return status;
}

void WeightsCache::abandon_locked(Miss* miss) {
  if (miss->kind == Miss::Kind::kReserved) {
    finish_reserved_locked(miss->entry, Status(Error::Internal));  // Removed, never counted.
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
      const PackedOperator* found = find_packed_locked(&misses[i].key, verify);
      busy = found != nullptr && found->packing_;
    }
    if (busy) packed_cv_.wait(*lock);
  }
  for (size_t i = 0; i < count; ++i) {
    Miss& m = misses[i];
    PackedOperator* found = find_packed_locked(&m.key, verify);
    if (found == nullptr) {
      std::unique_ptr<PackedOperator> entry(new PackedOperator());
      m.kind = Miss::Kind::kReserved;
      m.entry = entry.get();
      packed_.emplace(m.key, std::move(entry));
    } else if (found->packing_) {
      m.kind = Miss::Kind::kRepeat;  // Reserved by an earlier miss of this batch.
      m.entry = found;
    } else {
      m.kind = Miss::Kind::kHit;
      m.entry = found;
      found->refs_ += 1;
    }
  }
}

Status WeightsCache::fetch_miss(const NamedDataMap* map, bool verify, Miss* miss) {
  const FullyConnectedRequest& r = *miss->request;
  PackedOperator* entry = miss->entry;
  entry->weight_dtype_ = r.weight.identity.dtype;
  entry->input_channels_ = r.input_channels;
  entry->output_channels_ = r.output_channels;
  entry->weight_key_ = r.weight.key;
  if (r.has_bias) entry->bias_key_ = r.bias.key;
  entry->slabs_across_pool_ = slabs_across_pool_;
  ES_RETURN_IF_ERROR(bytes_for_miss(map, r.weight, verify, &miss->kernel));
  if (r.has_bias) ES_RETURN_IF_ERROR(bytes_for_miss(map, r.bias, verify, &miss->bias));
  entry->plan_slabs(slab_bytes_);
  miss->created.assign(entry->slabs_.size(), xnn_status_success);
  return Status();
}

void WeightsCache::hash_and_pack(Miss* misses, size_t count) {
  BatchJob job;
  pthreadpool_t pool = threadpool();
  for (size_t i = 0; i < count; ++i) {
    Miss& m = misses[i];
    if (m.kind != Miss::Kind::kReserved) continue;
    m.tasks_left.store(m.entry->slabs_.size() + (m.needs_hash() ? 1 : 0),
                       std::memory_order_relaxed);
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
    miss->entry->refs_ += 1;  // Published by the earlier request: it came first and did not fail.
  }
  if (miss->kind != Miss::Kind::kReserved) {
    count_hit_locked();
    return Status();
  }
  if (miss->kernel.from_map) count_fetch_locked(r.weight, miss->kernel.size);
  if (miss->bias.from_map) count_fetch_locked(r.bias, miss->bias.size);
  // A wrong digest is reported before anything XNNPACK said: the bytes were not what was exported.
  const Status weight_check =
      miss->kernel.unchecked
          ? count_verification_locked(map, r.weight, miss->kernel.size, miss->hashed[0])
          : Status();
  const Status bias_check =
      miss->bias.unchecked
          ? count_verification_locked(map, r.bias, miss->bias.size, miss->hashed[1])
          : Status();
  Status status = weight_check.ok() ? bias_check : weight_check;
  if (status.ok()) {
    status =
        create_status(miss->first_failure(), r.weight.identity.dtype == runtime::ScalarType::Half,
                      r.weight, r.input_channels, r.output_channels);
  }
  finish_reserved_locked(miss->entry, status);
  return status;
}

void WeightsCache::finish_reserved_locked(PackedOperator* entry, const Status& status) {
  for (auto it = packed_.begin(); it != packed_.end(); ++it) {
    if (it->second.get() != entry) continue;
    if (status.ok()) {
      const bool own_layout = std::all_of(entry->slabs_.begin(), entry->slabs_.end(),
                                          [](const PackedOperator::Slab& s) { return s.gemv; });
      entry->one_row_gemv_ = own_layout && packed_gemv_usable();
      entry->rows_gemm_ = own_layout && packed_gemm_usable();
      entry->packing_ = false;
      entry->refs_ = 1;
      count_pack_locked();
    } else {
      // Nothing of a failed load stays: its operators (if any) go with the entry.
      packed_.erase(it);
    }
    break;
  }
  packed_cv_.notify_all();
}

void WeightsCache::release(PackedOperator* entry) {
  if (entry == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  release_locked(entry);
}

void WeightsCache::release_locked(PackedOperator* entry) {
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
        map, ref, bytes.size(),
        runtime::check_sha256(bytes.data(), bytes.size(), ref.identity.digest)));
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
  release_locked(constant);
}

void WeightsCache::release_locked(RetainedConstant* constant) {
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
    if (entry.second->packing_) continue;  // Not an entry until it is published.
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

size_t WeightsCache::published_count_locked() const {
  size_t n = 0;
  for (const auto& entry : packed_) n += entry.second->packing_ ? 0 : 1;
  return n;
}

size_t WeightsCache::get_num_packed_data() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_count_locked();
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
  stats.num_packed_entries = published_count_locked();
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
