#include "edgeshare/backends/xnnpack/runtime/graph_reader.h"

#include <xnnpack.h>

#include "edgeshare/backends/xnnpack/runtime/fc_format.h"
#include "edgeshare/runtime/core/tensor.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Result;
using runtime::ScalarType;
using runtime::Status;

namespace fb = ::edgeshare::xnnpack::schema;

static_assert(fb::ValueKind_INTERMEDIATE == 0, "ValueInfo::kind defaults to INTERMEDIATE");

namespace {

// The runtime dtype of a schema dtype, or false when the delegate runs no value of that dtype.
bool runtime_dtype(edgeshare::schema::ScalarType dtype, ScalarType* out) {
  switch (dtype) {
    case edgeshare::schema::ScalarType_FLOAT:
      *out = ScalarType::Float;
      return true;
    case edgeshare::schema::ScalarType_HALF:
      *out = ScalarType::Half;
      return true;
    case edgeshare::schema::ScalarType_CHAR:
      *out = ScalarType::Char;
      return true;
    case edgeshare::schema::ScalarType_BYTE:
      *out = ScalarType::Byte;
      return true;
    default:
      return false;
  }
}

// Kind, dtype and format: float32, or a fully connected weight format's dtype (fc_format.h): for
// named constants the format of that dtype and quant scheme, with its scales and group; for
// delegate inputs (a weight read as stored, whose scales are an input of their own) the first
// format of the dtype, with no quant scheme. The nodes check each use.
Status read_kind_and_dtype(uint32_t id, const fb::Value& v, ValueInfo* info) {
  ES_CHECK_OR_RETURN_ERROR(v.kind() >= fb::ValueKind_MIN && v.kind() <= fb::ValueKind_MAX,
                           Error::InvalidProgram, "value %u has unknown kind %d", id,
                           static_cast<int>(v.kind()));
  info->kind = static_cast<uint8_t>(v.kind());
  const bool named = v.kind() == fb::ValueKind_CONSTANT && v.key() != nullptr;
  const bool input = v.kind() == fb::ValueKind_INPUT;
  ScalarType dtype = ScalarType::Float;
  const bool known = runtime_dtype(v.dtype(), &dtype);
  ES_CHECK_OR_RETURN_ERROR(
      known && (dtype == ScalarType::Float || named || input), Error::NotSupported,
      "value %u has dtype %d; the XNNPACK delegate runs float32, and HALF, "
      "CHAR (QC8W, QB8W) or BYTE (QC4W, QB5W) only for fully connected weights",
      id, static_cast<int>(v.dtype()));
  if (input) {
    ES_CHECK_OR_RETURN_ERROR(v.quant_scheme() == fb::QuantScheme_NONE, Error::InvalidProgram,
                             "input value %u has quant_scheme %d; a delegate input is read as "
                             "stored (its scales are an input of their own)",
                             id, static_cast<int>(v.quant_scheme()));
    info->dtype = dtype;
    info->format = fc_format(dtype);
    return Status();
  }
  const FcFormat* format = fc_format(dtype, static_cast<int8_t>(v.quant_scheme()));
  ES_CHECK_OR_RETURN_ERROR(format != nullptr, Error::InvalidProgram,
                           "value %u has dtype %d and quant_scheme %d; no weight format has both "
                           "(%s weights have quant_scheme %d)",
                           id, static_cast<int>(v.dtype()), static_cast<int>(v.quant_scheme()),
                           fc_format(dtype)->name,
                           static_cast<int>(fc_format(dtype)->quant_scheme));
  if (format->has_scales) {
    ES_CHECK_OR_RETURN_ERROR(v.scales_key() != nullptr && v.scales_key()->size() > 0 &&
                                 v.scales_digest() != nullptr && v.scales_digest()->size() == 32,
                             Error::InvalidProgram,
                             "%s constant value %u ('%s') needs a scales key and its 32-byte "
                             "SHA-256 digest",
                             format->name, id, v.key()->c_str());
  }
  if (format->group_scales) {
    const uint32_t group = v.group_size();
    ES_CHECK_OR_RETURN_ERROR(
        format->takes_group(group) && v.dims() != nullptr && v.dims()->size() == 2 &&
            v.dims()->Get(1) % group == 0,
        Error::InvalidProgram,
        "%s constant value %u ('%s') has group size %u; it must be %s and divide its [out, in] "
        "weight's input size",
        format->name, id, v.key()->c_str(), group, format->group_sizes);
  }
  info->dtype = dtype;
  info->format = format;
  return Status();
}

// dims, and dim_symbols when present: a symbolic dim must hold its symbol's max.
Status read_dims(uint32_t id, const fb::Value& v, const std::vector<SymbolInfo>& symbols,
                 ValueInfo* info) {
  if (v.dims() == nullptr) {
    ES_CHECK_OR_RETURN_ERROR(v.dim_symbols() == nullptr || v.dim_symbols()->size() == 0,
                             Error::InvalidProgram, "value %u has dim_symbols but no dims", id);
    return Status();
  }
  ES_CHECK_OR_RETURN_ERROR(
      v.dims()->size() <= XNN_MAX_TENSOR_DIMS && v.dims()->size() <= runtime::Tensor::kMaxDims,
      Error::NotSupported, "value %u has rank %u, more than %d", id, v.dims()->size(),
      XNN_MAX_TENSOR_DIMS);
  const auto* syms = v.dim_symbols();
  ES_CHECK_OR_RETURN_ERROR(syms == nullptr || syms->size() == v.dims()->size(),
                           Error::InvalidProgram, "value %u has %u dims but %u dim_symbols", id,
                           v.dims()->size(), syms == nullptr ? 0u : syms->size());
  uint64_t numel = 1;
  for (uint32_t i = 0; i < v.dims()->size(); ++i) {
    const uint32_t d = v.dims()->Get(i);
    ES_CHECK_OR_RETURN_ERROR(d > 0 && d <= static_cast<uint32_t>(INT32_MAX), Error::InvalidProgram,
                             "value %u has a dimension of %u", id, d);
    numel *= d;
    ES_CHECK_OR_RETURN_ERROR(numel <= kMaxNumel, Error::InvalidProgram,
                             "value %u has too many elements", id);
    info->dims.push_back(static_cast<int32_t>(d));
    const uint32_t k = syms == nullptr ? 0 : syms->Get(i);
    if (k == 0) {
      info->shape.push_back(d);
      continue;
    }
    ES_CHECK_OR_RETURN_ERROR(k <= symbols.size(), Error::InvalidProgram,
                             "value %u: dim %u names symbol %u of %zu", id, i, k, symbols.size());
    const SymbolInfo& symbol = symbols[k - 1];
    ES_CHECK_OR_RETURN_ERROR(static_cast<int32_t>(d) == symbol.max, Error::InvalidProgram,
                             "value %u: dim %u is symbol '%s' (max %d) but holds %u", id, i,
                             symbol.name.c_str(), symbol.max, d);
    ES_CHECK_OR_RETURN_ERROR(v.kind() != fb::ValueKind_CONSTANT, Error::InvalidProgram,
                             "constant value %u has a symbolic dim", id);
    info->shape.push_back(-static_cast<int64_t>(k));
    info->dynamic = true;
  }
  info->numel = static_cast<size_t>(numel);
  return Status();
}

Status read_io_slot(uint32_t id, const fb::Value& v, GraphValues* out) {
  const bool is_input = v.kind() == fb::ValueKind_INPUT;
  std::vector<uint32_t>& slots = is_input ? out->inputs : out->outputs;
  ES_CHECK_OR_RETURN_ERROR(v.io_index() < slots.size() && slots[v.io_index()] == UINT32_MAX,
                           Error::InvalidProgram,
                           "value %u: %s io_index %u is out of range or used twice", id,
                           is_input ? "input" : "output", v.io_index());
  slots[v.io_index()] = id;
  out->defined[id] = is_input;
  return Status();
}

Status read_constant(uint32_t id, const fb::Value& v, const ValueInfo& info) {
  const bool has_key = v.key() != nullptr;
  const bool has_inline = v.inline_data() != nullptr;
  ES_CHECK_OR_RETURN_ERROR(has_key != has_inline, Error::InvalidProgram,
                           "constant value %u must have exactly one of key and inline_data", id);
  if (has_inline) {
    ES_CHECK_OR_RETURN_ERROR(v.inline_data()->size() == info.numel * sizeof(float),
                             Error::InvalidProgram,
                             "constant value %u has %u inline bytes, its dims need %zu", id,
                             v.inline_data()->size(), info.numel * sizeof(float));
    return Status();
  }
  ES_CHECK_OR_RETURN_ERROR(v.key()->size() > 0, Error::InvalidProgram,
                           "constant value %u has an empty key", id);
  ES_CHECK_OR_RETURN_ERROR(v.digest() != nullptr && v.digest()->size() == 32, Error::InvalidProgram,
                           "constant value %u ('%s') needs a 32-byte SHA-256 digest", id,
                           v.key()->c_str());
  return Status();
}

Status read_value(uint32_t id, const fb::Value& v, GraphValues* out) {
  ValueInfo& info = out->values[id];
  ES_RETURN_IF_ERROR(read_kind_and_dtype(id, v, &info));
  ES_RETURN_IF_ERROR(read_dims(id, v, out->symbols, &info));
  switch (v.kind()) {
    case fb::ValueKind_INPUT:
    case fb::ValueKind_OUTPUT:
      return read_io_slot(id, v, out);
    case fb::ValueKind_CONSTANT:
      out->defined[id] = true;
      return read_constant(id, v, info);
    default:  // INTERMEDIATE
      return Status();
  }
}

Status read_symbols(const fb::Graph& graph, std::vector<SymbolInfo>* out) {
  out->clear();
  if (graph.symbols() == nullptr || graph.symbols()->size() == 0) return Status();
  ES_CHECK_OR_RETURN_ERROR(graph.version() >= 2, Error::InvalidProgram,
                           "XNNPACK graph version %u has symbols; symbolic dims need version 2",
                           graph.version());
  for (uint32_t k = 0; k < graph.symbols()->size(); ++k) {
    const fb::Symbol* s = graph.symbols()->Get(k);
    ES_CHECK_OR_RETURN_ERROR(s->name() != nullptr && s->name()->size() > 0 && s->max() > 0 &&
                                 s->max() <= static_cast<uint32_t>(INT32_MAX),
                             Error::InvalidProgram, "symbol %u has no name or a max of %u", k,
                             s->max());
    out->push_back(SymbolInfo{s->name()->str(), static_cast<int32_t>(s->max())});
  }
  return Status();
}

// A symbol no input dim binds would have no size at execute.
Status check_symbols_bound(const GraphValues& g) {
  std::vector<bool> bound(g.symbols.size(), false);
  for (uint32_t id : g.inputs) {
    for (int64_t d : g.values[id].shape) {
      if (d < 0) bound[static_cast<size_t>(-d - 1)] = true;
    }
  }
  for (size_t k = 0; k < bound.size(); ++k) {
    ES_CHECK_OR_RETURN_ERROR(bound[k], Error::InvalidProgram,
                             "symbol '%s' is the size of no input dim", g.symbols[k].name.c_str());
  }
  return Status();
}

}  // namespace

Result<const fb::Graph*> verify_graph(const void* blob, size_t size) {
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
  ES_CHECK_OR_RETURN_ERROR(
      graph->values()->size() < kMaxValues && graph->nodes()->size() < kMaxValues,
      Error::InvalidProgram, "XNNPACK graph has too many values or nodes");
  return graph;
}

Status read_values(const fb::Graph& graph, GraphValues* out) {
  const auto& fvalues = *graph.values();
  const uint32_t num_values = fvalues.size();
  const uint32_t num_inputs = graph.num_inputs();
  const uint32_t num_outputs = graph.num_outputs();
  ES_CHECK_OR_RETURN_ERROR(num_inputs <= num_values && num_outputs <= num_values && num_outputs > 0,
                           Error::InvalidProgram,
                           "XNNPACK graph declares %u inputs and %u outputs over %u values",
                           num_inputs, num_outputs, num_values);
  out->inputs.assign(num_inputs, UINT32_MAX);
  out->outputs.assign(num_outputs, UINT32_MAX);
  out->values.assign(num_values, ValueInfo());
  out->defined.assign(num_values, false);
  ES_RETURN_IF_ERROR(read_symbols(graph, &out->symbols));
  for (uint32_t id = 0; id < num_values; ++id) {
    ES_RETURN_IF_ERROR(read_value(id, *fvalues.Get(id), out));
  }
  for (uint32_t i = 0; i < num_inputs; ++i) {
    ES_CHECK_OR_RETURN_ERROR(out->inputs[i] != UINT32_MAX, Error::InvalidProgram,
                             "no value is delegate input %u", i);
  }
  for (uint32_t i = 0; i < num_outputs; ++i) {
    ES_CHECK_OR_RETURN_ERROR(out->outputs[i] != UINT32_MAX, Error::InvalidProgram,
                             "no value is delegate output %u", i);
  }
  return check_symbols_bound(*out);
}

std::string dims_string(const std::vector<int32_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string dims_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += shape[i] < 0 ? "sym" + std::to_string(-shape[i] - 1) : std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace xnnpack
}  // namespace edgeshare
