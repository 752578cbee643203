// Per-run shapes of a graph with symbolic dims (xnnpack_graph.fbs Graph.symbols): one export that
// runs at any token count up to a bound.
//
// At every execute the executor binds each symbol from the real sizes of the delegate's input
// tensors (bind_input), checks that every symbol got one size within its bound, gives each dynamic
// output tensor its real sizes (resize_output: within the capacity planned for it), then sets each
// step's batch and shapes from the bound symbols (reshape_steps). Memory stays what init planned
// for the bounds: nothing here allocates.
//
//   start_binding(&graph);
//   for each input i: ES_RETURN_IF_ERROR(bind_input(&graph, i, tensor));
//   for each dynamic output i: ES_RETURN_IF_ERROR(resize_output(graph, i, &tensor));
//   reshape_steps(&graph);
//
// Errors: InvalidArgument naming the arg, the dim and the symbol: a size past the symbol's max (or
// below 1), one symbol bound to two sizes, an exact dim of another size, a rank other than the
// graph's, an output whose planned capacity cannot hold its real shape.
// Thread-safety: mutates the graph; one thread per graph at a time (as execute).
// Ownership: keeps no pointer to its arguments.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_DYNAMIC_SHAPES_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_DYNAMIC_SHAPES_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/backends/xnnpack/runtime/compiled_graph.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/tensor.h"

namespace edgeshare {
namespace xnnpack {

// Forgets the sizes of the previous run.
void start_binding(CompiledGraph* graph);

// Checks delegate input `index` against its value and binds the symbols of its dims.
runtime::Status bind_input(CompiledGraph* graph, size_t index, const runtime::Tensor& t);

// Checks delegate output `index` (rank and exact dims) and resizes it to its real sizes; call it
// after every input is bound.
runtime::Status resize_output(const CompiledGraph& graph, size_t index, runtime::Tensor* t);

// Sets each step's batch (and a binary step's shapes) for the bound symbols.
void reshape_steps(CompiledGraph* graph);

// The size of dim d of `v` in this run.
inline size_t current_dim(const CompiledGraph& graph, const ValueInfo& v, size_t d) {
  const int64_t s = v.shape[d];
  return s >= 0 ? static_cast<size_t>(s) : static_cast<size_t>(graph.symbol_sizes[-s - 1]);
}

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_DYNAMIC_SHAPES_H_
