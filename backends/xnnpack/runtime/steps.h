// Steps: what a compiled XNNPACK graph runs, one small type per family of operator (private
// elementwise unary, binary with broadcasting, last-dimension pooling, the cache's shared fully
// connected operator, a product over an unpacked weight input, an RMS norm fused from its nodes),
// and the code that runs one step.
//
// Each step owns what it uses through RAII handles: a private operator is deleted with its step, a
// shared packed operator or a retained constant is released to its WeightsCache (which must outlive
// the step). Values are named by id; pointers to their data are bound by the executor per run.
//
//   std::vector<Step> steps;   // filled by GraphCompiler (graph_compiler.h)
//   for (const Step& step : steps) ES_RETURN_IF_ERROR(run_step(step, pointers, pool));
//
// Errors: run_step returns DelegateExecutionFailed naming the node (XNNPACK refused setup or run).
// Thread-safety: run_step on one step from one thread at a time; shared packed operators lock
// themselves, so steps of different executors may share one.
// Ownership: run_step never allocates and keeps no pointer it was given.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_STEPS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_STEPS_H_

#include <xnnpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <variant>

#include "edgeshare/backends/xnnpack/runtime/fc_format.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace xnnpack {

struct OperatorDeleter {
  void operator()(xnn_operator_t op) const { xnn_delete_operator(op); }
};
// A private XNNPACK operator.
using Operator = std::unique_ptr<xnn_operator, OperatorDeleter>;

// A reference on a cache entry, dropped on destruction.
template <typename T>
struct CacheRelease {
  WeightsCache* cache = nullptr;
  void operator()(T* entry) const { cache->release(entry); }
};
using PackedRef = std::unique_ptr<PackedOperator, CacheRelease<PackedOperator>>;
using RetainedRef = std::unique_ptr<RetainedConstant, CacheRelease<RetainedConstant>>;

using UnarySetup = xnn_status (*)(xnn_operator_t, size_t, const float*, float*, pthreadpool_t);
using BinarySetup = xnn_status (*)(xnn_operator_t, size_t, const size_t*, size_t, const size_t*,
                                   const float*, const float*, float*, pthreadpool_t);
using PoolingSetup = xnn_status (*)(xnn_operator_t, size_t, size_t, const float*, float*,
                                    pthreadpool_t);

// The arguments a private operator was last set up with. XNNPACK's setup recomputes the shapes'
// strides and the tiling and binds the pointers on every call, and an operator once set up runs
// again as it stands: a run whose pointers, shapes and pool equal the last setup's skips it.
// Mutable in the steps: run_step runs one step from one thread at a time.
struct SetupMemo {
  static constexpr size_t kMaxKey = 4 + 2 * (XNN_MAX_TENSOR_DIMS + 1);
  std::array<uintptr_t, kMaxKey> key{};
  size_t size = 0;  // 0: not set up, or the last setup failed.
};

// in [batch, channels] -> out, channels fixed at create (batch set per run in a dynamic graph).
struct UnaryStep {
  Operator op;
  UnarySetup setup = nullptr;
  size_t batch = 1, channels = 1;
  uint32_t in = 0, out = 0;
  mutable SetupMemo memo;
};

// out = op(a, b), numpy broadcasting over the two shapes.
struct BinaryStep {
  Operator op;
  BinarySetup setup = nullptr;
  uint32_t a = 0, b = 0, out = 0;
  size_t a_rank = 0, b_rank = 0;
  std::array<size_t, XNN_MAX_TENSOR_DIMS> a_shape{}, b_shape{};
  mutable SetupMemo memo;
};

// in [batch, width, channels] -> out [batch, channels].
struct PoolingStep {
  Operator op;
  PoolingSetup setup = nullptr;
  size_t batch = 1, width = 1;
  uint32_t in = 0, out = 0;
  mutable SetupMemo memo;
};

// The cache's fully connected operator (any format, fc_format.h; f32 activations): in
// [batch, in_ch] -> out [batch, out_ch]. A format that needs scratch (quantized rows, sums) works
// in the arena value `scratch`, laid out by `scratch_layout` (no bytes otherwise).
struct FullyConnectedStep {
  PackedRef packed;
  size_t batch = 1, in_channels = 1;
  uint32_t in = 0, out = 0;
  uint32_t scratch = 0;
  QuantizedScratchLayout scratch_layout;
  // The scratch already holds the input's rows quantized when this step runs: an earlier step over
  // the same input quantized them there (GraphCompiler shares the scratch), so the run skips it.
  bool input_quantized = false;
};

// A linear over a weight that is a delegate input, read as stored ([out_ch, in_ch] row-major in its
// format's dtype, never packed: a swappable adapter's bytes, which the runtime may rebind between
// executes): in [batch, in_ch] -> out [batch, out_ch], by its format's run_unpacked (the portable
// gemm_nt kernels) on the calling thread.
struct UnpackedFullyConnectedStep {
  const FcFormat* format = nullptr;  // Its run_unpacked runs it.
  size_t batch = 1, in_channels = 1, out_channels = 1;
  uint32_t in = 0, weight = 0, out = 0;
  uint32_t scales = 0;  // Formats with scales: the value of the weight's scales.
};

// A root-mean-square norm over the last dimension, fused from the six nodes that spell it (square,
// mean, + epsilon, rsqrt, times the input, times the weight; GraphCompiler):
// out[r, c] = weight[c] * (in[r, c] * (1 / sqrt(mean_c(in[r, c]^2) + epsilon))).
struct RmsNormStep {
  size_t rows = 1, channels = 1;
  float epsilon = 0.0f;
  uint32_t in = 0, weight = 0, out = 0;
};

struct Step {
  uint32_t node = 0;  // For messages.
  std::variant<UnaryStep, BinaryStep, PoolingStep, FullyConnectedStep, UnpackedFullyConnectedStep,
               RmsNormStep>
      op;
};

// Runs one step over `pointers` (data per value id). Errors: DelegateExecutionFailed.
runtime::Status run_step(const Step& step, void* const* pointers, pthreadpool_t pool);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_STEPS_H_
