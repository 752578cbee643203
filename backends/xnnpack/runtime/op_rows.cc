#include "edgeshare/backends/xnnpack/runtime/fc_format.h"
#include "edgeshare/backends/xnnpack/runtime/op_rows.h"

#include <xnnpack.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_compiler.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Result;
using runtime::ScalarType;
using runtime::Status;

namespace fb = ::edgeshare::xnnpack::schema;

namespace {

// ---- Shape rules ---------------------------------------------------------------------------

// The numpy broadcast of two shapes (ValueInfo::shape), or false when they are incompatible. A
// symbolic dim broadcasts with 1 or with itself only: against any other size, whether it
// broadcasts would depend on the run.
bool broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
               std::vector<int64_t>* out) {
  const size_t rank = a.size() > b.size() ? a.size() : b.size();
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[rank - 1 - i] = da == 1 ? db : da;
  }
  return true;
}

Status broadcast_shapes(const NodeContext& c) {
  const ValueInfo& b = c.compiler->value(c.in[1]);
  std::vector<int64_t> want;
  ES_CHECK_OR_RETURN_ERROR(broadcast(c.x.shape, b.shape, &want), Error::InvalidProgram,
                           "node %u (%s): shapes %s and %s do not broadcast", c.node, c.name,
                           dims_string(c.x.shape).c_str(), dims_string(b.shape).c_str());
  ES_CHECK_OR_RETURN_ERROR(c.y.shape == want, Error::InvalidProgram,
                           "node %u (%s): output is %s, the broadcast is %s", c.node, c.name,
                           dims_string(c.y.shape).c_str(), dims_string(want).c_str());
  return Status();
}

Status same_shape(const NodeContext& c) {
  ES_CHECK_OR_RETURN_ERROR(c.x.shape == c.y.shape, Error::InvalidProgram,
                           "node %u (%s): output %s differs from input %s", c.node, c.name,
                           dims_string(c.y.shape).c_str(), dims_string(c.x.shape).c_str());
  return Status();
}

// Softmax's operator fixes its row length at create: the last dim must be exact.
Status same_shape_exact_last_dim(const NodeContext& c) {
  ES_RETURN_IF_ERROR(same_shape(c));
  ES_CHECK_OR_RETURN_ERROR(c.x.shape.empty() || c.x.shape.back() > 0, Error::NotSupported,
                           "node %u (%s): input %s has a symbolic last dim", c.node, c.name,
                           dims_string(c.x.shape).c_str());
  return Status();
}

Status same_shape_finite_alpha(const NodeContext& c) {
  ES_RETURN_IF_ERROR(same_shape(c));
  ES_CHECK_OR_RETURN_ERROR(std::isfinite(c.alpha), Error::InvalidProgram,
                           "node %u (%s) has slope %g", c.node, c.name, c.alpha);
  return Status();
}

Status same_shape_positive_alpha(const NodeContext& c) {
  ES_RETURN_IF_ERROR(same_shape(c));
  ES_CHECK_OR_RETURN_ERROR(std::isfinite(c.alpha) && c.alpha > 0.0f, Error::InvalidProgram,
                           "node %u (%s) has alpha %g; XNNPACK needs a positive one", c.node,
                           c.name, c.alpha);
  return Status();
}

// The symbols of a shape, sorted (with repeats).
std::vector<int64_t> symbols_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> symbols;
  for (int64_t d : shape) {
    if (d < 0) symbols.push_back(d);
  }
  std::sort(symbols.begin(), symbols.end());
  return symbols;
}

// A reshape: the same element count in every run, i.e. at the bound and over the same symbols
// (then the exact dims multiply to the same count too).
Status same_numel(const NodeContext& c) {
  ES_CHECK_OR_RETURN_ERROR(c.x.numel == c.y.numel && symbols_of(c.x.shape) == symbols_of(c.y.shape),
                           Error::InvalidProgram,
                           "node %u (%s): %s and %s hold different element counts", c.node, c.name,
                           dims_string(c.x.shape).c_str(), dims_string(c.y.shape).c_str());
  return Status();
}

// x [..., n] -> y [..., 1] or [...]: the same elements.
Status mean_last_dim_shapes(const NodeContext& c) {
  ES_CHECK_OR_RETURN_ERROR(!c.x.shape.empty(), Error::InvalidProgram,
                           "node %u (%s): input is a scalar; it has no last dimension", c.node,
                           c.name);
  std::vector<int64_t> kept = c.x.shape;
  kept.back() = 1;
  const std::vector<int64_t> dropped(c.x.shape.begin(), c.x.shape.end() - 1);
  ES_CHECK_OR_RETURN_ERROR(c.y.shape == kept || c.y.shape == dropped, Error::InvalidProgram,
                           "node %u (%s): output is %s; the mean of %s over its last dimension "
                           "is %s or %s",
                           c.node, c.name, dims_string(c.y.shape).c_str(),
                           dims_string(c.x.shape).c_str(), dims_string(kept).c_str(),
                           dims_string(dropped).c_str());
  return Status();
}

Status fully_connected_bias_dtype(const NodeContext& c, const ValueInfo& w) {
  if (c.num_in < 3) return Status();
  const ValueInfo& b = c.compiler->value(c.in[2]);
  // graph_reader gave every weight value of a fully connected a format.
  const FcFormat* format = w.format;
  const ScalarType want = format != nullptr ? format->bias_dtype : w.dtype;
  ES_CHECK_OR_RETURN_ERROR(
      b.dtype == want, Error::NotSupported,
      "node %u (FULLY_CONNECTED): weight value %u is %s but bias value %u "
      "is %s; both must be float32 or both HALF (a CHAR weight: a float32 bias)",
      c.node, c.in[1], runtime::to_string(w.dtype), c.in[2], runtime::to_string(b.dtype));
  return Status();
}

Status fully_connected_bias_shape(const NodeContext& c, size_t out_ch) {
  if (c.num_in < 3) return Status();
  const ValueInfo& b = c.compiler->value(c.in[2]);
  ES_CHECK_OR_RETURN_ERROR(b.kind == fb::ValueKind_CONSTANT && b.dims.size() == 1 &&
                               static_cast<size_t>(b.dims[0]) == out_ch,
                           Error::InvalidProgram,
                           "node %u (FULLY_CONNECTED): bias value %u must be a constant [%zu]",
                           c.node, c.in[2], out_ch);
  return Status();
}

// x [..., in], weight [out, in], optional bias [out] -> y [..., out].
Status fully_connected_shapes(const NodeContext& c) {
  const ValueInfo& w = c.compiler->value(c.in[1]);
  ES_CHECK_OR_RETURN_ERROR(w.kind == fb::ValueKind_CONSTANT && w.dims.size() == 2,
                           Error::InvalidProgram,
                           "node %u (FULLY_CONNECTED): weight value %u must be a rank-2 constant "
                           "[out, in]",
                           c.node, c.in[1]);
  ES_RETURN_IF_ERROR(fully_connected_bias_dtype(c, w));
  const size_t out_ch = w.dims[0];
  const size_t in_ch = w.dims[1];
  ES_CHECK_OR_RETURN_ERROR(!c.x.shape.empty() && c.x.shape.back() == static_cast<int64_t>(in_ch),
                           Error::InvalidProgram,
                           "node %u (FULLY_CONNECTED): input %s does not end in the weight's %zu "
                           "input channels",
                           c.node, dims_string(c.x.shape).c_str(), in_ch);
  std::vector<int64_t> want = c.x.shape;
  want.back() = static_cast<int64_t>(out_ch);
  ES_CHECK_OR_RETURN_ERROR(c.y.shape == want, Error::InvalidProgram,
                           "node %u (FULLY_CONNECTED): output is %s, expected %s", c.node,
                           dims_string(c.y.shape).c_str(), dims_string(want).c_str());
  return fully_connected_bias_shape(c, out_ch);
}

// x [..., in], weight [out, in] (a delegate input of exact dims, read as stored, in a weight
// format that runs unpacked; qc8w: with its float scales [out], also a delegate input) ->
// y [..., out].
Status unpacked_fully_connected_shapes(const NodeContext& c) {
  const ValueInfo& w = c.compiler->value(c.in[1]);
  ES_CHECK_OR_RETURN_ERROR(w.kind == fb::ValueKind_INPUT && w.dims.size() == 2 && !w.dynamic,
                           Error::InvalidProgram,
                           "node %u (%s): weight value %u must be a rank-2 delegate input of exact "
                           "dims [out, in]",
                           c.node, c.name, c.in[1]);
  const size_t out_ch = w.dims[0];
  const size_t in_ch = w.dims[1];
  const FcFormat* format = w.format;
  ES_CHECK_OR_RETURN_ERROR(format != nullptr && format->run_unpacked != nullptr,
                           Error::NotSupported,
                           "node %u (%s): weight value %u is %s; a weight read as stored is "
                           "float32, HALF or CHAR (with float scales)",
                           c.node, c.name, c.in[1], runtime::to_string(w.dtype));
  ES_CHECK_OR_RETURN_ERROR(c.num_in == (format->has_scales ? 3u : 2u), Error::InvalidProgram,
                           "node %u (%s): a %s weight takes %s", c.node, c.name, format->name,
                           format->has_scales ? "its scales as input 2" : "no third input");
  if (format->has_scales) {
    const ValueInfo& s = c.compiler->value(c.in[2]);
    ES_CHECK_OR_RETURN_ERROR(s.kind == fb::ValueKind_INPUT && s.dtype == format->scales_dtype &&
                                 s.dims.size() == 1 && s.dims[0] == w.dims[0] && !s.dynamic,
                             Error::InvalidProgram,
                             "node %u (%s): scales value %u must be a %s delegate input [%zu]",
                             c.node, c.name, c.in[2], runtime::to_string(format->scales_dtype),
                             out_ch);
  }
  ES_CHECK_OR_RETURN_ERROR(!c.x.shape.empty() && c.x.shape.back() == static_cast<int64_t>(in_ch),
                           Error::InvalidProgram,
                           "node %u (%s): input %s does not end in the weight's %zu input channels",
                           c.node, c.name, dims_string(c.x.shape).c_str(), in_ch);
  std::vector<int64_t> want = c.x.shape;
  want.back() = static_cast<int64_t>(out_ch);
  ES_CHECK_OR_RETURN_ERROR(c.y.shape == want, Error::InvalidProgram,
                           "node %u (%s): output is %s, expected %s", c.node, c.name,
                           dims_string(c.y.shape).c_str(), dims_string(want).c_str());
  return Status();
}

// ---- Creating operators ---------------------------------------------------------------------

Status check_created(const NodeContext& c, xnn_status status, const char* what) {
  ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                           "node %u (%s): XNNPACK could not create %s (status %d)", c.node, c.name,
                           what, static_cast<int>(status));
  return Status();
}

// XNNPACK's create calls differ in their attributes; the row's call picks the variant.
template <auto kCreate>
constexpr bool kUnaryTakesRange = std::is_invocable_v<decltype(kCreate), size_t, size_t, size_t,
                                                      float, float, uint32_t, xnn_operator_t*>;
template <auto kCreate>
constexpr bool kUnaryTakesAlpha = std::is_invocable_v<decltype(kCreate), size_t, size_t, size_t,
                                                      float, uint32_t, xnn_operator_t*>;
template <auto kCreate>
constexpr bool kBinaryTakesRange =
    std::is_invocable_v<decltype(kCreate), float, float, uint32_t, xnn_operator_t*>;

template <auto kCreate>
xnn_status create_unary(const NodeContext& c, size_t channels, xnn_operator_t* op) {
  if constexpr (kUnaryTakesRange<kCreate>) {
    return kCreate(channels, channels, channels, c.output_min, c.output_max, 0, op);
  } else if constexpr (kUnaryTakesAlpha<kCreate>) {
    return kCreate(channels, channels, channels, c.alpha, 0, op);
  } else {
    return kCreate(channels, channels, channels, 0, op);
  }
}

template <auto kCreate>
xnn_status create_binary(const NodeContext& c, xnn_operator_t* op) {
  if constexpr (kBinaryTakesRange<kCreate>) {
    return kCreate(c.output_min, c.output_max, 0, op);
  } else {
    return kCreate(0, op);
  }
}

// Adapts a setup call (copy's takes void pointers) to the step's signature.
template <auto kSetup>
xnn_status unary_setup(xnn_operator_t op, size_t batch, const float* in, float* out,
                       pthreadpool_t pool) {
  return kSetup(op, batch, in, out, pool);
}

// How a unary op sees its input: elementwise ops as one row of numel channels, softmax as rows of
// the last dimension.
enum class Layout : uint8_t { kFlat, kRowsOfLastDim };

template <auto kCreate, auto kSetup>
Status add_unary(NodeContext& c, size_t channels, uint32_t in, uint32_t out, const char* what) {
  xnn_operator_t op = nullptr;
  const xnn_status status = create_unary<kCreate>(c, channels, &op);
  UnaryStep step;
  step.op.reset(op);
  ES_RETURN_IF_ERROR(check_created(c, status, what));
  step.setup = unary_setup<kSetup>;
  step.channels = channels;
  step.batch = c.x.numel / channels;
  step.in = in;
  step.out = out;
  c.compiler->add_step(c.node, std::move(step));
  if constexpr (kUnaryTakesRange<kCreate>) c.clamp_folded = true;
  return Status();
}

template <auto kCreate, auto kSetup>
Status add_binary(NodeContext& c, uint32_t a, uint32_t b, uint32_t out, const char* what) {
  xnn_operator_t op = nullptr;
  const xnn_status status = create_binary<kCreate>(c, &op);
  BinaryStep step;
  step.op.reset(op);
  ES_RETURN_IF_ERROR(check_created(c, status, what));
  step.setup = kSetup;
  step.a = a;
  step.b = b;
  step.out = out;
  const std::vector<int32_t>& a_dims = c.compiler->value(a).dims;
  const std::vector<int32_t>& b_dims = c.compiler->value(b).dims;
  step.a_rank = a_dims.size();
  step.b_rank = b_dims.size();
  for (size_t i = 0; i < a_dims.size(); ++i) step.a_shape[i] = a_dims[i];
  for (size_t i = 0; i < b_dims.size(); ++i) step.b_shape[i] = b_dims[i];
  c.compiler->add_step(c.node, std::move(step));
  if constexpr (kBinaryTakesRange<kCreate>) c.clamp_folded = true;
  return Status();
}

// ---- Node builders (the families of op_rows.inc) --------------------------------------------

template <auto kCreate, auto kSetup, Layout kLayout = Layout::kFlat>
Status build_unary(NodeContext& c) {
  ES_RETURN_IF_ERROR(c.compiler->ensure_pointer(c.in[0]));
  size_t channels = GraphCompiler::elementwise_channels(c.x);
  if constexpr (kLayout == Layout::kRowsOfLastDim) {
    channels = c.x.dims.empty() ? 1 : c.x.dims.back();
  }
  return add_unary<kCreate, kSetup>(c, channels, c.in[0], c.out, "the operator");
}

template <auto kCreate, auto kSetup>
Status build_binary(NodeContext& c) {
  ES_RETURN_IF_ERROR(c.compiler->ensure_pointer(c.in[0]));
  ES_RETURN_IF_ERROR(c.compiler->ensure_pointer(c.in[1]));
  return add_binary<kCreate, kSetup>(c, c.in[0], c.in[1], c.out, "the operator");
}

// XNNPACK has no SiLU: y = x * sigmoid(x), the sigmoid in a scratch slot of the arena.
Status build_silu(NodeContext& c) {
  ES_RETURN_IF_ERROR(c.compiler->ensure_pointer(c.in[0]));
  const uint32_t sigmoid = c.compiler->new_scratch(c.x);
  ES_RETURN_IF_ERROR((add_unary<xnn_create_sigmoid_nc_f32, xnn_setup_sigmoid_nc_f32>(
      c, GraphCompiler::elementwise_channels(c.x), c.in[0], sigmoid, "sigmoid")));
  return add_binary<xnn_create_multiply_nd_f32, xnn_setup_multiply_nd_f32>(c, c.in[0], sigmoid,
                                                                           c.out, "multiply");
}

// XNNPACK has no reciprocal square root: y = 1 / sqrt(x), the root in a scratch slot.
Status build_rsqrt(NodeContext& c) {
  ES_RETURN_IF_ERROR(c.compiler->ensure_pointer(c.in[0]));
  const uint32_t root = c.compiler->new_scratch(c.x);
  ES_RETURN_IF_ERROR((add_unary<xnn_create_square_root_nc_f32, xnn_setup_square_root_nc_f32>(
      c, GraphCompiler::elementwise_channels(c.x), c.in[0], root, "square root")));
  const uint32_t one = c.compiler->new_constant(1.0f);
  return add_binary<xnn_create_divide_nd_f32, xnn_setup_divide_nd_f32>(c, one, root, c.out,
                                                                       "divide");
}

// Global average pooling over x seen as [numel / n, n, 1].
Status build_mean_last_dim(NodeContext& c) {
  ES_RETURN_IF_ERROR(c.compiler->ensure_pointer(c.in[0]));
  xnn_operator_t op = nullptr;
  const xnn_status status = xnn_create_global_average_pooling_nwc_f32(
      /*channels=*/1, /*input_stride=*/1, /*output_stride=*/1, c.output_min, c.output_max,
      /*flags=*/0, &op);
  PoolingStep step;
  step.op.reset(op);
  ES_RETURN_IF_ERROR(check_created(c, status, "global average pooling"));
  step.setup = xnn_setup_global_average_pooling_nwc_f32;
  step.width = static_cast<size_t>(c.x.dims.back());
  step.batch = c.x.numel / step.width;
  step.in = c.in[0];
  step.out = c.out;
  c.compiler->add_step(c.node, std::move(step));
  c.clamp_folded = true;
  return Status();
}

Status build_fully_connected(NodeContext& c) {
  GraphCompiler& g = *c.compiler;
  const size_t out_ch = g.value(c.in[1]).dims[0];
  const size_t in_ch = g.value(c.in[1]).dims[1];
  const FcFormat& format = *g.value(c.in[1]).format;
  FullyConnectedRequest request;
  request.format = &format;
  request.weight = g.constant_ref(c.in[1]);
  request.has_scales = format.has_scales;
  if (request.has_scales) request.scales = g.scales_ref(c.in[1]);
  const size_t group = format.group_scales ? in_ch / request.scales.identity.dims[1] : 0;
  request.has_bias = c.num_in == 3;
  if (request.has_bias) request.bias = g.constant_ref(c.in[2]);
  request.input_channels = in_ch;
  request.output_channels = out_ch;
  if (g.read_directly(c.in[1])) ES_RETURN_IF_ERROR(g.ensure_pointer(c.in[1]));
  if (request.has_bias && g.read_directly(c.in[2])) ES_RETURN_IF_ERROR(g.ensure_pointer(c.in[2]));
  g.request_packed(c.node, std::move(request));
  ES_RETURN_IF_ERROR(g.ensure_pointer(c.in[0]));
  const size_t batch = c.x.numel / in_ch;
  FullyConnectedStep step;  // Its packed entry comes with the graph's batch (request_packed).
  step.batch = batch;
  step.in_channels = in_ch;
  step.in = c.in[0];
  step.out = c.out;
  // The format's scratch for this node's rows (if any): an arena slot live during this node
  // only, so the nodes of a graph share one block of it and runs allocate nothing.
  step.scratch_layout = format.scratch(batch, FcShape{in_ch, out_ch, group});
  if (step.scratch_layout.bytes > 0) step.scratch = g.new_scratch_bytes(step.scratch_layout.bytes);
  g.add_step(c.node, std::move(step));
  return Status();
}

// Nothing is fetched or packed: the weight's pointer is whatever the caller binds per execute
// (a swappable adapter's mapped bytes, switched by Method::rebind_data).
Status build_unpacked_fully_connected(NodeContext& c) {
  GraphCompiler& g = *c.compiler;
  ES_RETURN_IF_ERROR(g.ensure_pointer(c.in[0]));
  UnpackedFullyConnectedStep step;
  step.format = g.value(c.in[1]).format;  // unpacked_fully_connected_shapes checked it.
  if (c.num_in == 3) step.scales = c.in[2];
  step.out_channels = g.value(c.in[1]).dims[0];
  step.in_channels = g.value(c.in[1]).dims[1];
  step.batch = c.x.numel / step.in_channels;
  step.in = c.in[0];
  step.weight = c.in[1];
  step.out = c.out;
  g.add_step(c.node, std::move(step));
  return Status();
}

// ---- The table ------------------------------------------------------------------------------

#define ES_XNNPACK_OP(NAME, MIN_INPUTS, MAX_INPUTS, INPUTS, SHAPE_RULE, ...) \
  OpRow{fb::OpKind_##NAME, #NAME,      MIN_INPUTS, MAX_INPUTS,               \
        OpInputs::INPUTS,  SHAPE_RULE, __VA_ARGS__},
constexpr OpRow kRows[] = {
#include "edgeshare/backends/xnnpack/runtime/op_rows.inc"
};
#undef ES_XNNPACK_OP

constexpr bool rows_fit_node_context() {
  for (const OpRow& row : kRows) {
    if (row.max_inputs > kMaxNodeInputs || row.min_inputs > row.max_inputs) return false;
  }
  return true;
}
static_assert(rows_fit_node_context(), "a row's arity does not fit NodeContext::in");

}  // namespace

runtime::Span<const OpRow> op_rows() {
  return runtime::Span<const OpRow>(kRows, sizeof(kRows) / sizeof(kRows[0]));
}

const OpRow* find_op_row(uint8_t kind) {
  for (const OpRow& row : kRows) {
    if (static_cast<uint8_t>(row.kind) == kind) return &row;
  }
  return nullptr;
}

}  // namespace xnnpack
}  // namespace edgeshare
