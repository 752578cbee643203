// GraphBuilder: test-only helper that writes XNNPACK delegate graphs (xnnpack_graph.fbs) with the
// generated FlatBuffers builder API, the way the exporter's blobs look.
//
//   GraphBuilder g;
//   uint32_t x = g.input({5, 64});
//   uint32_t w = g.named("layers.0.weight", {32, 64}, map.add("layers.0.weight", weights));
//   uint32_t y = g.output({5, 32});
//   g.node(schema::OpKind_FULLY_CONNECTED, {x, w}, {y});
//   std::vector<uint8_t> blob = g.build();
//
// Symbolic dims (a dynamic token count): `uint32_t t = g.symbol("s0", 16);` then
// `g.input({1, 16, 64}, {0, t, 0})` (dim 1 is symbol s0, its max 16 in dims) and
// `g.build(/*version=*/2)`.
//
// Inputs and outputs get io_index in the order they are added. Nothing is validated here: tests
// build broken graphs on purpose. Not thread-safe; owns nothing beyond its own vectors.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_BUILDER_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_BUILDER_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/xnnpack_graph_generated.h"
#include "edgeshare/runtime/core/named_data_map.h"

namespace edgeshare {
namespace xnnpack {

class GraphBuilder {
 public:
  // dim_symbols: empty (every dim exact) or one entry per dim, 0 or a symbol() number.
  uint32_t input(std::vector<uint32_t> dims, std::vector<uint32_t> dim_symbols = {}) {
    return add(schema::ValueKind_INPUT, std::move(dims), num_inputs_++, std::move(dim_symbols));
  }
  uint32_t output(std::vector<uint32_t> dims, std::vector<uint32_t> dim_symbols = {}) {
    return add(schema::ValueKind_OUTPUT, std::move(dims), num_outputs_++, std::move(dim_symbols));
  }
  uint32_t intermediate(std::vector<uint32_t> dims, std::vector<uint32_t> dim_symbols = {}) {
    return add(schema::ValueKind_INTERMEDIATE, std::move(dims), 0, std::move(dim_symbols));
  }
  // A new symbol; the number to put in dim_symbols (1 for the first).
  uint32_t symbol(const std::string& name, uint32_t max) {
    symbols_.push_back(Symbol{name, max});
    return static_cast<uint32_t>(symbols_.size());
  }
  uint32_t named(const std::string& key, std::vector<uint32_t> dims,
                 const runtime::Digest& digest) {
    uint32_t id = add(schema::ValueKind_CONSTANT, std::move(dims), 0);
    values_[id].key = key;
    values_[id].digest.assign(digest.bytes.begin(), digest.bytes.end());
    return id;
  }
  uint32_t inline_constant(std::vector<uint32_t> dims, const std::vector<float>& data) {
    uint32_t id = add(schema::ValueKind_CONSTANT, std::move(dims), 0);
    values_[id].inline_data.resize(data.size() * sizeof(float));
    std::memcpy(values_[id].inline_data.data(), data.data(), values_[id].inline_data.size());
    return id;
  }
  void node(schema::OpKind op, std::vector<uint32_t> inputs, std::vector<uint32_t> outputs,
            float output_min = -std::numeric_limits<float>::infinity(),
            float output_max = std::numeric_limits<float>::infinity(), float alpha = 0.0f) {
    nodes_.push_back(
        Node{op, std::move(inputs), std::move(outputs), output_min, output_max, alpha});
  }

  // Raw access for tests that corrupt a value on purpose.
  void set_dtype(uint32_t id, int8_t dtype) { values_[id].dtype = dtype; }
  void set_io_index(uint32_t id, uint32_t io_index) { values_[id].io_index = io_index; }
  void set_digest(uint32_t id, std::vector<uint8_t> digest) { values_[id].digest = digest; }
  // Makes a named constant an int8 (QC8W) weight whose float scales are under `scales_key`.
  void set_qc8w(uint32_t id, const std::string& scales_key, const runtime::Digest& scales_digest) {
    values_[id].dtype = edgeshare::schema::ScalarType_CHAR;
    values_[id].quant_scheme = schema::QuantScheme_QC8W;
    values_[id].scales_key = scales_key;
    values_[id].scales_digest.assign(scales_digest.bytes.begin(), scales_digest.bytes.end());
  }

  // Makes a named constant an int4 (QC4W) weight in groups of `group_size` whose float16 scales
  // are under `scales_key`.
  void set_qc4w(uint32_t id, const std::string& scales_key, const runtime::Digest& scales_digest,
                uint32_t group_size) {
    set_qc8w(id, scales_key, scales_digest);
    values_[id].dtype = edgeshare::schema::ScalarType_BYTE;
    values_[id].quant_scheme = schema::QuantScheme_QC4W;
    values_[id].group_size = group_size;
  }

  std::vector<uint8_t> build(uint32_t version = 1) const {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<schema::Value>> values;
    for (const Value& v : values_) {
      values.push_back(schema::CreateValueDirect(
          fbb, v.kind, static_cast<edgeshare::schema::ScalarType>(v.dtype), &v.dims, v.io_index,
          v.key.empty() ? nullptr : v.key.c_str(), v.digest.empty() ? nullptr : &v.digest,
          v.inline_data.empty() ? nullptr : &v.inline_data,
          v.dim_symbols.empty() ? nullptr : &v.dim_symbols, v.quant_scheme,
          v.scales_key.empty() ? nullptr : v.scales_key.c_str(),
          v.scales_digest.empty() ? nullptr : &v.scales_digest, v.group_size));
    }
    std::vector<flatbuffers::Offset<schema::Node>> nodes;
    for (const Node& n : nodes_) {
      nodes.push_back(schema::CreateNodeDirect(fbb, n.op, &n.inputs, &n.outputs, n.output_min,
                                               n.output_max, n.alpha));
    }
    std::vector<flatbuffers::Offset<schema::Symbol>> symbols;
    for (const Symbol& sym : symbols_) {
      symbols.push_back(schema::CreateSymbolDirect(fbb, sym.name.c_str(), sym.max));
    }
    auto graph = schema::CreateGraphDirect(fbb, version, &values, &nodes, num_inputs_, num_outputs_,
                                           symbols.empty() ? nullptr : &symbols);
    schema::FinishGraphBuffer(fbb, graph);
    return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  }

 private:
  struct Value {
    schema::ValueKind kind;
    int8_t dtype = edgeshare::schema::ScalarType_FLOAT;
    std::vector<uint32_t> dims;
    uint32_t io_index = 0;
    std::string key;
    std::vector<uint8_t> digest;
    std::vector<uint8_t> inline_data;
    std::vector<uint32_t> dim_symbols;
    schema::QuantScheme quant_scheme = schema::QuantScheme_NONE;
    std::string scales_key;
    std::vector<uint8_t> scales_digest;
    uint32_t group_size = 0;
  };
  struct Symbol {
    std::string name;
    uint32_t max;
  };
  struct Node {
    schema::OpKind op;
    std::vector<uint32_t> inputs;
    std::vector<uint32_t> outputs;
    float output_min;
    float output_max;
    float alpha;
  };
  uint32_t add(schema::ValueKind kind, std::vector<uint32_t> dims, uint32_t io_index,
               std::vector<uint32_t> dim_symbols = {}) {
    Value v;
    v.kind = kind;
    v.dims = std::move(dims);
    v.dim_symbols = std::move(dim_symbols);
    v.io_index = io_index;
    values_.push_back(std::move(v));
    return static_cast<uint32_t>(values_.size() - 1);
  }

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<Symbol> symbols_;
  uint32_t num_inputs_ = 0;
  uint32_t num_outputs_ = 0;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_BUILDER_H_
