// XnnExecutor: one lowered partition compiled into a plan of XNNPACK operators, and its execution.
//
// create() verifies the delegate's FlatBuffer graph (xnnpack_graph.fbs) and its value table
// (graph_reader.h), then compiles every node through its op row (graph_compiler.h, op_rows.inc)
// into steps (steps.h): fully connected operators come from a WeightsCache (shared across programs
// unless sharing is off), elementwise operators are private.
// Every value is float32 except the weight and bias of a fully connected node, which may be IEEE
// half (HALF, both or the weight alone): that node's cache entry is run by the delegate's f32 x
// f16w kernels, which take the float32 input and write the float32 output directly.
// Intermediates (and the scratch of int8 / int4 fully connected nodes) live in one arena: the
// process's WorkingMemory block, leased per execute and shared by every executor, or, when another
// thread's execute holds that block, the executor's own (made at create, untouched otherwise);
// inline constants are copied in; named
// constants read by elementwise operators are retained (shared by identity) until destruction.
//
//   ES_ASSIGN_OR_RETURN(std::unique_ptr<XnnExecutor> executor,
//                       XnnExecutor::create(blob, size, named_data_map, /*share_weights=*/true));
//   ES_RETURN_IF_ERROR(executor->execute(args));   // args: inputs then outputs, float tensors
//
// A graph with symbolic dims (a dynamic token count) runs at any sizes up to the bounds it was
// exported for: execute() binds each symbol from the real sizes of the inputs, sets every step up
// for them (dynamic_shapes.h) and resizes each dynamic output tensor to its real shape (outputs
// come planned at the bound). Memory is planned at init for the bounds.
//
// Errors: create(): InvalidProgram (malformed or inconsistent graph: which node/value and why),
// NotSupported (a dtype or version this delegate lacks), the WeightsCache's errors for constants,
// DelegateInitFailed (XNNPACK refused an operator). execute(): InvalidArgument (wrong number,
// dtype or shape of args; a symbol bound to two sizes or past its bound, naming the symbol; an
// output too small for its real shape), DelegateExecutionFailed. execute() never allocates.
// Thread-safety: execute() on one executor from one thread at a time; different executors may run
// at once even when they share packed weights.
// Ownership: the blob and the map are only read during create(); nothing points into them later.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNN_EXECUTOR_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNN_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "edgeshare/backends/xnnpack/runtime/compiled_graph.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace xnnpack {

class XnnExecutor {
 public:
  static runtime::Result<std::unique_ptr<XnnExecutor>> create(const void* blob, size_t size,
                                                              const runtime::NamedDataMap* map,
                                                              bool share_weights);
  ~XnnExecutor() = default;
  XnnExecutor(const XnnExecutor&) = delete;
  XnnExecutor& operator=(const XnnExecutor&) = delete;

  runtime::Status execute(runtime::Span<runtime::EValue* const> args);

  size_t num_inputs() const { return graph_.inputs.size(); }
  size_t num_outputs() const { return graph_.outputs.size(); }
  // Bytes of the arena of intermediates and scratch (values never live together share bytes).
  size_t arena_bytes() const { return graph_.arena_floats * sizeof(float); }
  // Fully connected steps that read their input as an earlier step over it quantized it.
  size_t shared_quantized_inputs() const { return graph_.shared_quantized_inputs; }
  // The cache this executor's packed operators come from (shared or its own).
  const WeightsCache& weights_cache() const { return *cache_; }

 private:
  XnnExecutor() = default;
  runtime::Status bind_args(runtime::Span<runtime::EValue* const> args);
  // Points every arena value at its slot from `base` (the leased block or the own arena).
  void point_arena_at(float* base);
  static runtime::Status check_static_shape(const ValueInfo& v, const runtime::Tensor& t, size_t i,
                                            bool is_input, size_t num_inputs);

  WeightsCache* cache_ = nullptr;
  std::unique_ptr<WeightsCache> private_cache_;  // Set when sharing is off; destroyed last.
  CompiledGraph graph_;  // Steps, constants and arena; releases its cache references first.
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNN_EXECUTOR_H_
