// PackedOperator: one fully connected weight (and bias), packed once as column slabs, run by the
// delegate's kernels (kernels/) or XNNPACK's operators over the same packed bytes.
//
// XNNPACK's f32 fully connected operators pack [out, in] weights into memory the delegate
// places (packed_memory.h). Each column slab is its own operator over output channels
// [first, first + count) (weight rows and bias of that range), writing its columns of the output
// in place (output stride = all output channels). XNNPACK's kernels walk the whole packed matrix
// once per tile of rows, so a weight larger than L2 is read from memory ~batch/7 times; a slab
// sized for L2 is read once and reused by every row tile. The slabs together are the one packed
// copy of the weight; a weight no larger than a slab is one slab. Operators are created with the
// output range (-inf, +inf): a clamp belongs to the node using the weight, not to the weight.
//
// Lifecycle (each step once, in this order; the weights cache drives it):
//   std::unique_ptr<PackedOperator> op = PackedOperator::plan(shape);   // slabs and region
//   for (size_t i = 0; i < op->num_slabs(); ++i) op->pack_slab(i, weight_bytes, bias_bytes);
//   ES_RETURN_IF_ERROR(op->seal());                  // packing errors; picks the kernels
//   ES_RETURN_IF_ERROR(op->run_fully_connected(batch, x, y));           // any thread, any time
//
// An int4 (Byte, scheme QC4W) entry is packed as the int8 entry below, in kernels.h's qc4w layout,
// from the canonical two-values-a-byte weight, its float16 group scales and the float bias, and run
// by the int4 kernels (activations quantized per row, group sums, one fused multiply-add per
// group).
//
// An int8 (Char, scheme QC8W) entry is packed by the delegate itself (kernels/kernels.h's qc8w
// layout, from the int8 weight, its float scales and the float bias) and run by its int8 kernels:
// each run quantizes the activation rows once into the caller's scratch (QS8Buffers), then every
// slab runs the integer dot (GEMV for one row, GEMM for more) and the float epilogue.
//
// A Half entry is packed by the delegate too (kernels/kernels.h's f16w layout, from the half
// weight and half bias) and run by its f32 x f16w kernels: float input and output, the halves
// widened inside the kernel, so a run reads half the bytes of an f32 entry and converts nothing
// around it.
//
// Errors: seal() returns DelegateInitFailed naming the weight when XNNPACK refused a slab;
// run_* return DelegateExecutionFailed naming the weight, InvalidArgument for the wrong run_* or
// for null buffers, InvalidState before seal() succeeded.
// Thread-safety: pack_slab may run on several threads at once for different slabs; plan and seal
// on one thread. Runs may come from any thread: XNNPACK's operators keep the pointers of their
// last setup, so a run through them holds this object's lock (setup + run); the delegate's kernels
// set nothing up and run without it.
// Ownership: the weight and bias bytes are read by pack_slab only, never kept; the object owns
// its operators and its packed memory until it is destroyed.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_OPERATOR_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_OPERATOR_H_

#include <xnnpack.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/scalar_type.h"

namespace edgeshare {
namespace xnnpack {

// Whether runs on a pool of 2+ threads give each thread whole slabs, one pool call per weight,
// rather than splitting each slab over the pool: it waits at one barrier per weight instead of
// one per slab, so it is faster and far less hurt when other processes share the cores
// (docs/kernels.md).
constexpr bool kSlabsAcrossPool = true;

// A single-slab fully connected run of fewer FLOPs (2 x batch x in x out) than this runs on the
// calling thread even with 2+ threads: e.g. a LoRA A or B matrix at T=32 (1-2 MFLOP, 8-20 us on
// one core), where a pool call's wake-up and barrier cost about as much as they save, and on a busy
// machine the barrier waits for a descheduled pool thread. Multi-slab entries use parallel_for
// (threadpool.h), which never waits for a thread that took no work.
constexpr size_t kPoolMinFlops = size_t{32} << 20;

// Bytes of packed weights per column slab by default: a measured fraction of this core's L2
// (sysconf(_SC_LEVEL2_CACHE_SIZE), or 1 MiB when the system does not say); see slabs_bench.cc for
// the measurement.
size_t default_slab_bytes();

// Where the scratch of one quantized fully connected node lies in a block of bytes the caller
// owns (a slot of its graph's arena, live only while the node runs, so nodes that never run at
// once share the bytes): the quantized rows, their scales, and `sums`: int8's accumulators
// (rows x n int32) or int4's group sums of each row (rows x k / group int32). Each part starts on a cache line. Nothing in
// it is read before a run writes it, so a block planned for a long bound costs memory only for
// the rows runs use.
struct QuantizedScratchLayout {
  size_t max_rows = 0;
  size_t scales = 0, sums = 0;  // Byte offsets; the quantized rows start at 0.
  size_t bytes = 0;             // The whole block.
  bool group_sums_part = false;  // int4: `sums` holds group sums, not accumulators.

  // Runs of up to max_rows rows of k inputs over an int8 entry of n outputs.
  static QuantizedScratchLayout qc8w(size_t max_rows, size_t k, size_t n);
  // Runs of up to max_rows rows of k inputs over an int4 entry in groups of `group`.
  static QuantizedScratchLayout qc4w(size_t max_rows, size_t k, size_t group);
  // The parts in `block` (at least `bytes` long, 64-byte aligned).
  kernels::QS8Scratch scratch(void* block) const;
  int32_t* group_sums(void* block) const;
};

class PackedOperator {
 public:
  // What to pack. A Float weight makes f32 operators, a Half weight the delegate's f16w packing
  // (float input and output for both); the bias, if any, has the weight's dtype. A Char weight is
  // int8 per output row (QC8W) with float scales and a float bias, run by the delegate's int8
  // kernels; a Byte weight is int4 in groups (QC4W, two values a byte) with float16 scales per
  // group and a float bias, run by its int4 kernels.
  struct Shape {
    runtime::ScalarType weight_dtype = runtime::ScalarType::Float;
    size_t input_channels = 0;
    size_t output_channels = 0;
    std::string weight_key;  // For messages and names; empty when inline.
    std::string bias_key;
    std::string scales_key;  // Char and Byte weights only.
    size_t group_size = 0;   // Byte (QC4W) weights only: inputs per float16 scale.
    // Slabs of about this many packed bytes each; 0 packs the weight as one operator.
    size_t slab_bytes = 0;
    // With 2+ threads, each takes whole slabs (else every slab in turn is split over the pool).
    bool slabs_across_pool = kSlabsAcrossPool;
  };

  // Plans the slabs and reserves the memory they will be packed in. Also settles the kernel
  // config (kernels/config.h) first: its probe packs weights of its own, which must not land here.
  static std::unique_ptr<PackedOperator> plan(const Shape& shape);

  PackedOperator(const PackedOperator&) = delete;
  PackedOperator& operator=(const PackedOperator&) = delete;
  // Deletes the operators (and so the packed weights).
  ~PackedOperator();

  size_t num_slabs() const { return slabs_.size(); }
  // Packs slab `index` from the whole weight [out, in] and the whole bias [out] (null: none), in
  // the weight's dtype (float for a Char weight, whose float scales [out] are `scales`). What
  // XNNPACK says is kept for seal().
  void pack_slab(size_t index, const void* weight, const void* bias, const void* scales = nullptr);
  // After every slab was packed: the first slab XNNPACK refused as an error, else picks the
  // delegate's kernels where every slab's packing meets their preconditions (f32, in this
  // operator's memory, in their layout) and the process has them (kernels/config.h), XNNPACK's
  // operators otherwise.
  runtime::Status seal();

  // setup + run of every slab of a Float or Half entry. With 2+ delegate threads the slabs are
  // spread over them by parallel_for (each slab on one thread, all rows), otherwise they run one
  // after the other. One row runs the chosen GEMV and more rows the chosen GEMM (prefetching the
  // next slab while it computes): for a Float entry where seal() chose them (bitwise XNNPACK's
  // results, no operator set up, no lock), for a Half entry always (the f16w kernels, no lock).
  // Never allocates.
  runtime::Status run_fully_connected(size_t batch_size, const float* input, float* output);
  // The same for an int8 entry (float input and output), quantizing and accumulating in
  // `scratch` (made for at least batch_size rows of this entry's shape). No lock: the caller's
  // scratch is its own. Errors: also InvalidArgument when the scratch is too small.
  runtime::Status run_fully_connected_qc8w(size_t batch_size, const float* input, float* output,
                                           const kernels::QS8Scratch& scratch);
  // The same for an int4 entry (Byte weight, QC4W), also summing each row's groups into
  // `group_sums` (batch_size x k / group int32).
  runtime::Status run_fully_connected_qc4w(size_t batch_size, const float* input, float* output,
                                           const kernels::QS8Scratch& scratch,
                                           int32_t* group_sums);

  // Float (f32 operators), Half (f16w kernels), Char (int8 kernels) or Byte (int4 kernels).
  runtime::ScalarType weight_dtype() const { return shape_.weight_dtype; }
  size_t input_channels() const { return shape_.input_channels; }
  size_t output_channels() const { return shape_.output_channels; }
  const std::string& weight_key() const { return shape_.weight_key; }
  const std::string& bias_key() const { return shape_.bias_key; }
  const std::string& scales_key() const { return shape_.scales_key; }
  // Whether runs of one row (of several rows) go through the delegate's kernels.
  bool one_row_gemv() const { return gemv_ != nullptr || f16w_ != nullptr; }
  bool rows_gemm() const { return gemm_ != nullptr || f16w_ != nullptr; }

 private:
  struct Slab {
    xnn_operator_t op = nullptr;
    size_t first = 0;  // First output channel.
    size_t count = 0;  // Output channels.
    xnn_status created = xnn_status_uninitialized;
    // The operator's packed weights in region_ (null when XNNPACK placed them elsewhere).
    const void* packed = nullptr;
    size_t packed_bytes = 0;
  };
  struct SlabRun;
  struct QuantizedRun;

  explicit PackedOperator(const Shape& shape) : shape_(shape) {}
  // The slabs of an entry the delegate packs itself: the whole packing (whole tiles of
  // `tile_bytes` per `tile` channels, aligned) in one region or else in aligned memory kept in
  // `owned`, each slab's tiles a run of it starting at its first channel / `tile` x `tile_bytes`.
  // Returns the packing (null: no memory; pack_slab then packs nothing and seal() reports it).
  void* plan_own_packing(size_t element_bytes, size_t alignment, size_t tile, size_t tile_bytes,
                         std::unique_ptr<void, void (*)(void*)>* owned);
  // plan() of a Char (int8) entry, of a Byte (int4) one, and of a Half one.
  void plan_qc8w();
  void plan_qc4w();
  void plan_f16w();
  // seal() of any of them: every slab packed and within its kernels' preconditions.
  runtime::Status seal_own();
  runtime::Status run(size_t batch_size, const void* input, void* output);
  // run_fully_connected_qc8w/_qc4w after their dtype check: quantize the rows once (int4: and
  // sum their groups into xsum8), then every slab.
  runtime::Status run_quantized(size_t batch_size, const float* input, float* output,
                                const kernels::QS8Scratch& scratch, int32_t* xsum8);
  // One slab over every row: the delegate's kernel when `own` (the GEMM prefetching `next` and,
  // as the `first` slab a thread runs, touching its own slab first) or setup and run of its
  // operator.
  xnn_status run_slab(const Slab& slab, const Slab* next, bool first, bool own, size_t batch_size,
                      const void* input, void* output, pthreadpool_t pool) const;
  xnn_status setup_slab(const Slab& slab, size_t batch_size, const void* input, void* output,
                        pthreadpool_t pool) const;
  // An own packing (int8, int4, f16w) as one slab over every output channel: its slabs are
  // consecutive runs of its tiles. One row run on one thread takes it whole, so the GEMV keeps
  // its several weight streams in flight across slab edges; the slabs are for the GEMM, which
  // reuses a slab from cache over its rows.
  Slab whole_own() const;

  const Shape shape_;
  std::vector<Slab> slabs_;
  // Where the slabs' packed weights live; unmapped after the destructor's body deleted the
  // operators.
  std::unique_ptr<PackedRegion> region_;
  bool sealed_ = false;
  // The delegate's kernels seal() chose (null: XNNPACK's operators run those batches).
  kernels::F32GemvFn gemv_ = nullptr;
  kernels::F32GemmFn gemm_ = nullptr;
  // A Char (Byte) entry: the qc8w (qc4w) packing of every slab, one after the other (slab i's
  // tiles at slabs_[i].packed), and the int8 kernels seal() checked it against.
  void* qc8w_packed_ = nullptr;
  std::unique_ptr<void, void (*)(void*)> qc8w_owned_{nullptr, nullptr};
  const kernels::QS8Kernels* qs8_ = nullptr;
  // A Half entry: its f16w packing (slab i's tiles at slabs_[i].packed) and the kernels that run
  // it (set by seal()).
  void* f16w_packed_ = nullptr;
  std::unique_ptr<void, void (*)(void*)> f16w_owned_{nullptr, nullptr};
  const kernels::F16WKernels* f16w_ = nullptr;
  // A Byte entry's int4 kernels, which seal() checked its packing against.
  const kernels::QC4Kernels* qc4_ = nullptr;
  std::mutex mutex_;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_OPERATOR_H_
