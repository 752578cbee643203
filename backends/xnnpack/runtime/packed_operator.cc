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

bool is_f16(const PackedOperator::Shape& shape) {
  return shape.weight_dtype == runtime::ScalarType::Half;
}

bool is_qc8w(const PackedOperator::Shape& shape) {
  return shape.weight_dtype == runtime::ScalarType::Char;
}

bool is_qc4w(const PackedOperator::Shape& shape) {
  return shape.weight_dtype == runtime::ScalarType::Byte;
}

// The vector kernels read a tile in 64-byte groups: the packing starts on a cache line.
constexpr size_t kQC8WAlignment = 64;

// The f16w packing starts on a cache line too: a tile's inputs are 32-byte loads, two a line.
constexpr size_t kF16WAlignment = 64;

}  // namespace

namespace {

constexpr size_t kScratchPartAlignment = 64;

size_t align_scratch_part(size_t bytes) {
  return (bytes + kScratchPartAlignment - 1) / kScratchPartAlignment * kScratchPartAlignment;
}

}  // namespace

QuantizedScratchLayout QuantizedScratchLayout::qc8w(size_t max_rows, size_t k, size_t n) {
  QuantizedScratchLayout layout;
  layout.max_rows = max_rows;
  layout.scales = align_scratch_part(max_rows * kernels::qc8_padded_k(k));
  layout.sums = layout.scales + align_scratch_part(max_rows * sizeof(float));
  layout.bytes = layout.sums + align_scratch_part(max_rows * n * sizeof(int32_t));
  return layout;
}

QuantizedScratchLayout QuantizedScratchLayout::qc4w(size_t max_rows, size_t k, size_t group) {
  QuantizedScratchLayout layout;
  layout.max_rows = max_rows;
  layout.group_sums_part = true;
  layout.scales = align_scratch_part(max_rows * kernels::qc8_padded_k(k));
  layout.sums = layout.scales + align_scratch_part(max_rows * sizeof(float));
  const size_t groups = group > 0 ? k / group : 0;
  layout.bytes = layout.sums + align_scratch_part(max_rows * groups * sizeof(int32_t));
  return layout;
}

kernels::QS8Scratch QuantizedScratchLayout::scratch(void* block) const {
  uint8_t* base = static_cast<uint8_t*>(block);
  kernels::QS8Scratch scratch;
  scratch.q = reinterpret_cast<int8_t*>(base);
  scratch.scales = reinterpret_cast<float*>(base + scales);
  if (!group_sums_part) scratch.acc = reinterpret_cast<int32_t*>(base + sums);
  scratch.max_rows = max_rows;
  return scratch;
}

int32_t* QuantizedScratchLayout::group_sums(void* block) const {
  if (!group_sums_part) return nullptr;
  return reinterpret_cast<int32_t*>(static_cast<uint8_t*>(block) + sums);
}

size_t default_slab_bytes() {
  static const size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    const size_t l2_bytes = l2 > 0 ? static_cast<size_t>(l2) : kFallbackL2Bytes;
    return l2_bytes / kL2BytesPerSlabByte;
  }();
  return bytes;
}

std::unique_ptr<PackedOperator> PackedOperator::plan(const Shape& shape) {
  // The first call probes the kernels with packings of its own: before any slab packs here.
  (void)kernels::f32_kernel_sets();
  std::unique_ptr<PackedOperator> op(new PackedOperator(shape));
  if (is_qc8w(shape)) {
    op->plan_qc8w();
    return op;
  }
  if (is_qc4w(shape)) {
    op->plan_qc4w();
    return op;
  }
  if (is_f16(shape)) {
    op->plan_f16w();
    return op;
  }
  const size_t element = 4;
  size_t capacity = 0;
  for (const auto& range :
       slab_ranges(shape.input_channels, shape.output_channels, element, shape.slab_bytes)) {
    Slab slab;
    slab.first = range.first;
    slab.count = range.second;
    op->slabs_.push_back(slab);
    // XNNPACK's packing of a slab: output channels rounded up to its column tile (at most 64
    // here), each with its inputs and a bias; the slack covers its padding. Over-estimates are
    // given back once every slab is placed.
    capacity += ((range.second + 63) / 64 * 64) * (shape.input_channels + 1) * element + 4096;
  }
  op->region_.reset(new PackedRegion(capacity, op->slabs_.size()));
  return op;
}

void* PackedOperator::plan_own_packing(size_t element_bytes, size_t alignment, size_t tile,
                                       size_t tile_bytes,
                                       std::unique_ptr<void, void (*)(void*)>* owned) {
  const size_t k = shape_.input_channels;
  const size_t total = (shape_.output_channels + tile - 1) / tile * tile_bytes;
  region_.reset(new PackedRegion(total + alignment, 1));
  void* packed = region_->allocate(total, alignment);
  if (packed == nullptr) {
    // No huge-page region: plain aligned memory.
    const size_t rounded = (total + alignment - 1) / alignment * alignment;
    packed = std::aligned_alloc(alignment, rounded);
    *owned = std::unique_ptr<void, void (*)(void*)>(packed, std::free);
  }
  for (const auto& range :
       slab_ranges(k, shape_.output_channels, element_bytes, shape_.slab_bytes)) {
    Slab slab;
    slab.first = range.first;
    slab.count = range.second;
    if (packed != nullptr) {
      slab.packed = static_cast<uint8_t*>(packed) + range.first / tile * tile_bytes;
      slab.packed_bytes = (range.second + tile - 1) / tile * tile_bytes;
    }
    slabs_.push_back(slab);
  }
  return packed;
}

void PackedOperator::plan_qc8w() {
  (void)kernels::qs8_kernel_sets();
  // Slab widths are multiples of kSlabChannelMultiple, so every slab starts on a whole tile.
  static_assert(kSlabChannelMultiple % kernels::kQC8Tile == 0, "slabs start on a tile");
  qc8w_packed_ = plan_own_packing(1, kQC8WAlignment, kernels::kQC8Tile,
                                  kernels::qc8_tile_bytes(shape_.input_channels), &qc8w_owned_);
}

void PackedOperator::plan_qc4w() {
  (void)kernels::qs8_kernel_sets();
  (void)kernels::qc4_kernel_sets();
  static_assert(kSlabChannelMultiple % kernels::kQC4Tile == 0, "slabs start on a tile");
  // The int4 packing lives where the int8 one would: an entry is one or the other.
  qc8w_packed_ = plan_own_packing(1, kQC8WAlignment, kernels::kQC4Tile,
                                  kernels::qc4_tile_bytes(shape_.input_channels, shape_.group_size),
                                  &qc8w_owned_);
}

void PackedOperator::plan_f16w() {
  (void)kernels::f16w_kernel_sets();
  static_assert(kSlabChannelMultiple % kernels::kF16WTile == 0, "slabs start on a tile");
  f16w_packed_ = plan_own_packing(2, kF16WAlignment, kernels::kF16WTile,
                                  kernels::f16w_tile_bytes(shape_.input_channels), &f16w_owned_);
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
  const size_t in = shape_.input_channels, out = shape_.output_channels;
  if (is_qc4w(shape_)) {
    if (slab.packed == nullptr || scales == nullptr) return;  // seal() reports it.
    const size_t groups = in / shape_.group_size;
    kernels::qc4w_pack(static_cast<const uint8_t*>(weight) + slab.first * (in / 2),
                       static_cast<const uint16_t*>(scales) + slab.first * groups,
                       bias != nullptr ? static_cast<const float*>(bias) + slab.first : nullptr, in,
                       slab.count, shape_.group_size, const_cast<void*>(slab.packed));
    slab.created = xnn_status_success;
    return;
  }
  if (is_qc8w(shape_)) {
    if (slab.packed == nullptr || scales == nullptr) return;  // seal() reports it.
    kernels::qc8w_pack(static_cast<const int8_t*>(weight) + slab.first * in,
                       static_cast<const float*>(scales) + slab.first,
                       bias != nullptr ? static_cast<const float*>(bias) + slab.first : nullptr, in,
                       slab.count, const_cast<void*>(slab.packed));
    slab.created = xnn_status_success;
    return;
  }
  if (is_f16(shape_)) {
    // IEEE half weight and bias bytes, as the file holds them.
    if (slab.packed == nullptr) return;  // seal() reports it.
    kernels::f16w_pack(static_cast<const uint16_t*>(weight) + slab.first * in,
                       bias != nullptr ? static_cast<const uint16_t*>(bias) + slab.first : nullptr,
                       in, slab.count, const_cast<void*>(slab.packed));
    slab.created = xnn_status_success;
    return;
  }
  const float* w = static_cast<const float*>(weight) + slab.first * in;
  const float* b = bias != nullptr ? static_cast<const float*>(bias) + slab.first : nullptr;
  const float lo = -std::numeric_limits<float>::infinity();
  const float hi = std::numeric_limits<float>::infinity();
  PackedRegionScope scope(region_.get());
  slab.created = xnn_create_fully_connected_nc_f32(in, slab.count, /*input_stride=*/in,
                                                   /*output_stride=*/out, w, b, lo, hi,
                                                   /*flags=*/0, &slab.op);
  slab.packed = scope.last_block();
  slab.packed_bytes = scope.last_size();
}

Status PackedOperator::seal_own() {
  const char* what = is_qc8w(shape_) ? "int8" : is_qc4w(shape_) ? "int4" : "f16";
  const char* key = or_inline(shape_.weight_key);
  const size_t k = shape_.input_channels;
  for (const Slab& slab : slabs_) {
    ES_CHECK_OR_RETURN_ERROR(slab.created == xnn_status_success, Error::DelegateInitFailed,
                             "could not pack the %s fully connected weight '%s' [%zu x %zu]: no "
                             "memory for its packing%s",
                             what, key, shape_.output_channels, k,
                             is_f16(shape_) ? "" : ", or no scales");
    const Status args =
        is_qc8w(shape_)
            ? kernels::check_qs8_kernel_args(k, slab.count, slab.packed, slab.packed_bytes)
        : is_qc4w(shape_) ? kernels::check_qc4_kernel_args(k, slab.count, shape_.group_size,
                                                           slab.packed, slab.packed_bytes)
                          : kernels::check_f16w_kernel_args(k, slab.count, slab.packed,
                                                            slab.packed_bytes);
    if (!args.ok()) return args.WithContext("%s fully connected weight '%s'", what, key);
  }
  if (is_f16(shape_)) {
    f16w_ = &kernels::f16w_kernel_sets().best();
  } else {
    qs8_ = &kernels::qs8_kernel_sets().best();
    if (is_qc4w(shape_)) qc4_ = &kernels::qc4_kernel_sets().best();
  }
  sealed_ = true;
  return Status();
}

Status PackedOperator::seal() {
  if (is_qc8w(shape_) || is_qc4w(shape_) || is_f16(shape_)) return seal_own();
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
    own = own && kernels::check_f32_kernel_args(shape_.input_channels, slab.count, slab.packed,
                                                slab.packed_bytes)
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

xnn_status PackedOperator::setup_slab(const Slab& slab, size_t batch_size, const void* input,
                                      void* output, pthreadpool_t pool) const {
  // Each slab writes its own columns of the shared [batch, out] output (row stride: all columns).
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
  bool own = false;  // The delegate's kernels instead of the slabs' operators.
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

PackedOperator::Slab PackedOperator::whole_own() const {
  Slab whole = slabs_.front();
  const Slab& last = slabs_.back();
  whole.count = last.first + last.count;
  whole.packed_bytes = static_cast<const uint8_t*>(last.packed) + last.packed_bytes -
                       static_cast<const uint8_t*>(whole.packed);
  return whole;
}

xnn_status PackedOperator::run_slab(const Slab& slab, const Slab* next, bool first, bool own,
                                    size_t batch_size, const void* input, void* output,
                                    pthreadpool_t pool) const {
  const float* x = static_cast<const float*>(input);
  float* y = static_cast<float*>(output) + slab.first;
  const float* packed = static_cast<const float*>(slab.packed);
  const size_t k = shape_.input_channels;
  if (f16w_ != nullptr) {
    // An f16 entry: the delegate's f16w kernels, whatever `own` says (nothing else runs it).
    if (batch_size == 1) {
      f16w_->gemv(slab.packed, k, slab.count, x, y);
      return xnn_status_success;
    }
    if (first && batch_size >= kTouchMinRows) touch(slab.packed, slab.packed_bytes);
    f16w_->gemm(slab.packed, k, slab.count, batch_size, x, k, y, shape_.output_channels,
                next != nullptr ? next->packed : nullptr, next != nullptr ? next->packed_bytes : 0);
    return xnn_status_success;
  }
  if (own && batch_size == 1) {
    gemv_(packed, k, slab.count, x, y);
    return xnn_status_success;
  }
  if (own) {
    // The slab before came with this one prefetched; the first is read here.
    if (first && batch_size >= kTouchMinRows) touch(slab.packed, slab.packed_bytes);
    gemm_(packed, k, slab.count, batch_size, x, k, y, shape_.output_channels,
          next != nullptr ? next->packed : nullptr, next != nullptr ? next->packed_bytes : 0);
    return xnn_status_success;
  }
  // Pulls the slab into this core's caches before a run over enough rows to reuse it from there.
  if (batch_size >= kTouchMinRows) touch(slab.packed, slab.packed_bytes);
  const xnn_status status = setup_slab(slab, batch_size, input, output, pool);
  return status == xnn_status_success ? xnn_run_operator(slab.op, pool) : status;
}

Status PackedOperator::run(size_t batch_size, const void* input, void* output) {
  ES_CHECK_OR_RETURN_ERROR(sealed_, Error::InvalidState,
                           "fully connected entry over '%s' was run before it was packed",
                           or_inline(shape_.weight_key));
  ES_CHECK_OR_RETURN_ERROR(batch_size == 0 || (input != nullptr && output != nullptr),
                           Error::InvalidArgument,
                           "fully connected run over '%s' was given a null input or output",
                           or_inline(shape_.weight_key));
  // The delegate's kernels set no operator up, so their runs need no lock.
  const bool own = f16w_ != nullptr || (batch_size == 1 ? gemv_ != nullptr : gemm_ != nullptr);
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  if (!own) lock.lock();
  // A small entry runs on the calling thread: see kPoolMinFlops.
  const size_t flops = 2 * batch_size * shape_.input_channels * shape_.output_channels;
  pthreadpool_t pool = flops >= kPoolMinFlops || slabs_.size() > 1 ? threadpool() : nullptr;
  if (shape_.slabs_across_pool && pool != nullptr && slabs_.size() > 1) {
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
                             "fully connected run over '%s' failed (XNNPACK status %d)",
                             shape_.weight_key.c_str(), status);
    return Status();
  }
  if (batch_size == 1 && f16w_ != nullptr && pool == nullptr) {
    // One row on this thread: see whole_own().
    run_slab(whole_own(), nullptr, true, own, 1, input, output, nullptr);
    return Status();
  }
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const Slab* next = i + 1 < slabs_.size() ? &slabs_[i + 1] : nullptr;
    const xnn_status status =
        run_slab(slabs_[i], next, i == 0, own, batch_size, input, output, pool);
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                             "fully connected run over '%s' failed (XNNPACK status %d)",
                             shape_.weight_key.c_str(), static_cast<int>(status));
  }
  return Status();
}

Status PackedOperator::run_fully_connected(size_t batch_size, const float* input, float* output) {
  if (is_qc8w(shape_) || is_qc4w(shape_)) {
    return Status::Format(Error::InvalidArgument,
                          "fully connected entry over '%s' is %s; run it with its own run_*",
                          shape_.weight_key.c_str(), is_qc8w(shape_) ? "int8" : "int4");
  }
  return run(batch_size, input, output);
}

// Every slab of an int8 or int4 entry over rows quantized (int4: and group-summed) once, one slab
// per parallel_for item (as SlabRun); an int8 slab accumulates in its own block of the scratch's
// accumulators.
struct PackedOperator::QuantizedRun {
  const PackedOperator* entry = nullptr;
  size_t rows = 0;
  float* output = nullptr;
  const kernels::QS8Scratch* scratch = nullptr;
  const int32_t* xsum8 = nullptr;  // int4 only
  std::atomic<bool> failed{false};

  bool run(const Slab& slab) const {
    const Shape& shape = entry->shape_;
    if (is_qc4w(shape)) {
      return kernels::qs8_qc4w_run_quantized(*entry->qc4_, slab.packed, slab.packed_bytes,
                                             shape.input_channels, slab.count, shape.group_size,
                                             rows, *scratch, xsum8, output + slab.first,
                                             shape.output_channels)
          .ok();
    }
    return kernels::qs8_qc8w_run_quantized(*entry->qs8_, slab.packed, slab.packed_bytes,
                                           shape.input_channels, slab.count, rows, *scratch,
                                           scratch->acc + slab.first * rows, output + slab.first,
                                           shape.output_channels)
        .ok();
  }
  static void task(void* context, size_t index) {
    QuantizedRun* job = static_cast<QuantizedRun*>(context);
    if (!job->run(job->entry->slabs_[index])) job->failed.store(true, std::memory_order_relaxed);
  }
};

Status PackedOperator::run_quantized(size_t batch_size, const float* input, float* output,
                                     const kernels::QS8Scratch& scratch, int32_t* xsum8) {
  const char* key = or_inline(shape_.weight_key);
  const char* what = is_qc4w(shape_) ? "int4" : "int8";
  ES_CHECK_OR_RETURN_ERROR(sealed_, Error::InvalidState,
                           "fully connected entry over '%s' was run before it was packed", key);
  ES_CHECK_OR_RETURN_ERROR(batch_size == 0 || (input != nullptr && output != nullptr),
                           Error::InvalidArgument,
                           "fully connected run over '%s' was given a null input or output", key);
  ES_CHECK_OR_RETURN_ERROR(batch_size <= scratch.max_rows, Error::InvalidArgument,
                           "%s fully connected run over '%s': %zu rows, its scratch holds %zu",
                           what, key, batch_size, scratch.max_rows);
  if (batch_size == 0) return Status();
  const size_t k = shape_.input_channels;
  const Status quantized = kernels::qs8_quantize_rows(*qs8_, k, batch_size, input, k, scratch);
  if (!quantized.ok()) return quantized.WithContext("%s fully connected run over '%s'", what, key);
  if (xsum8 != nullptr) {
    kernels::qs8_group_sums(scratch.q, k, batch_size, kernels::qc8_padded_k(k), shape_.group_size,
                            xsum8);
  }
  QuantizedRun job;
  job.entry = this;
  job.rows = batch_size;
  job.output = output;
  job.scratch = &scratch;
  job.xsum8 = xsum8;
  const bool on_pool = shape_.slabs_across_pool && slabs_.size() > 1 && threadpool() != nullptr;
  if (on_pool) {
    parallel_for(slabs_.size(), &QuantizedRun::task, &job);
  } else if (batch_size == 1) {
    if (!job.run(whole_own())) job.failed.store(true, std::memory_order_relaxed);
  } else {
    for (size_t i = 0; i < slabs_.size(); ++i) QuantizedRun::task(&job, i);
  }
  ES_CHECK_OR_RETURN_ERROR(!job.failed.load(std::memory_order_relaxed),
                           Error::DelegateExecutionFailed,
                           "%s fully connected run over '%s' failed: a slab's kernel refused "
                           "its arguments",
                           what, key);
  return Status();
}

Status PackedOperator::run_fully_connected_qc8w(size_t batch_size, const float* input,
                                                float* output, const kernels::QS8Scratch& scratch) {
  ES_CHECK_OR_RETURN_ERROR(is_qc8w(shape_), Error::InvalidArgument,
                           "fully connected entry over '%s' is not int8",
                           or_inline(shape_.weight_key));
  return run_quantized(batch_size, input, output, scratch, nullptr);
}

Status PackedOperator::run_fully_connected_qc4w(size_t batch_size, const float* input,
                                                float* output,
                                                const kernels::QS8Scratch& scratch,
                                                int32_t* group_sums) {
  ES_CHECK_OR_RETURN_ERROR(is_qc4w(shape_), Error::InvalidArgument,
                           "fully connected entry over '%s' is not int4",
                           or_inline(shape_.weight_key));
  ES_CHECK_OR_RETURN_ERROR(group_sums != nullptr, Error::InvalidArgument,
                           "int4 fully connected run over '%s' was given no group sums",
                           or_inline(shape_.weight_key));
  return run_quantized(batch_size, input, output, scratch, group_sums);
}

}  // namespace xnnpack
}  // namespace edgeshare
