// The XNNPACK delegate's op rows: one row per OpKind of xnnpack_graph.fbs, kept in op_rows.inc.
// A row names the kind, its arity, whether its inputs past the first are packed weights, its shape
// rule (checks a node's value shapes and attributes) and its node builder (creates the XNNPACK
// operators and adds the node's steps). GraphCompiler (graph_compiler.h) looks rows up by kind and
// has no op-specific code of its own; op_rows_test checks the rows against the .fbs enum.
//
//   const OpRow* row = find_op_row(node.op());   // nullptr: a kind this delegate lacks
//   ES_RETURN_IF_ERROR(row->check_shapes(context));
//   ES_RETURN_IF_ERROR(row->build(context));
//   for (const OpRow& row : op_rows()) printf("%s\n", row.name);
//
// Errors: shape rules return InvalidProgram naming the node; builders also DelegateInitFailed and
// the WeightsCache's errors.
// Thread-safety: the table is constant; rows may be read from any thread.
// Ownership: rows and their names are static.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_OP_ROWS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_OP_ROWS_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/backends/xnnpack/xnnpack_graph_generated.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace xnnpack {

struct NodeContext;  // graph_compiler.h

// Checks a node's shapes and attributes. Errors: InvalidProgram.
using ShapeRule = runtime::Status (*)(const NodeContext& node);
// Creates the node's operators and adds its steps to the compiler.
using NodeBuilder = runtime::Status (*)(NodeContext& node);

// What a node does with its inputs past the first.
enum class OpInputs : uint8_t {
  kRead,           // Every input is read at run time (float32).
  kPackedWeights,  // Inputs 1.. are constants packed at init (a weight format's, fc_format.h).
  kReadWeight,     // Input 1 is a weight read as stored at run time, in a weight format's dtype
                   // (fc_format.h: f32, f16w, or qc8w with its float scales as input 2).
};

constexpr size_t kMaxNodeInputs = 3;

struct OpRow {
  schema::OpKind kind;
  const char* name;  // EnumNameOpKind(kind).
  uint8_t min_inputs;
  uint8_t max_inputs;  // At most kMaxNodeInputs.
  OpInputs inputs;
  ShapeRule check_shapes;
  NodeBuilder build;
};

// Every row, in op_rows.inc's order.
runtime::Span<const OpRow> op_rows();

// The row of `kind` (a raw byte from the blob), or nullptr.
const OpRow* find_op_row(uint8_t kind);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_OP_ROWS_H_
