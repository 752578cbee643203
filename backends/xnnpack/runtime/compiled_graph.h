// CompiledGraph: everything an XnnExecutor runs, as GraphCompiler (graph_compiler.h) leaves it:
// the value table (graph values, then scratch values and internal constants), the delegate's io
// slots, the steps (steps.h), the constants they read and the arena of intermediates.
//
//   CompiledGraph graph;                       // filled by GraphCompiler::compile()
//   graph.pointers[graph.inputs[0]] = data;    // bind io, then run every step
//   for (const Step& step : graph.steps) {
//     ES_RETURN_IF_ERROR(run_step(step, graph.pointers.data(), pool));
//   }
//
// Errors: none (plain data).
// Thread-safety: none of its own; the executor runs one graph on one thread at a time.
// Ownership: owns its steps, constants and arena; its RetainedRef and PackedRef members release
// their WeightsCache entries on destruction, so the cache must outlive it.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_COMPILED_GRAPH_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_COMPILED_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/steps.h"
#include "edgeshare/runtime/core/scalar_type.h"
#include "edgeshare/runtime/core/zeroed_memory.h"

namespace edgeshare {
namespace xnnpack {

// One value of the graph (or a scratch value or constant the compiler added).
struct ValueInfo {
  uint8_t kind = 0;                                        // schema::ValueKind; 0 is INTERMEDIATE.
  runtime::ScalarType dtype = runtime::ScalarType::Float;  // Half: fully connected weights only.
  // The weight format its dtype and quant scheme name (graph_reader): f32 for float values; for a
  // delegate input (read as stored), the first row of its dtype.
  const FcFormat* format = nullptr;
  // Validated to fit int32 (Tensor sizes) and XNN_MAX_TENSOR_DIMS. A symbolic dim holds its
  // symbol's max: dims and numel are what the value's memory is planned for.
  std::vector<int32_t> dims;
  // What shape rules compare: dims, with a symbolic dim as -(1 + its symbol's index), so two dims
  // are equal when both are the same exact size or the same symbol.
  std::vector<int64_t> shape;
  size_t numel = 1;
  bool dynamic = false;  // Some dim is symbolic.
};

// A symbolic size (xnnpack_graph.fbs Symbol), bound per execute from the delegate's inputs.
struct SymbolInfo {
  std::string name;
  int32_t max = 1;
};

struct CompiledGraph {
  std::vector<ValueInfo> values;
  std::vector<uint32_t> inputs;   // Value id per delegate input.
  std::vector<uint32_t> outputs;  // Value id per delegate output.
  std::vector<RetainedRef> retained;
  std::vector<std::vector<float>> constants;  // Inline and internal constants, padded.
  std::vector<Step> steps;
  // Intermediates and operator scratch; ZeroedMemory, so pages the runs never reach (lengths below
  // the bound, or the whole arena while runs use the process's WorkingMemory) stay out of RSS.
  // Slots are shared by values whose lifetimes do not overlap.
  runtime::ZeroedMemory arena;
  size_t arena_floats = 0;
  // Per arena slot: its value id and offset in floats, to point the slots at another base.
  std::vector<std::pair<uint32_t, size_t>> arena_slots;
  float* arena_base = nullptr;  // The base the slots' pointers are at now.
  std::vector<void*> pointers;  // Per value id: constants fixed, arena slots per base, io per run.
  // Fully connected steps that read rows an earlier step quantized (GraphCompiler).
  size_t shared_quantized_inputs = 0;
  std::vector<SymbolInfo> symbols;    // Empty for a static graph.
  std::vector<int32_t> symbol_sizes;  // Per symbol: its size in this run (sized at init).
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_COMPILED_GRAPH_H_
