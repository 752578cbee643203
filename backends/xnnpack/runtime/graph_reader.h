// Reading a delegate blob: FlatBuffer verification and the checked value table of an XNNPACK graph
// (xnnpack_graph.fbs). Nothing here knows any op: nodes are checked by graph_compiler.h.
//
//   ES_ASSIGN_OR_RETURN(const schema::Graph* graph, verify_graph(blob, size));
//   GraphValues values;
//   ES_RETURN_IF_ERROR(read_values(*graph, &values));
//   // values.values[id].dims, values.inputs[i] (value id of delegate input i), ...
//
// Errors: InvalidProgram (malformed or inconsistent blob: which value and why), NotSupported (a
// graph version, dtype or rank this delegate lacks).
// Thread-safety: free functions over their arguments only.
// Ownership: the returned Graph points into the blob, valid while the blob is; GraphValues owns
// plain copies and never points into the blob.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_READER_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/compiled_graph.h"
#include "edgeshare/backends/xnnpack/xnnpack_graph_generated.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace xnnpack {

// Graph versions this delegate reads (0: the field left unset; 2: symbolic dims).
constexpr uint32_t kMaxGraphVersion = 2;
// Bounds that keep size arithmetic far from overflow and a hostile blob from asking for absurd
// memory: 2^28 floats (1 GiB) per value and for the whole arena.
constexpr uint64_t kMaxNumel = uint64_t{1} << 28;
constexpr size_t kMaxValues = size_t{1} << 20;

// The checked value table of one graph.
struct GraphValues {
  std::vector<ValueInfo> values;
  std::vector<uint32_t> inputs;   // Value id per delegate input.
  std::vector<uint32_t> outputs;  // Value id per delegate output.
  // Per value id: readable before any node runs (inputs and constants).
  std::vector<bool> defined;
  std::vector<SymbolInfo> symbols;  // Graph.symbols; empty for a static graph.
};

// Verifies the FlatBuffer (before any accessor reads it), its identifier and version, and that it
// has values and nodes within kMaxValues. Errors: InvalidProgram, NotSupported (version).
runtime::Result<const schema::Graph*> verify_graph(const void* blob, size_t size);

// Checks every value (kind, dtype, dims and their symbols, io slot, constant payload), that every
// io slot is taken once and that every symbol is bound by some input dim. Errors: InvalidProgram,
// NotSupported (dtype, rank).
runtime::Status read_values(const schema::Graph& graph, GraphValues* out);

// "[2, 3]", for messages.
std::string dims_string(const std::vector<int32_t>& dims);
// "[1, sym0, 64]": a ValueInfo::shape, symbol k as "sym<k>", for messages.
std::string dims_string(const std::vector<int64_t>& shape);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_READER_H_
