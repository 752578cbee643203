#include "edgeshare/backends/xnnpack/runtime/dynamic_shapes.h"

#include <algorithm>
#include <array>
#include <variant>

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Span;
using runtime::Status;
using runtime::Tensor;

namespace {

size_t current_numel(const CompiledGraph& g, uint32_t id) {
  const ValueInfo& v = g.values[id];
  if (!v.dynamic) return v.numel;
  size_t n = 1;
  for (size_t d = 0; d < v.shape.size(); ++d) n *= current_dim(g, v, d);
  return n;
}

void set_shape(const CompiledGraph& g, uint32_t id, size_t* rank,
               std::array<size_t, XNN_MAX_TENSOR_DIMS>* shape) {
  const ValueInfo& v = g.values[id];
  *rank = v.shape.size();
  for (size_t d = 0; d < v.shape.size(); ++d) (*shape)[d] = current_dim(g, v, d);
}

// One overload per step type, picked by std::visit.
struct Reshaper {
  const CompiledGraph& g;

  void operator()(UnaryStep& s) const { s.batch = current_numel(g, s.in) / s.channels; }
  void operator()(BinaryStep& s) const {
    set_shape(g, s.a, &s.a_rank, &s.a_shape);
    set_shape(g, s.b, &s.b_rank, &s.b_shape);
  }
  void operator()(PoolingStep& s) const {
    const ValueInfo& v = g.values[s.in];
    s.width = current_dim(g, v, v.shape.size() - 1);
    s.batch = current_numel(g, s.in) / s.width;
  }
  void operator()(FullyConnectedStep& s) const { s.batch = current_numel(g, s.in) / s.in_channels; }
  void operator()(UnpackedFullyConnectedStep& s) const {
    s.batch = current_numel(g, s.in) / s.in_channels;
  }
  void operator()(RmsNormStep& s) const { s.rows = current_numel(g, s.in) / s.channels; }
};

Status check_rank(const ValueInfo& v, const Tensor& t, const char* what, size_t index) {
  ES_CHECK_OR_RETURN_ERROR(t.dim() == v.shape.size(), Error::InvalidArgument,
                           "XNNPACK delegate %s %zu has %zu dims, the graph's has %zu", what, index,
                           t.dim(), v.shape.size());
  return Status();
}

Status check_exact_dim(const ValueInfo& v, const Tensor& t, size_t d, const char* what,
                       size_t index) {
  ES_CHECK_OR_RETURN_ERROR(t.size(d) == v.shape[d], Error::InvalidArgument,
                           "XNNPACK delegate %s %zu has size %d in dim %zu, the graph's is %lld",
                           what, index, t.size(d), d, static_cast<long long>(v.shape[d]));
  return Status();
}

}  // namespace

void start_binding(CompiledGraph* graph) {
  std::fill(graph->symbol_sizes.begin(), graph->symbol_sizes.end(), 0);
}

Status bind_input(CompiledGraph* graph, size_t index, const Tensor& t) {
  const ValueInfo& v = graph->values[graph->inputs[index]];
  ES_RETURN_IF_ERROR(check_rank(v, t, "input", index));
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] >= 0) {
      ES_RETURN_IF_ERROR(check_exact_dim(v, t, d, "input", index));
      continue;
    }
    const size_t k = static_cast<size_t>(-v.shape[d] - 1);
    const SymbolInfo& symbol = graph->symbols[k];
    const int32_t size = t.size(d);
    ES_CHECK_OR_RETURN_ERROR(size >= 1 && size <= symbol.max, Error::InvalidArgument,
                             "XNNPACK delegate input %zu: dim %zu (symbol '%s') is %d, outside "
                             "[1, %d] (the bound it was exported for)",
                             index, d, symbol.name.c_str(), size, symbol.max);
    int32_t& bound = graph->symbol_sizes[k];
    ES_CHECK_OR_RETURN_ERROR(bound == 0 || bound == size, Error::InvalidArgument,
                             "XNNPACK delegate input %zu: dim %zu makes symbol '%s' %d, but an "
                             "earlier input dim made it %d",
                             index, d, symbol.name.c_str(), size, bound);
    bound = size;
  }
  return Status();
}

Status resize_output(const CompiledGraph& graph, size_t index, Tensor* t) {
  const ValueInfo& v = graph.values[graph.outputs[index]];
  ES_RETURN_IF_ERROR(check_rank(v, *t, "output", index));
  std::array<int32_t, XNN_MAX_TENSOR_DIMS> sizes{};
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] >= 0) ES_RETURN_IF_ERROR(check_exact_dim(v, *t, d, "output", index));
    sizes[d] = static_cast<int32_t>(current_dim(graph, v, d));
  }
  const Status status = t->resize(Span<const int32_t>(sizes.data(), v.shape.size()));
  if (!status.ok()) return status.WithContext("XNNPACK delegate output %zu", index);
  return Status();
}

void reshape_steps(CompiledGraph* graph) {
  const Reshaper reshaper{*graph};
  for (Step& step : graph->steps) std::visit(reshaper, step.op);
}

}  // namespace xnnpack
}  // namespace edgeshare
