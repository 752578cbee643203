#include "edgeshare/backends/xnnpack/runtime/xnn_executor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/xnnpack_graph_generated.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::EValue;
using runtime::NamedDataMap;
using runtime::Result;
using runtime::ScalarType;
using runtime::Span;
using runtime::Status;

namespace fb = ::edgeshare::xnnpack::schema;

namespace {

// Bounds that keep size arithmetic far from overflow and a hostile blob from asking for absurd
// memory: 2^28 floats (1 GiB) per value and for the whole arena.
constexpr uint64_t kMaxNumel = uint64_t{1} << 28;
constexpr size_t kMaxValues = size_t{1} << 20;
// Arena slots start on 64-byte boundaries; XNNPACK may read XNN_EXTRA_BYTES past an input's end.
constexpr size_t kSlotAlignFloats = 16;
constexpr size_t kPadFloats = (XNN_EXTRA_BYTES + sizeof(float) - 1) / sizeof(float);

const char* op_name(uint8_t op) {
  if (op > fb::OpKind_MAX) return "UNKNOWN";
  return fb::EnumNameOpKind(static_cast<fb::OpKind>(op));
}

bool is_binary(fb::OpKind op) { return op >= fb::OpKind_ADD && op <= fb::OpKind_MINIMUM; }

// The numpy broadcast of two shapes, or false when they are incompatible.
bool broadcast(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
               std::vector<int32_t>* out) {
  const size_t rank = a.size() > b.size() ? a.size() : b.size();
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int32_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int32_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[rank - 1 - i] = da == 1 ? db : da;
  }
  return true;
}

xnn_status setup_copy(xnn_operator_t op, size_t batch, const float* in, float* out,
                      pthreadpool_t pool) {
  return xnn_setup_copy_nc_x32(op, batch, in, out, pool);
}

std::string dims_string(const std::vector<int32_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace

Result<std::unique_ptr<XnnExecutor>> XnnExecutor::create(const void* blob, size_t size,
                                                         const NamedDataMap* map,
                                                         bool share_weights) {
  // XNNPACK must be initialised before any operator is made; it is idempotent and thread-safe.
  const xnn_status init = xnn_initialize(/*allocator=*/nullptr);
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
  // On failure the executor's destructor releases whatever was already made.
  ES_RETURN_IF_ERROR(executor->build(blob, size, map));
  return executor;
}

XnnExecutor::~XnnExecutor() {
  for (Step& step : steps_) {
    if (step.op != nullptr) xnn_delete_operator(step.op);
    if (step.convert_in != nullptr) xnn_delete_operator(step.convert_in);
    if (step.convert_out != nullptr) xnn_delete_operator(step.convert_out);
    if (step.packed != nullptr) cache_->release(step.packed);
  }
  for (RetainedConstant* constant : retained_) cache_->release(constant);
  // private_cache_ (if any) is now empty and goes last, as a member.
}

Status XnnExecutor::build(const void* blob, size_t size, const NamedDataMap* map) {
  ES_CHECK_OR_RETURN_ERROR(blob != nullptr && size > 0, Error::InvalidProgram,
                           "the delegate blob is empty");
  // A hostile or truncated blob must fail here, before any accessor reads past its end.
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(blob), size);
  ES_CHECK_OR_RETURN_ERROR(fb::VerifyGraphBuffer(verifier), Error::InvalidProgram,
                           "the delegate blob (%zu bytes) is not a valid XNNPACK graph "
                           "(FlatBuffer verification or file identifier 'ESX1' failed)",
                           size);
  const fb::Graph* graph = fb::GetGraph(blob);
  ES_CHECK_OR_RETURN_ERROR(graph->version() <= kMaxGraphVersion, Error::NotSupported,
                           "XNNPACK graph version %u is newer than this delegate reads (%u)",
                           graph->version(), kMaxGraphVersion);
  ES_CHECK_OR_RETURN_ERROR(graph->values() != nullptr && graph->nodes() != nullptr,
                           Error::InvalidProgram, "XNNPACK graph has no values or no nodes");
  const auto& fvalues = *graph->values();
  const auto& fnodes = *graph->nodes();
  ES_CHECK_OR_RETURN_ERROR(fvalues.size() < kMaxValues && fnodes.size() < kMaxValues,
                           Error::InvalidProgram, "XNNPACK graph has too many values or nodes");
  const uint32_t num_inputs = graph->num_inputs();
  const uint32_t num_outputs = graph->num_outputs();
  ES_CHECK_OR_RETURN_ERROR(num_inputs <= fvalues.size() && num_outputs <= fvalues.size() &&
                               num_outputs > 0,
                           Error::InvalidProgram,
                           "XNNPACK graph declares %u inputs and %u outputs over %u values",
                           num_inputs, num_outputs, fvalues.size());
  inputs_.assign(num_inputs, UINT32_MAX);
  outputs_.assign(num_outputs, UINT32_MAX);

  // Values: kinds, dtypes, shapes, io slots, constant payloads.
  const uint32_t num_values = fvalues.size();
  values_.resize(num_values);
  pointers_.assign(num_values, nullptr);
  std::vector<bool> defined(num_values, false);
  for (uint32_t id = 0; id < num_values; ++id) {
    const fb::Value* v = fvalues.Get(id);
    ValueInfo& info = values_[id];
    ES_CHECK_OR_RETURN_ERROR(v->kind() >= fb::ValueKind_MIN && v->kind() <= fb::ValueKind_MAX,
                             Error::InvalidProgram, "value %u has unknown kind %d", id,
                             static_cast<int>(v->kind()));
    info.kind = static_cast<uint8_t>(v->kind());
    // HALF is for fully connected weights and biases only; the nodes check each use below.
    const bool half = v->dtype() == edgeshare::schema::ScalarType_HALF;
    ES_CHECK_OR_RETURN_ERROR(v->dtype() == edgeshare::schema::ScalarType_FLOAT ||
                                 (half && v->kind() == fb::ValueKind_CONSTANT &&
                                  v->key() != nullptr),
                             Error::NotSupported,
                             "value %u has dtype %d; the XNNPACK delegate runs float32, and HALF "
                             "only for named constants (fully connected weights and biases)",
                             id, static_cast<int>(v->dtype()));
    info.dtype = half ? ScalarType::Half : ScalarType::Float;
    if (v->dims() != nullptr) {
      ES_CHECK_OR_RETURN_ERROR(v->dims()->size() <= XNN_MAX_TENSOR_DIMS &&
                                   v->dims()->size() <= runtime::Tensor::kMaxDims,
                               Error::NotSupported, "value %u has rank %u, more than %d", id,
                               v->dims()->size(), XNN_MAX_TENSOR_DIMS);
      uint64_t numel = 1;
      for (uint32_t d : *v->dims()) {
        ES_CHECK_OR_RETURN_ERROR(d > 0 && d <= static_cast<uint32_t>(INT32_MAX),
                                 Error::InvalidProgram, "value %u has a dimension of %u", id, d);
        numel *= d;
        ES_CHECK_OR_RETURN_ERROR(numel <= kMaxNumel, Error::InvalidProgram,
                                 "value %u has too many elements", id);
        info.dims.push_back(static_cast<int32_t>(d));
      }
      info.numel = static_cast<size_t>(numel);
    }
    const bool has_key = v->key() != nullptr;
    const bool has_inline = v->inline_data() != nullptr;
    switch (v->kind()) {
      case fb::ValueKind_INPUT:
      case fb::ValueKind_OUTPUT: {
        const bool is_input = v->kind() == fb::ValueKind_INPUT;
        std::vector<uint32_t>& slots = is_input ? inputs_ : outputs_;
        ES_CHECK_OR_RETURN_ERROR(v->io_index() < slots.size() && slots[v->io_index()] == UINT32_MAX,
                                 Error::InvalidProgram,
                                 "value %u: %s io_index %u is out of range or used twice", id,
                                 is_input ? "input" : "output", v->io_index());
        slots[v->io_index()] = id;
        defined[id] = is_input;
        break;
      }
      case fb::ValueKind_CONSTANT:
        ES_CHECK_OR_RETURN_ERROR(has_key != has_inline, Error::InvalidProgram,
                                 "constant value %u must have exactly one of key and inline_data",
                                 id);
        if (has_inline) {
          ES_CHECK_OR_RETURN_ERROR(v->inline_data()->size() == info.numel * sizeof(float),
                                   Error::InvalidProgram,
                                   "constant value %u has %u inline bytes, its dims need %zu", id,
                                   v->inline_data()->size(), info.numel * sizeof(float));
          // Copied: the blob may be freed after init, and XNNPACK wants aligned, padded floats.
          std::vector<float> copy(info.numel + kPadFloats, 0.0f);
          std::memcpy(copy.data(), v->inline_data()->data(), info.numel * sizeof(float));
          pointers_[id] = copy.data();
          inline_constants_.push_back(std::move(copy));
        } else {
          ES_CHECK_OR_RETURN_ERROR(v->key()->size() > 0, Error::InvalidProgram,
                                   "constant value %u has an empty key", id);
          ES_CHECK_OR_RETURN_ERROR(v->digest() != nullptr && v->digest()->size() == 32,
                                   Error::InvalidProgram,
                                   "constant value %u ('%s') needs a 32-byte SHA-256 digest", id,
                                   v->key()->c_str());
        }
        defined[id] = true;
        break;
      default:  // INTERMEDIATE
        break;
    }
  }
  for (uint32_t i = 0; i < num_inputs; ++i) {
    ES_CHECK_OR_RETURN_ERROR(inputs_[i] != UINT32_MAX, Error::InvalidProgram,
                             "no value is delegate input %u", i);
  }
  for (uint32_t i = 0; i < num_outputs; ++i) {
    ES_CHECK_OR_RETURN_ERROR(outputs_[i] != UINT32_MAX, Error::InvalidProgram,
                             "no value is delegate output %u", i);
  }

  // How a constant is named and identified, for the weights cache.
  auto constant_ref = [&](uint32_t id) {
    const fb::Value* v = fvalues.Get(id);
    ConstantRef ref;
    ref.identity.dtype = values_[id].dtype;
    ref.identity.dims.assign(values_[id].dims.begin(), values_[id].dims.end());
    if (v->inline_data() != nullptr) {
      ref.identity.is_inline = true;
      ref.identity.inline_bytes.assign(v->inline_data()->begin(), v->inline_data()->end());
    } else {
      ref.key = v->key()->str();
      std::memcpy(ref.identity.digest.bytes.data(), v->digest()->data(), 32);
    }
    return ref;
  };
  // Makes a named constant readable by an elementwise operator (kept until destruction).
  auto ensure_pointer = [&](uint32_t id) -> Status {
    if (pointers_[id] != nullptr || values_[id].kind != fb::ValueKind_CONSTANT) return Status();
    ES_ASSIGN_OR_RETURN(RetainedConstant * constant, cache_->retain_constant(map, constant_ref(id)));
    retained_.push_back(constant);
    pointers_[id] = const_cast<float*>(constant->data());
    return Status();
  };
  // Intermediates get arena slots; the scratch values SILU needs are appended as new ids.
  std::vector<size_t> slot_offset(num_values, SIZE_MAX);
  size_t arena_floats = 0;
  auto add_slot = [&](size_t numel) {
    const size_t offset = arena_floats;
    arena_floats += (numel + kPadFloats + kSlotAlignFloats - 1) / kSlotAlignFloats *
                    kSlotAlignFloats;
    return offset;
  };
  // A scratch value of `numel` IEEE halves (an f16 fully connected op's input or output).
  auto new_half_scratch = [&](size_t numel) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    ValueInfo scratch;
    scratch.kind = fb::ValueKind_INTERMEDIATE;
    scratch.dtype = ScalarType::Half;
    scratch.numel = numel;
    values_.push_back(scratch);
    pointers_.push_back(nullptr);
    slot_offset.push_back(add_slot((numel + 1) / 2));
    return id;
  };
  auto new_scratch = [&](const ValueInfo& like) {
    const uint32_t id = static_cast<uint32_t>(values_.size());
    ValueInfo scratch = like;
    scratch.kind = fb::ValueKind_INTERMEDIATE;
    values_.push_back(scratch);
    pointers_.push_back(nullptr);
    slot_offset.push_back(add_slot(scratch.numel));
    return id;
  };
  const float inf = std::numeric_limits<float>::infinity();
  // Values read directly by some node (everything but a fully connected op's weight and bias):
  // such a constant is retained before a fully connected op packs it, and the packing then reads
  // the retained bytes, so a weight used both ways (a bias added again, say) is fetched once.
  // (Out-of-range ids are skipped here and rejected below.)
  std::vector<bool> read_directly(num_values, false);
  for (uint32_t n = 0; n < fnodes.size(); ++n) {
    const fb::Node* node = fnodes.Get(n);
    if (node->inputs() == nullptr) continue;
    const bool fully_connected = node->op() == fb::OpKind_FULLY_CONNECTED;
    for (uint32_t i = 0; i < node->inputs()->size(); ++i) {
      const uint32_t id = node->inputs()->Get(i);
      if (id < num_values && (!fully_connected || i == 0)) read_directly[id] = true;
    }
  }

  for (uint32_t n = 0; n < fnodes.size(); ++n) {
    const fb::Node* node = fnodes.Get(n);
    const uint8_t raw_op = static_cast<uint8_t>(node->op());
    ES_CHECK_OR_RETURN_ERROR(raw_op <= fb::OpKind_MAX, Error::NotSupported,
                             "node %u has unknown op kind %u", n, raw_op);
    const fb::OpKind op = node->op();
    const char* name = op_name(raw_op);
    const size_t num_in = node->inputs() ? node->inputs()->size() : 0;
    const size_t num_out = node->outputs() ? node->outputs()->size() : 0;
    const size_t want_in = op == fb::OpKind_FULLY_CONNECTED ? 2 : is_binary(op) ? 2 : 1;
    const bool in_count_ok =
        num_in == want_in || (op == fb::OpKind_FULLY_CONNECTED && num_in == 3);
    ES_CHECK_OR_RETURN_ERROR(in_count_ok && num_out == 1, Error::InvalidProgram,
                             "node %u (%s) has %zu inputs and %zu outputs", n, name, num_in,
                             num_out);
    uint32_t in[3] = {0, 0, 0};
    for (size_t i = 0; i < num_in; ++i) {
      in[i] = node->inputs()->Get(i);
      ES_CHECK_OR_RETURN_ERROR(in[i] < num_values, Error::InvalidProgram,
                               "node %u (%s): input %zu is value %u, past the %u values", n, name,
                               i, in[i], num_values);
      ES_CHECK_OR_RETURN_ERROR(defined[in[i]], Error::InvalidProgram,
                               "node %u (%s): input value %u is read before any node writes it", n,
                               name, in[i]);
      ES_CHECK_OR_RETURN_ERROR(values_[in[i]].dtype == ScalarType::Float ||
                                   (op == fb::OpKind_FULLY_CONNECTED && i > 0),
                               Error::NotSupported,
                               "node %u (%s): input %zu (value %u) is HALF; only a fully "
                               "connected node's weight and bias may be",
                               n, name, i, in[i]);
    }
    const uint32_t out = node->outputs()->Get(0);
    ES_CHECK_OR_RETURN_ERROR(out < num_values, Error::InvalidProgram,
                             "node %u (%s): output is value %u, past the %u values", n, name, out,
                             num_values);
    ES_CHECK_OR_RETURN_ERROR(
        (values_[out].kind == fb::ValueKind_INTERMEDIATE ||
         values_[out].kind == fb::ValueKind_OUTPUT) &&
            !defined[out],
        Error::InvalidProgram,
        "node %u (%s): output value %u is an input, a constant, or written twice", n, name, out);
    for (size_t i = 0; i < num_in; ++i) {
      ES_CHECK_OR_RETURN_ERROR(in[i] != out, Error::InvalidProgram,
                               "node %u (%s) writes its own input value %u", n, name, out);
    }
    defined[out] = true;
    if (values_[out].kind == fb::ValueKind_INTERMEDIATE) {
      slot_offset[out] = add_slot(values_[out].numel);
    }
    const float out_min = node->output_min();
    const float out_max = node->output_max();
    ES_CHECK_OR_RETURN_ERROR(!std::isnan(out_min) && !std::isnan(out_max) && out_min <= out_max,
                             Error::InvalidProgram,
                             "node %u (%s) has output range [%g, %g]", n, name, out_min, out_max);
    const bool clamped = out_min != -inf || out_max != inf;
    bool clamp_folded = false;
    // Copies: new_scratch() below may grow values_.
    const ValueInfo x = values_[in[0]];
    const ValueInfo y = values_[out];

    Step step;
    step.node = n;
    step.a = in[0];
    step.out = out;
    xnn_status status = xnn_status_success;
    if (op == fb::OpKind_FULLY_CONNECTED) {
      const ValueInfo& w = values_[in[1]];
      ES_CHECK_OR_RETURN_ERROR(w.kind == fb::ValueKind_CONSTANT && w.dims.size() == 2,
                               Error::InvalidProgram,
                               "node %u (FULLY_CONNECTED): weight value %u must be a rank-2 "
                               "constant [out, in]",
                               n, in[1]);
      const size_t out_ch = w.dims[0];
      const size_t in_ch = w.dims[1];
      const bool f16 = w.dtype == ScalarType::Half;
      ES_CHECK_OR_RETURN_ERROR(num_in < 3 || values_[in[2]].dtype == w.dtype, Error::NotSupported,
                               "node %u (FULLY_CONNECTED): weight value %u is %s but bias value "
                               "%u is %s; both must be float32 or both HALF",
                               n, in[1], runtime::to_string(w.dtype), in[2],
                               runtime::to_string(values_[in[2]].dtype));
      ES_CHECK_OR_RETURN_ERROR(!x.dims.empty() && static_cast<size_t>(x.dims.back()) == in_ch,
                               Error::InvalidProgram,
                               "node %u (FULLY_CONNECTED): input %s does not end in the weight's "
                               "%zu input channels",
                               n, dims_string(x.dims).c_str(), in_ch);
      std::vector<int32_t> want = x.dims;
      want.back() = static_cast<int32_t>(out_ch);
      ES_CHECK_OR_RETURN_ERROR(y.dims == want, Error::InvalidProgram,
                               "node %u (FULLY_CONNECTED): output is %s, expected %s", n,
                               dims_string(y.dims).c_str(), dims_string(want).c_str());
      ConstantRef bias_ref;
      if (num_in == 3) {
        const ValueInfo& b = values_[in[2]];
        ES_CHECK_OR_RETURN_ERROR(b.kind == fb::ValueKind_CONSTANT && b.dims.size() == 1 &&
                                     static_cast<size_t>(b.dims[0]) == out_ch,
                                 Error::InvalidProgram,
                                 "node %u (FULLY_CONNECTED): bias value %u must be a constant "
                                 "[%zu]",
                                 n, in[2], out_ch);
        bias_ref = constant_ref(in[2]);
      }
      if (read_directly[in[1]]) ES_RETURN_IF_ERROR(ensure_pointer(in[1]));
      if (num_in == 3 && read_directly[in[2]]) ES_RETURN_IF_ERROR(ensure_pointer(in[2]));
      Result<PackedOperator*> packed = cache_->get_or_pack_fully_connected(
          map, constant_ref(in[1]), num_in == 3 ? &bias_ref : nullptr, in_ch, out_ch);
      if (!packed.ok()) return packed.status().WithContext("node %u (FULLY_CONNECTED)", n);
      step.kind = StepKind::kSharedFullyConnected;
      step.packed = *packed;
      step.batch = x.numel / in_ch;
      ES_RETURN_IF_ERROR(ensure_pointer(in[0]));
      if (f16) {
        // x (f32) -> half_in -> shared f16 operator -> half_out -> y (f32). The converts are this
        // handle's own; the scratch slots are in its arena.
        step.kind = StepKind::kSharedFullyConnectedF16;
        step.half_in = new_half_scratch(x.numel);
        step.half_out = new_half_scratch(y.numel);
        const xnn_status in_status =
            xnn_create_convert_nc_f32_f16(in_ch, in_ch, in_ch, /*flags=*/0, &step.convert_in);
        const xnn_status out_status = in_status != xnn_status_success
                                          ? in_status
                                          : xnn_create_convert_nc_f16_f32(
                                                out_ch, out_ch, out_ch, /*flags=*/0,
                                                &step.convert_out);
        // Pushed first: the destructor releases the packed entry and deletes made converts.
        steps_.push_back(step);
        ES_CHECK_OR_RETURN_ERROR(in_status == xnn_status_success &&
                                     out_status == xnn_status_success,
                                 Error::DelegateInitFailed,
                                 "node %u (FULLY_CONNECTED): XNNPACK could not create the "
                                 "f32<->f16 converts of an f16 fully connected op (status %d)",
                                 n, static_cast<int>(out_status));
      } else {
        steps_.push_back(step);
      }
    } else if (is_binary(op)) {
      const ValueInfo& b = values_[in[1]];
      std::vector<int32_t> want;
      ES_CHECK_OR_RETURN_ERROR(broadcast(x.dims, b.dims, &want), Error::InvalidProgram,
                               "node %u (%s): shapes %s and %s do not broadcast", n, name,
                               dims_string(x.dims).c_str(), dims_string(b.dims).c_str());
      ES_CHECK_OR_RETURN_ERROR(y.dims == want, Error::InvalidProgram,
                               "node %u (%s): output is %s, the broadcast is %s", n, name,
                               dims_string(y.dims).c_str(), dims_string(want).c_str());
      ES_RETURN_IF_ERROR(ensure_pointer(in[0]));
      ES_RETURN_IF_ERROR(ensure_pointer(in[1]));
      step.kind = StepKind::kBinary;
      step.b = in[1];
      step.a_rank = x.dims.size();
      step.b_rank = b.dims.size();
      for (size_t i = 0; i < x.dims.size(); ++i) step.a_shape[i] = x.dims[i];
      for (size_t i = 0; i < b.dims.size(); ++i) step.b_shape[i] = b.dims[i];
      switch (op) {
        case fb::OpKind_ADD:
          status = xnn_create_add_nd_f32(out_min, out_max, 0, &step.op);
          step.binary_setup = xnn_setup_add_nd_f32;
          clamp_folded = true;
          break;
        case fb::OpKind_SUBTRACT:
          status = xnn_create_subtract_nd_f32(out_min, out_max, 0, &step.op);
          step.binary_setup = xnn_setup_subtract_nd_f32;
          clamp_folded = true;
          break;
        case fb::OpKind_MULTIPLY:
          status = xnn_create_multiply_nd_f32(out_min, out_max, 0, &step.op);
          step.binary_setup = xnn_setup_multiply_nd_f32;
          clamp_folded = true;
          break;
        case fb::OpKind_DIVIDE:
          status = xnn_create_divide_nd_f32(out_min, out_max, 0, &step.op);
          step.binary_setup = xnn_setup_divide_nd_f32;
          clamp_folded = true;
          break;
        case fb::OpKind_MAXIMUM:
          status = xnn_create_maximum_nd_f32(0, &step.op);
          step.binary_setup = xnn_setup_maximum_nd_f32;
          break;
        default:  // MINIMUM
          status = xnn_create_minimum_nd_f32(0, &step.op);
          step.binary_setup = xnn_setup_minimum_nd_f32;
          break;
      }
      // Pushed before the status check so that the destructor deletes a half-made operator.
      steps_.push_back(step);
    } else {
      // Unary: same shape in and out, except COPY (a reshape: same element count).
      if (op == fb::OpKind_COPY) {
        ES_CHECK_OR_RETURN_ERROR(x.numel == y.numel, Error::InvalidProgram,
                                 "node %u (COPY): %s and %s hold different element counts", n,
                                 dims_string(x.dims).c_str(), dims_string(y.dims).c_str());
      } else {
        ES_CHECK_OR_RETURN_ERROR(x.dims == y.dims, Error::InvalidProgram,
                                 "node %u (%s): output %s differs from input %s", n, name,
                                 dims_string(y.dims).c_str(), dims_string(x.dims).c_str());
      }
      ES_RETURN_IF_ERROR(ensure_pointer(in[0]));
      // Elementwise ops see the tensor as one row of numel channels; softmax needs rows of the
      // last dimension.
      size_t channels = x.numel;
      if (op == fb::OpKind_SOFTMAX) channels = x.dims.empty() ? 1 : x.dims.back();
      step.kind = StepKind::kUnary;
      step.batch = x.numel / channels;
      const float alpha = node->alpha();
      switch (op) {
        case fb::OpKind_CLAMP:
          status = xnn_create_clamp_nc_f32(channels, channels, channels, out_min, out_max, 0,
                                           &step.op);
          step.unary_setup = xnn_setup_clamp_nc_f32;
          clamp_folded = true;
          break;
        case fb::OpKind_SIGMOID:
        case fb::OpKind_SILU:
          status = xnn_create_sigmoid_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_sigmoid_nc_f32;
          break;
        case fb::OpKind_SOFTMAX:
          status = xnn_create_softmax_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_softmax_nc_f32;
          break;
        case fb::OpKind_HARDSWISH:
          status = xnn_create_hardswish_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_hardswish_nc_f32;
          break;
        case fb::OpKind_LEAKY_RELU:
          ES_CHECK_OR_RETURN_ERROR(std::isfinite(alpha), Error::InvalidProgram,
                                   "node %u (LEAKY_RELU) has slope %g", n, alpha);
          status = xnn_create_leaky_relu_nc_f32(channels, channels, channels, alpha, 0, &step.op);
          step.unary_setup = xnn_setup_leaky_relu_nc_f32;
          break;
        case fb::OpKind_ELU:
          ES_CHECK_OR_RETURN_ERROR(std::isfinite(alpha) && alpha > 0.0f, Error::InvalidProgram,
                                   "node %u (ELU) has alpha %g; XNNPACK needs a positive one", n,
                                   alpha);
          status = xnn_create_elu_nc_f32(channels, channels, channels, alpha, 0, &step.op);
          step.unary_setup = xnn_setup_elu_nc_f32;
          break;
        case fb::OpKind_ABS:
          status = xnn_create_abs_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_abs_nc_f32;
          break;
        case fb::OpKind_NEGATE:
          status = xnn_create_negate_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_negate_nc_f32;
          break;
        case fb::OpKind_SQUARE:
          status = xnn_create_square_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_square_nc_f32;
          break;
        case fb::OpKind_SQRT:
          status = xnn_create_square_root_nc_f32(channels, channels, channels, 0, &step.op);
          step.unary_setup = xnn_setup_square_root_nc_f32;
          break;
        default:  // COPY
          status = xnn_create_copy_nc_x32(channels, channels, channels, 0, &step.op);
          step.unary_setup = setup_copy;
          break;
      }
      if (op == fb::OpKind_SILU) {
        // XNNPACK has no SiLU: y = x * sigmoid(x), the sigmoid in a scratch slot of the arena.
        const uint32_t scratch = new_scratch(x);
        step.out = scratch;
        steps_.push_back(step);
        ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                                 "node %u (SILU): XNNPACK could not create sigmoid (status %d)", n,
                                 static_cast<int>(status));
        Step mul;
        mul.node = n;
        mul.kind = StepKind::kBinary;
        mul.a = in[0];
        mul.b = scratch;
        mul.out = out;
        mul.a_rank = mul.b_rank = x.dims.size();
        for (size_t i = 0; i < x.dims.size(); ++i) mul.a_shape[i] = mul.b_shape[i] = x.dims[i];
        status = xnn_create_multiply_nd_f32(out_min, out_max, 0, &mul.op);
        mul.binary_setup = xnn_setup_multiply_nd_f32;
        clamp_folded = true;
        steps_.push_back(mul);
      } else {
        steps_.push_back(step);
      }
    }
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                             "node %u (%s): XNNPACK could not create the operator (status %d)", n,
                             name, static_cast<int>(status));
    if (clamped && !clamp_folded) {
      // The op cannot clamp itself (or is shared, where a clamp would split the cache entry):
      // clamp its output in place.
      Step clamp;
      clamp.node = n;
      clamp.kind = StepKind::kUnary;
      clamp.a = out;
      clamp.out = out;
      clamp.batch = 1;
      status = xnn_create_clamp_nc_f32(y.numel, y.numel, y.numel, out_min, out_max, 0, &clamp.op);
      clamp.unary_setup = xnn_setup_clamp_nc_f32;
      steps_.push_back(clamp);
      ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateInitFailed,
                               "node %u (%s): XNNPACK could not create the output clamp "
                               "(status %d)",
                               n, name, static_cast<int>(status));
    }
  }
  for (uint32_t i = 0; i < num_outputs; ++i) {
    ES_CHECK_OR_RETURN_ERROR(defined[outputs_[i]], Error::InvalidProgram,
                             "no node writes delegate output %u (value %u)", i, outputs_[i]);
  }

  ES_CHECK_OR_RETURN_ERROR(arena_floats <= kMaxNumel, Error::InvalidProgram,
                           "XNNPACK graph needs %zu bytes of intermediates, more than %llu",
                           arena_floats * sizeof(float),
                           static_cast<unsigned long long>(kMaxNumel * sizeof(float)));
  // One arena for every intermediate; sizes are static, so this is the last allocation.
  arena_.assign(arena_floats, 0.0f);
  for (size_t id = 0; id < slot_offset.size(); ++id) {
    if (slot_offset[id] != SIZE_MAX) pointers_[id] = arena_.data() + slot_offset[id];
  }
  return Status();
}

Status XnnExecutor::execute(Span<EValue* const> args) {
  const size_t want = inputs_.size() + outputs_.size();
  ES_CHECK_OR_RETURN_ERROR(args.size() == want, Error::InvalidArgument,
                           "XNNPACK delegate got %zu args, its graph has %zu inputs + %zu outputs",
                           args.size(), inputs_.size(), outputs_.size());
  for (size_t i = 0; i < want; ++i) {
    const bool is_input = i < inputs_.size();
    const uint32_t id = is_input ? inputs_[i] : outputs_[i - inputs_.size()];
    const EValue* arg = args[i];
    ES_CHECK_OR_RETURN_ERROR(arg != nullptr && arg->is_tensor(), Error::InvalidArgument,
                             "XNNPACK delegate arg %zu is not a tensor", i);
    const runtime::Tensor& t = arg->to_tensor();
    ES_CHECK_OR_RETURN_ERROR(t.scalar_type() == ScalarType::Float, Error::InvalidArgument,
                             "XNNPACK delegate arg %zu has dtype %s, expected Float", i,
                             runtime::to_string(t.scalar_type()));
    const std::vector<int32_t>& dims = values_[id].dims;
    bool same = t.dim() == dims.size();
    for (size_t d = 0; same && d < dims.size(); ++d) same = t.size(d) == dims[d];
    ES_CHECK_OR_RETURN_ERROR(same, Error::InvalidArgument,
                             "XNNPACK delegate arg %zu (%s %zu) has a shape other than the "
                             "graph's (rank %zu)",
                             i, is_input ? "input" : "output", is_input ? i : i - inputs_.size(),
                             dims.size());
    ES_CHECK_OR_RETURN_ERROR(t.mutable_data() != nullptr, Error::InvalidArgument,
                             "XNNPACK delegate arg %zu has no data", i);
    pointers_[id] = t.mutable_data();
  }
  pthreadpool_t pool = threadpool();
  for (const Step& step : steps_) {
    const float* a = static_cast<const float*>(pointers_[step.a]);
    float* out = static_cast<float*>(pointers_[step.out]);
    if (step.kind == StepKind::kSharedFullyConnected) {
      // The shared operator locks itself for setup + run.
      ES_RETURN_IF_ERROR(step.packed->run_fully_connected(step.batch, a, out));
      continue;
    }
    if (step.kind == StepKind::kSharedFullyConnectedF16) {
      void* half_in = pointers_[step.half_in];
      void* half_out = pointers_[step.half_out];
      xnn_status status =
          xnn_setup_convert_nc_f32_f16(step.convert_in, step.batch, a, half_in, pool);
      if (status == xnn_status_success) status = xnn_run_operator(step.convert_in, pool);
      ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                               "XNNPACK f32->f16 convert of node %u's input failed (status %d)",
                               step.node, static_cast<int>(status));
      ES_RETURN_IF_ERROR(step.packed->run_fully_connected_f16(step.batch, half_in, half_out));
      status = xnn_setup_convert_nc_f16_f32(step.convert_out, step.batch, half_out, out, pool);
      if (status == xnn_status_success) status = xnn_run_operator(step.convert_out, pool);
      ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                               "XNNPACK f16->f32 convert of node %u's output failed (status %d)",
                               step.node, static_cast<int>(status));
      continue;
    }
    xnn_status status;
    if (step.kind == StepKind::kBinary) {
      status = step.binary_setup(step.op, step.a_rank, step.a_shape.data(), step.b_rank,
                                 step.b_shape.data(), a,
                                 static_cast<const float*>(pointers_[step.b]), out, pool);
    } else {
      status = step.unary_setup(step.op, step.batch, a, out, pool);
    }
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                             "XNNPACK setup of node %u failed (status %d)", step.node,
                             static_cast<int>(status));
    status = xnn_run_operator(step.op, pool);
    ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                             "XNNPACK run of node %u failed (status %d)", step.node,
                             static_cast<int>(status));
  }
  return Status();
}

}  // namespace xnnpack
}  // namespace edgeshare
