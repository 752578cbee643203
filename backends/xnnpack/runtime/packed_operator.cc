#include "edgeshare/backends/xnnpack/runtime/packed_operator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <utility>

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Status;

namespace {

// Slab sizing: an eighth of L2, so a slab shares L2 with the input rows (up to 256 KiB at 2048
// inputs) and the output tile; one layout serves every batch. The choice is a measured one
// (slabs_bench.cc; the figures are in docs/kernels.md).
constexpr size_t kFallbackL2Bytes = size_t{1} << 20;
constexpr size_t kL2BytesPerSlabByte = 8;
// Slab widths are a multiple of this many output channels, which is a multiple of the column tile
// (nr: 8, 16 or 32) of XNNPACK's x86 f32 kernels and of the delegate's own (16): only the last
// slab can end in a partial tile.
constexpr size_t kSlabChannelMultiple = 32;
// A run of this many rows or more over slabs that do not divide evenly among the threads (a
// weight of one slab, say: a key or value projection) is cut into parts that do.
constexpr size_t kSplitMinRows = 2;
// The most parts a run is cut into: the parts live on the stack of the run.
constexpr size_t kMaxRunParts = 64;

// [first, count) output channel ranges of about `slab_bytes` packed bytes each, of equal width.
std::vector<std::pair<size_t, size_t>> slab_ranges(size_t input_channels, size_t output_channels,
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

const char* or_inline(const std::string& key) { return key.empty() ? "<inline>" : key.c_str(); }

}  // namespace

size_t default_slab_bytes() {
  static const size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    const size_t l2_bytes = l2 > 0 ? static_cast<size_t>(l2) : kFallbackL2Bytes;
    return l2_bytes / kL2BytesPerSlabByte;
  }();
  return bytes;
}

std::unique_ptr<PackedOperator> PackedOperator::plan(const Shape& shape) {
  // The f32 probe packs weights of its own with XNNPACK: before any slab packs here. Then this
  // format's kernels.
  (void)kernels::f32_kernel_sets();
  shape.format->settle();
  std::unique_ptr<PackedOperator> op(new PackedOperator(shape));
  if (op->own_packing()) {
    op->plan_own();
  } else {
    op->plan_f32();
  }
  return op;
}

void PackedOperator::plan_f32() {
  const size_t element = 4;
  size_t capacity = 0;
  for (const auto& range : slab_ranges(shape_.input_channels, shape_.output_channels, element,
                                       shape_.slab_bytes)) {
    Slab slab;
    slab.own.first = range.first;
    slab.own.count = range.second;
    slabs_.push_back(slab);
    // XNNPACK's packing of a slab: output channels rounded up to its column tile (at most 64
    // here), each with its inputs and a bias; the slack covers its padding. Over-estimates are
    // given back once every slab is placed.
    capacity += ((range.second + 63) / 64 * 64) * (shape_.input_channels + 1) * element + 4096;
  }
  region_.reset(new PackedRegion(capacity, slabs_.size()));
}

void PackedOperator::plan_own() {
  const FcFormat& format = *shape_.format;
  // Slab widths are multiples of kSlabChannelMultiple, so every slab starts on a whole tile.
  const size_t tile = format.tile, alignment = format.alignment;
  const size_t tile_bytes = format.tile_bytes(fc_shape());
  const size_t total = (shape_.output_channels + tile - 1) / tile * tile_bytes;
  region_.reset(new PackedRegion(total + alignment, 1));
  void* packed = region_->allocate(total, alignment);
  if (packed == nullptr) {
    // No huge-page region: plain aligned memory.
    const size_t rounded = (total + alignment - 1) / alignment * alignment;
    packed = std::aligned_alloc(alignment, rounded);
    owned_ = std::unique_ptr<void, void (*)(void*)>(packed, std::free);
  }
  for (const auto& range : slab_ranges(shape_.input_channels, shape_.output_channels,
                                       format.element_bytes, shape_.slab_bytes)) {
    Slab slab;
    slab.own.first = range.first;
    slab.own.count = range.second;
    if (packed != nullptr && kSlabChannelMultiple % tile == 0) {
      slab.own.packed = static_cast<uint8_t*>(packed) + range.first / tile * tile_bytes;
      slab.own.packed_bytes = (range.second + tile - 1) / tile * tile_bytes;
    }
    slabs_.push_back(slab);
  }
}

PackedOperator::~PackedOperator() {
  // The packed weights go with the operators.
  for (const Slab& slab : slabs_) {
    if (slab.op != nullptr) xnn_delete_operator(slab.op);
  }
}

void PackedOperator::pack_slab(size_t index, const void* weight, const void* bias,
                               const void* scales) {
  Slab& slab = slabs_[index];
  const FcFormat& format = *shape_.format;
  if (own_packing()) {
    // Without its packing's memory, or scales it needs, it stays uncreated: seal() reports it.
    if (slab.own.packed == nullptr || (format.has_scales && scales == nullptr)) return;
    format.pack(fc_shape(), slab.own.first, slab.own.count, weight, bias, scales,
                const_cast<void*>(slab.own.packed));
    slab.created = xnn_status_success;
    return;
  }
  const size_t in = shape_.input_channels, out = shape_.output_channels;
  const float* w = static_cast<const float*>(weight) + slab.own.first * in;
  const float* b = bias != nullptr ? static_cast<const float*>(bias) + slab.own.first : nullptr;
  const float lo = -std::numeric_limits<float>::infinity();
  const float hi = std::numeric_limits<float>::infinity();
  PackedRegionScope scope(region_.get());
  slab.created = xnn_create_fully_connected_nc_f32(in, slab.own.count, /*input_stride=*/in,
                                                   /*output_stride=*/out, w, b, lo, hi,
                                                   /*flags=*/0, &slab.op);
  slab.own.packed = scope.last_block();
  slab.own.packed_bytes = scope.last_size();
}

Status PackedOperator::seal_own() {
  const FcFormat& format = *shape_.format;
  const char* key = or_inline(shape_.weight_key);
  for (const Slab& slab : slabs_) {
    ES_CHECK_OR_RETURN_ERROR(slab.created == xnn_status_success, Error::DelegateInitFailed,
                             "could not pack the %s fully connected weight '%s' [%zu x %zu]: no "
                             "memory for its packing%s",
                             format.what, key, shape_.output_channels, shape_.input_channels,
                             format.has_scales ? ", or no scales" : "");
    const Status args = format.check_slab(fc_shape(), slab.own);
    if (!args.ok()) return args.WithContext("%s fully connected weight '%s'", format.what, key);
  }
  sealed_ = true;
  return Status();
}

Status PackedOperator::seal() { return own_packing() ? seal_own() : seal_f32(); }

Status PackedOperator::seal_f32() {
  for (const Slab& slab : slabs_) {
    const xnn_status status = slab.created;
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                             "XNNPACK could not create the f32 fully connected operator for weight "
                             "'%s' [%zu x %zu] (status %d)",
                             or_inline(shape_.weight_key), shape_.output_channels,
                             shape_.input_channels, static_cast<int>(status));
  }
  // The delegate's kernels read XNNPACK's packing directly: only where every slab meets their
  // preconditions (XNNPACK placed small packings in malloc, which the delegate does not track).
  bool own = true;
  for (const Slab& slab : slabs_) {
    own = own && kernels::check_f32_kernel_args(shape_.input_channels, slab.own.count,
                                                slab.own.packed, slab.own.packed_bytes)
                     .ok();
  }
  // The scalar reference is never faster than XNNPACK's operators over their packing.
  const kernels::KernelSets<kernels::F32Kernels>& sets = kernels::f32_kernel_sets();
  own = own && sets.best_isa() != kernels::Isa::kScalar;
  gemv_ = own ? sets.best().gemv : nullptr;
  gemm_ = own ? sets.best().gemm : nullptr;
  sealed_ = true;
  return Status();
}

// Every slab over all rows, one slab per parallel_for item: each thread keeps its slab in its own
// L2 while it runs every row tile over it, instead of all threads sweeping each slab together.
struct PackedOperator::SlabRun {
  const PackedOperator* entry = nullptr;
  size_t threads = 1;
  // An own packing's rows, prepared once.
  const FcRows* rows = nullptr;
  // An f32 entry's run.
  size_t batch_size = 0;
  const float* input = nullptr;
  float* output = nullptr;
  bool own = false;  // The delegate's f32 kernels instead of the slabs' operators.
  // parallel_for's own atomics already order the items; these keep the job's state explicit
  // (status from any thread) and visible to ThreadSanitizer whatever runs the items.
  std::atomic<bool> started{false};
  std::atomic<int> finished{0};
  std::atomic<int> failed_status{0};

  // An own packing's run cut into parts (split_own) instead of its slabs: `part_count` of them.
  const FcSlab* parts = nullptr;
  size_t part_count = 0;

  static void task(void* context, size_t index) {
    SlabRun* run = static_cast<SlabRun*>(context);
    (void)run->started.load(std::memory_order_acquire);
    const std::vector<Slab>& slabs = run->entry->slabs_;
    // Each thread takes about every `threads`-th slab: that one is the slab to prefetch.
    const size_t next = index + run->threads;
    const Slab* after = next < slabs.size() ? &slabs[next] : nullptr;
    const bool first = index < run->threads;
    int status = 0;
    if (run->parts != nullptr) {
      const PackedOperator& e = *run->entry;
      const FcSlab* part_after = next < run->part_count ? &run->parts[next] : nullptr;
      if (!e.shape_.format->run_slab(e.fc_shape(), run->parts[index], *run->rows, part_after,
                                     first)) {
        status = -1;
      }
    } else if (run->rows != nullptr) {
      const PackedOperator& e = *run->entry;
      if (!e.shape_.format->run_slab(e.fc_shape(), slabs[index].own, *run->rows,
                                     after != nullptr ? &after->own : nullptr, first)) {
        status = -1;
      }
    } else {
      status = static_cast<int>(run->entry->run_f32_slab(slabs[index], after, first, run->own,
                                                         run->batch_size, run->input,
                                                         run->output, nullptr));
    }
    if (status != 0) run->failed_status.store(status, std::memory_order_relaxed);
    run->finished.fetch_add(1, std::memory_order_acq_rel);
  }
};

FcSlab PackedOperator::whole_own() const {
  FcSlab whole = slabs_.front().own;
  const FcSlab& last = slabs_.back().own;
  whole.count = last.first + last.count;
  whole.packed_bytes = static_cast<const uint8_t*>(last.packed) + last.packed_bytes -
                       static_cast<const uint8_t*>(whole.packed);
  return whole;
}

size_t PackedOperator::split_own(size_t threads, FcSlab* parts) const {
  const FcFormat& format = *shape_.format;
  const size_t tile = format.tile, n = shape_.output_channels;
  const FcSlab whole = whole_own();
  if (whole.packed == nullptr || kSlabChannelMultiple % tile != 0) return 0;
  const size_t tile_bytes = format.tile_bytes(fc_shape());
  const size_t widest = (n + kSlabChannelMultiple - 1) / kSlabChannelMultiple;
  const size_t count =
      std::min({(slabs_.size() + threads - 1) / threads * threads, widest, kMaxRunParts});
  size_t width = (n + count - 1) / count;
  width = (width + kSlabChannelMultiple - 1) / kSlabChannelMultiple * kSlabChannelMultiple;
  size_t made = 0;
  for (size_t first = 0; first < n; first += width) {
    FcSlab& part = parts[made++];
    part.first = first;
    part.count = std::min(width, n - first);
    part.packed = static_cast<const uint8_t*>(whole.packed) + first / tile * tile_bytes;
    part.packed_bytes = (part.count + tile - 1) / tile * tile_bytes;
  }
  return made;
}

xnn_status PackedOperator::run_f32_slab(const Slab& slab, const Slab* next, bool first, bool own,
                                        size_t batch_size, const float* input, float* output,
                                        pthreadpool_t pool) const {
  const FcSlab& s = slab.own;
  float* y = output + s.first;
  const float* packed = static_cast<const float*>(s.packed);
  const size_t k = shape_.input_channels;
  if (own && batch_size == 1) {
    gemv_(packed, k, s.count, input, y);
    return xnn_status_success;
  }
  if (own) {
    // The slab before came with this one prefetched; the first is read here.
    if (first && batch_size >= kTouchMinRows) touch(s.packed, s.packed_bytes);
    gemm_(packed, k, s.count, batch_size, input, k, y, shape_.output_channels,
          next != nullptr ? next->own.packed : nullptr, next != nullptr ? next->own.packed_bytes : 0);
    return xnn_status_success;
  }
  // Pulls the slab into this core's caches before a run over enough rows to reuse it from there.
  if (batch_size >= kTouchMinRows) touch(s.packed, s.packed_bytes);
  // Each slab writes its own columns of the shared [batch, out] output (row stride: all columns).
  const xnn_status status = xnn_setup_fully_connected_nc_f32(slab.op, batch_size, input, y, pool);
  return status == xnn_status_success ? xnn_run_operator(slab.op, pool) : status;
}

Status PackedOperator::run(size_t rows, const float* x, float* y,
                           const QuantizedScratchLayout& layout, void* scratch, pthreadpool_t pool,
                           bool quantized) {
  const char* key = or_inline(shape_.weight_key);
  ES_CHECK_OR_RETURN_ERROR(sealed_, Error::InvalidState,
                           "fully connected entry over '%s' was run before it was packed", key);
  ES_CHECK_OR_RETURN_ERROR(rows == 0 || (x != nullptr && y != nullptr), Error::InvalidArgument,
                           "fully connected run over '%s' was given a null input or output", key);
  if (own_packing()) return run_own(rows, x, y, layout, scratch, pool, quantized);
  return run_f32(rows, x, y, pool);
}

Status PackedOperator::run_own(size_t rows, const float* x, float* y,
                               const QuantizedScratchLayout& layout, void* scratch,
                               pthreadpool_t pool, bool quantized) {
  const FcFormat& format = *shape_.format;
  const char* key = or_inline(shape_.weight_key);
  FcRows prepared;
  prepared.rows = rows;
  prepared.x = x;
  prepared.y = y;
  if (format.prepare != nullptr) {
    ES_CHECK_OR_RETURN_ERROR(scratch != nullptr && layout.bytes > 0, Error::InvalidArgument,
                             "%s fully connected run over '%s' was given no scratch", format.what,
                             key);
    ES_CHECK_OR_RETURN_ERROR(rows <= layout.max_rows, Error::InvalidArgument,
                             "%s fully connected run over '%s': %zu rows, its scratch holds %zu",
                             format.what, key, rows, layout.max_rows);
    prepared.scratch = layout.scratch(scratch);
    if (rows == 0) return Status();
    if (!quantized) {
      const Status ready = format.prepare(fc_shape(), &prepared);
      if (!ready.ok()) {
        return ready.WithContext("%s fully connected run over '%s'", format.what, key);
      }
    }
  }
  if (rows == 0) return Status();
  bool ok = true;
  const size_t threads = pool != nullptr ? pthreadpool_get_threads_count(pool) : 1;
  FcSlab parts[kMaxRunParts];
  const size_t part_count = threads > 1 && rows >= kSplitMinRows && slabs_.size() % threads != 0
                                ? split_own(threads, parts)
                                : 0;
  if (part_count > 1) {
    SlabRun job;
    job.entry = this;
    job.threads = threads;
    job.rows = &prepared;
    job.parts = parts;
    job.part_count = part_count;
    job.started.store(true, std::memory_order_release);
    parallel_for(part_count, &SlabRun::task, &job);
    (void)job.finished.load(std::memory_order_acquire);
    ok = job.failed_status.load(std::memory_order_relaxed) == 0;
  } else if (slabs_.size() > 1 && pool != nullptr) {
    SlabRun job;
    job.entry = this;
    job.threads = pthreadpool_get_threads_count(pool);
    job.rows = &prepared;
    job.started.store(true, std::memory_order_release);
    parallel_for(slabs_.size(), &SlabRun::task, &job);
    (void)job.finished.load(std::memory_order_acquire);
    ok = job.failed_status.load(std::memory_order_relaxed) == 0;
  } else if (rows == 1) {
    // One row on this thread: see whole_own().
    ok = format.run_slab(fc_shape(), whole_own(), prepared, nullptr, true);
  } else {
    for (size_t i = 0; i < slabs_.size() && ok; ++i) {
      const FcSlab* next = i + 1 < slabs_.size() ? &slabs_[i + 1].own : nullptr;
      ok = format.run_slab(fc_shape(), slabs_[i].own, prepared, next, i == 0);
    }
  }
  ES_CHECK_OR_RETURN_ERROR(ok, Error::DelegateExecutionFailed,
                           "%s fully connected run over '%s' failed: a slab's kernel refused "
                           "its arguments",
                           format.what, key);
  return Status();
}

Status PackedOperator::run_f32(size_t batch_size, const float* input, float* output,
                               pthreadpool_t pool) {
  // The delegate's kernels set no operator up, so their runs need no lock.
  const bool own = batch_size == 1 ? gemv_ != nullptr : gemm_ != nullptr;
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  if (!own) lock.lock();
  // A small entry runs on the calling thread: see kPoolMinFlops.
  const size_t flops = 2 * batch_size * shape_.input_channels * shape_.output_channels;
  if (flops < kPoolMinFlops && slabs_.size() == 1) pool = nullptr;
  if (pool != nullptr && slabs_.size() > 1) {
    SlabRun job;
    job.entry = this;
    job.batch_size = batch_size;
    job.input = input;
    job.output = output;
    job.own = own;
    job.threads = pthreadpool_get_threads_count(pool);
    job.started.store(true, std::memory_order_release);
    parallel_for(slabs_.size(), &SlabRun::task, &job);
    (void)job.finished.load(std::memory_order_acquire);
    const int status = job.failed_status.load(std::memory_order_relaxed);
    ES_CHECK_OR_RETURN_ERROR(status == 0, Error::DelegateExecutionFailed,
                             "fully connected run over '%s' failed (XNNPACK status %d)",
                             shape_.weight_key.c_str(), status);
    return Status();
  }
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const Slab* next = i + 1 < slabs_.size() ? &slabs_[i + 1] : nullptr;
    const xnn_status status =
        run_f32_slab(slabs_[i], next, i == 0, own, batch_size, input, output, pool);
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                             "fully connected run over '%s' failed (XNNPACK status %d)",
                             shape_.weight_key.c_str(), static_cast<int>(status));
  }
  return Status();
}

}  // namespace xnnpack
}  // namespace edgeshare
