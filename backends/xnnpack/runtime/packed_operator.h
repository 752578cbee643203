// PackedOperator: one fully connected weight (and bias), packed once as column slabs and run over
// them, in any format (fc_format.h): a slab runner that asks its format's row what to pack and how
// to run a slab, and branches on nothing else.
//
// Each column slab covers output channels [first, first + count) (weight rows and bias of that
// range) and writes its columns of the output in place (output stride = all output channels).
// Kernels walk a whole packed matrix once per tile of rows, so a weight larger than L2 would be
// read from memory ~batch/7 times; a slab sized for L2 is read once and reused by every row tile.
// The slabs together are the one packed copy of the weight; a weight no larger than a slab is one
// slab. With 2+ delegate threads the slabs of a run are spread over them, each slab on one thread
// over all rows: one pool call and one barrier per weight, not one per slab, which is faster and
// far less hurt when other processes share the cores (docs/kernels.md).
//
// A format with its own packing (f16w, int8, int4) packs every slab into one region with the
// row's `pack` and runs it with the row's `prepare` (once per run: quantize the rows) and
// `run_slab`. An f32 weight is packed by XNNPACK's operators (one per slab, created with the
// output range (-inf, +inf): a clamp belongs to the node using the weight, not to the weight) into
// memory the delegate places (packed_memory.h), and run by the delegate's f32 kernels over that
// packing where kernels/config.h's probe kept them, by XNNPACK's operators otherwise.
//
// Lifecycle (each step once, in this order; the weights cache drives it):
//   std::unique_ptr<PackedOperator> op = PackedOperator::plan(shape);   // slabs and region
//   for (size_t i = 0; i < op->num_slabs(); ++i) op->pack_slab(i, weight, bias, scales);
//   ES_RETURN_IF_ERROR(op->seal());                  // packing errors; picks the kernels
//   ES_RETURN_IF_ERROR(op->run(rows, x, y, layout, scratch, pool));     // any thread, any time
//
// Errors: seal() returns DelegateInitFailed naming the weight when a slab could not be packed, or
// the kernels' precondition; run returns DelegateExecutionFailed naming the weight,
// InvalidArgument for null buffers or a scratch too small, InvalidState before seal() succeeded.
// Thread-safety: pack_slab may run on several threads at once for different slabs; plan and seal
// on one thread. Runs may come from any thread: XNNPACK's operators keep the pointers of their
// last setup, so a run through them holds this object's lock (setup + run); the delegate's kernels
// set nothing up and run without it.
// Ownership: the weight, bias and scales bytes are read by pack_slab only, never kept; the object
// owns its operators and its packed memory until it is destroyed.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_OPERATOR_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_OPERATOR_H_

#include <xnnpack.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/fc_format.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace xnnpack {

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

class PackedOperator {
 public:
  // What to pack: an [output_channels, input_channels] weight in `format`.
  struct Shape {
    const FcFormat* format = nullptr;  // Never null once planned.
    size_t input_channels = 0;
    size_t output_channels = 0;
    std::string weight_key;  // For messages and names; empty when inline.
    std::string bias_key;
    std::string scales_key;  // Formats with scales only.
    size_t group_size = 0;   // Formats with group scales only: inputs per scale.
    // Slabs of about this many packed bytes each; 0 packs the weight as one slab.
    size_t slab_bytes = 0;
  };

  // Plans the slabs and reserves the memory they will be packed in. Also settles the kernel
  // config (kernels/config.h) first: its probe packs weights of its own, which must not land here.
  static std::unique_ptr<PackedOperator> plan(const Shape& shape);

  PackedOperator(const PackedOperator&) = delete;
  PackedOperator& operator=(const PackedOperator&) = delete;
  // Deletes the operators (and so the packed weights).
  ~PackedOperator();

  size_t num_slabs() const { return slabs_.size(); }
  // Packs slab `index` from the whole weight [out, in] as stored, the whole bias [out] (null:
  // none) and the whole scales (formats with scales). What went wrong is kept for seal().
  void pack_slab(size_t index, const void* weight, const void* bias, const void* scales = nullptr);
  // After every slab was packed: the first slab that could not be packed, or that breaks its
  // kernels' preconditions, as an error; else picks the kernels (an f32 entry: the delegate's
  // where every slab's packing meets their preconditions and the process has them, XNNPACK's
  // operators otherwise).
  runtime::Status seal();

  // y = rows x of this weight: every slab over every row, the slabs spread over the threads of
  // `pool` (the pool the calling step was handed; null: the calling thread alone). A format that
  // needs scratch (format().scratch) quantizes into `scratch`, a block laid out by `layout` for at
  // least `rows` rows of this entry's shape; with `quantized`, `scratch` already holds x's rows as
  // this format quantizes them (an earlier run over the same rows wrote them) and the run reads
  // them as they are. Never allocates.
  runtime::Status run(size_t rows, const float* x, float* y, const QuantizedScratchLayout& layout,
                      void* scratch, pthreadpool_t pool, bool quantized = false);
  // run() of a format that needs no scratch (f32, f16w).
  runtime::Status run_fully_connected(size_t rows, const float* x, float* y, pthreadpool_t pool) {
    return run(rows, x, y, QuantizedScratchLayout(), nullptr, pool);
  }

  const FcFormat& format() const { return *shape_.format; }
  FcShape fc_shape() const { return {shape_.input_channels, shape_.output_channels, shape_.group_size}; }
  size_t input_channels() const { return shape_.input_channels; }
  size_t output_channels() const { return shape_.output_channels; }
  const std::string& weight_key() const { return shape_.weight_key; }
  const std::string& bias_key() const { return shape_.bias_key; }
  const std::string& scales_key() const { return shape_.scales_key; }
  // Whether runs of one row (of several rows) go through the delegate's kernels.
  bool one_row_gemv() const { return gemv_ != nullptr || own_packing(); }
  bool rows_gemm() const { return gemm_ != nullptr || own_packing(); }
  // The parts a run of several rows on `threads` threads cuts an own packing into when its slabs
  // do not divide among the threads (one slab, say, which would leave a thread idle): the whole
  // packing in parts of equal width (whole multiples of 32 output channels), as many as the slabs
  // rounded up to a multiple of `threads` where the channels allow. Writes at most 64 parts;
  // returns their count, 0 when the packing cannot be cut.
  size_t split_own(size_t threads, FcSlab* parts) const;

 private:
  struct Slab {
    xnn_operator_t op = nullptr;  // f32 only.
    xnn_status created = xnn_status_uninitialized;
    FcSlab own;  // Its channels and, where known, its packing.
  };
  struct SlabRun;

  explicit PackedOperator(const Shape& shape) : shape_(shape) {}
  bool own_packing() const { return shape_.format->own_packing(); }
  // plan() of a format with its own packing: the whole packing (whole tiles, aligned) in one
  // region or else in aligned memory kept in `owned_`, each slab's tiles a run of it.
  void plan_own();
  void plan_f32();
  runtime::Status seal_own();
  runtime::Status seal_f32();
  runtime::Status run_own(size_t rows, const float* x, float* y,
                          const QuantizedScratchLayout& layout, void* scratch, pthreadpool_t pool,
                          bool quantized);
  runtime::Status run_f32(size_t rows, const float* x, float* y, pthreadpool_t pool);
  // One f32 slab over every row: the delegate's kernel when `own` (the GEMM prefetching `next`
  // and, as the `first` slab a thread runs, touching its own slab first) or setup and run of its
  // operator.
  xnn_status run_f32_slab(const Slab& slab, const Slab* next, bool first, bool own,
                          size_t batch_size, const float* input, float* output,
                          pthreadpool_t pool) const;
  // An own packing as one slab over every output channel: its slabs are consecutive runs of its
  // tiles. One row run on one thread takes it whole, so a GEMV keeps its several weight streams in
  // flight across slab edges; the slabs are for the GEMM, which reuses a slab from cache over its
  // rows.
  FcSlab whole_own() const;

  const Shape shape_;
  std::vector<Slab> slabs_;
  // Where the slabs' packed weights live; unmapped after the destructor's body deleted the
  // operators.
  std::unique_ptr<PackedRegion> region_;
  std::unique_ptr<void, void (*)(void*)> owned_{nullptr, nullptr};
  bool sealed_ = false;
  // The delegate's f32 kernels seal() chose (null: XNNPACK's operators run those batches).
  kernels::F32GemvFn gemv_ = nullptr;
  kernels::F32GemmFn gemm_ = nullptr;
  std::mutex mutex_;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_OPERATOR_H_
