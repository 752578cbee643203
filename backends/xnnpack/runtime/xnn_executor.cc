#include "edgeshare/backends/xnnpack/runtime/xnn_executor.h"

#include "edgeshare/backends/xnnpack/runtime/dynamic_shapes.h"
#include "edgeshare/backends/xnnpack/runtime/graph_compiler.h"
#include "edgeshare/backends/xnnpack/runtime/graph_reader.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/backends/xnnpack/runtime/steps.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/working_memory.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::EValue;
using runtime::NamedDataMap;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;

Result<std::unique_ptr<XnnExecutor>> XnnExecutor::create(const void* blob, size_t size,
                                                         const NamedDataMap* map,
                                                         bool share_weights) {
  // XNNPACK must be initialised before any operator is made; it is idempotent and thread-safe.
  const xnn_status init = initialize_xnnpack();
  ES_CHECK_OR_RETURN_ERROR(init == xnn_status_success, Error::DelegateInitFailed,
                           "xnn_initialize failed (status %d): unsupported CPU?",
                           static_cast<int>(init));
  std::unique_ptr<XnnExecutor> executor(new XnnExecutor());
  if (share_weights) {
    executor->cache_ = &WeightsCache::shared();
  } else {
    executor->private_cache_.reset(new WeightsCache());
    executor->cache_ = executor->private_cache_.get();
  }
  ES_ASSIGN_OR_RETURN(const schema::Graph* graph, verify_graph(blob, size));
  GraphValues values;
  ES_RETURN_IF_ERROR(read_values(*graph, &values));
  // On failure the executor's destructor releases whatever was already made.
  GraphCompiler compiler(*graph, executor->cache_, map, &executor->graph_);
  ES_RETURN_IF_ERROR(compiler.compile(std::move(values)));
  ES_RETURN_IF_ERROR(WorkingMemory::shared().reserve(executor->arena_bytes()));
  return executor;
}

// Checks each arg against its graph value and points the value at the arg's data. In a graph
// with symbols, inputs bind them first, then each dynamic output is resized to its real shape and
// every step is set up for it; a static graph's args must match exactly, as they always did.
Status XnnExecutor::bind_args(Span<EValue* const> args) {
  const size_t num_inputs = graph_.inputs.size();
  const size_t want = num_inputs + graph_.outputs.size();
  ES_CHECK_OR_RETURN_ERROR(args.size() == want, Error::InvalidArgument,
                           "XNNPACK delegate got %zu args, its graph has %zu inputs + %zu outputs",
                           args.size(), num_inputs, graph_.outputs.size());
  const bool dynamic = !graph_.symbols.empty();
  if (dynamic) start_binding(&graph_);
  for (size_t i = 0; i < want; ++i) {
    const bool is_input = i < num_inputs;
    const uint32_t id = is_input ? graph_.inputs[i] : graph_.outputs[i - num_inputs];
    EValue* arg = args[i];
    ES_CHECK_OR_RETURN_ERROR(arg != nullptr && arg->is_tensor(), Error::InvalidArgument,
                             "XNNPACK delegate arg %zu is not a tensor", i);
    runtime::Tensor& t = arg->to_tensor();
    const ScalarType want = graph_.values[id].dtype;
    ES_CHECK_OR_RETURN_ERROR(t.scalar_type() == want, Error::InvalidArgument,
                             "XNNPACK delegate arg %zu has dtype %s, expected %s", i,
                             runtime::to_string(t.scalar_type()), runtime::to_string(want));
    ES_CHECK_OR_RETURN_ERROR(t.mutable_data() != nullptr, Error::InvalidArgument,
                             "XNNPACK delegate arg %zu has no data", i);
    graph_.pointers[id] = t.mutable_data();
    if (dynamic && is_input) {
      ES_RETURN_IF_ERROR(bind_input(&graph_, i, t));
    } else if (dynamic) {
      ES_RETURN_IF_ERROR(resize_output(graph_, i - num_inputs, &t));  // inputs came first
    } else {
      ES_RETURN_IF_ERROR(check_static_shape(graph_.values[id], t, i, is_input, num_inputs));
    }
  }
  if (dynamic) reshape_steps(&graph_);
  return Status();
}

Status XnnExecutor::check_static_shape(const ValueInfo& v, const runtime::Tensor& t, size_t i,
                                       bool is_input, size_t num_inputs) {
  const std::vector<int32_t>& dims = v.dims;
  bool same = t.dim() == dims.size();
  for (size_t d = 0; same && d < dims.size(); ++d) same = t.size(d) == dims[d];
  ES_CHECK_OR_RETURN_ERROR(same, Error::InvalidArgument,
                           "XNNPACK delegate arg %zu (%s %zu) has a shape other than the "
                           "graph's (rank %zu)",
                           i, is_input ? "input" : "output", is_input ? i : i - num_inputs,
                           dims.size());
  return Status();
}

void XnnExecutor::point_arena_at(float* base) {
  if (base == graph_.arena_base) return;
  for (const auto& slot : graph_.arena_slots) graph_.pointers[slot.first] = base + slot.second;
  graph_.arena_base = base;
}

Status XnnExecutor::execute(Span<EValue* const> args) {
  ES_RETURN_IF_ERROR(bind_args(args));
  // The process's shared block when no other execute holds it, else this executor's own arena.
  const WorkingMemory::Lease lease(&WorkingMemory::shared(), arena_bytes());
  point_arena_at(lease.block() != nullptr ? static_cast<float*>(lease.block())
                                          : static_cast<float*>(graph_.arena.data()));
  pthreadpool_t pool = threadpool();
  for (const Step& step : graph_.steps) {
    ES_RETURN_IF_ERROR(run_step(step, graph_.pointers.data(), pool));
  }
  return Status();
}

}  // namespace xnnpack
}  // namespace edgeshare
