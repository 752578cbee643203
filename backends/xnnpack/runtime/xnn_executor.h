// XnnExecutor: one lowered partition compiled into a plan of XNNPACK operators, and its execution.
//
// create() verifies the delegate's FlatBuffer graph (xnnpack_graph.fbs) and every index, shape and
// dtype in it, then builds one XNNPACK operator per node: fully connected operators come from a
// WeightsCache (shared across programs unless sharing is off), elementwise operators are private.
// Every value is float32 except the weight and bias of a fully connected node, which may be IEEE
// half (HALF, both or the weight alone): that node runs the cache's f16 operator between a private
// f32->f16 convert of its input and an f16->f32 convert of its output, through half-precision
// scratch slots in the arena.
// Intermediates live in one arena the executor owns; inline constants are copied in; named
// constants read by elementwise operators are retained (shared by identity) until destruction.
//
//   ES_ASSIGN_OR_RETURN(std::unique_ptr<XnnExecutor> executor,
//                       XnnExecutor::create(blob, size, named_data_map, /*share_weights=*/true));
//   ES_RETURN_IF_ERROR(executor->execute(args));   // args: inputs then outputs, float tensors
//
// Errors: create(): InvalidProgram (malformed or inconsistent graph: which node/value and why),
// NotSupported (a dtype or version this delegate lacks), the WeightsCache's errors for constants,
// DelegateInitFailed (XNNPACK refused an operator). execute(): InvalidArgument (wrong number,
// dtype or shape of args), DelegateExecutionFailed. execute() never allocates.
// Thread-safety: execute() on one executor from one thread at a time; different executors may run
// at once even when they share packed weights.
// Ownership: the blob and the map are only read during create(); nothing points into them later.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNN_EXECUTOR_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNN_EXECUTOR_H_

#include <xnnpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace xnnpack {

class XnnExecutor {
 public:
  // Graph versions this executor reads (0: the field left unset).
  static constexpr uint32_t kMaxGraphVersion = 1;

  static runtime::Result<std::unique_ptr<XnnExecutor>> create(const void* blob, size_t size,
                                                             const runtime::NamedDataMap* map,
                                                             bool share_weights);
  ~XnnExecutor();
  XnnExecutor(const XnnExecutor&) = delete;
  XnnExecutor& operator=(const XnnExecutor&) = delete;

  runtime::Status execute(runtime::Span<runtime::EValue* const> args);

  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // The cache this executor's packed operators come from (shared or its own).
  const WeightsCache& weights_cache() const { return *cache_; }

 private:
  using BinarySetup = xnn_status (*)(xnn_operator_t, size_t, const size_t*, size_t, const size_t*,
                                     const float*, const float*, float*, pthreadpool_t);
  using UnarySetup = xnn_status (*)(xnn_operator_t, size_t, const float*, float*, pthreadpool_t);

  struct ValueInfo {
    uint8_t kind = 0;
    runtime::ScalarType dtype = runtime::ScalarType::Float;  // Half: fully connected weights only.
    std::vector<int32_t> dims;  // Validated to fit int32 (Tensor sizes) and XNN_MAX_TENSOR_DIMS.
    size_t numel = 1;
  };
  enum class StepKind : uint8_t {
    kSharedFullyConnected,
    kSharedFullyConnectedF16,  // convert_in, the shared f16 operator, convert_out.
    kBinary,
    kUnary,
  };
  struct Step {
    StepKind kind = StepKind::kUnary;
    uint32_t node = 0;  // For messages.
    xnn_operator_t op = nullptr;       // Private operator (owned), binary and unary steps.
    PackedOperator* packed = nullptr;  // Shared fully connected (a reference on the cache entry).
    // f16 fully connected: private converts (owned) and the half scratch value ids they use.
    xnn_operator_t convert_in = nullptr;   // a (f32) -> half_in
    xnn_operator_t convert_out = nullptr;  // half_out -> out (f32)
    uint32_t half_in = 0, half_out = 0;
    BinarySetup binary_setup = nullptr;
    UnarySetup unary_setup = nullptr;
    uint32_t a = 0, b = 0, out = 0;  // Value ids.
    size_t batch = 1;
    size_t a_rank = 0, b_rank = 0;
    std::array<size_t, XNN_MAX_TENSOR_DIMS> a_shape{}, b_shape{};
  };

  XnnExecutor() = default;
  runtime::Status build(const void* blob, size_t size, const runtime::NamedDataMap* map);

  WeightsCache* cache_ = nullptr;
  std::unique_ptr<WeightsCache> private_cache_;  // Set when sharing is off; destroyed last.
  std::vector<ValueInfo> values_;
  std::vector<uint32_t> inputs_;   // Value id per delegate input.
  std::vector<uint32_t> outputs_;  // Value id per delegate output.
  std::vector<Step> steps_;
  std::vector<RetainedConstant*> retained_;
  std::vector<std::vector<float>> inline_constants_;
  std::vector<float> arena_;
  std::vector<void*> pointers_;  // Per value id: constants and arena slots fixed, io bound per run.
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNN_EXECUTOR_H_
