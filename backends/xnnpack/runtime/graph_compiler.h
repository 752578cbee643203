// GraphCompiler: turns a verified XNNPACK graph (graph_reader.h) into a CompiledGraph, the steps
// (steps.h) and memory an XnnExecutor runs. It checks what every node shares (arity, value ids,
// dtypes, single writes, output range), then hands the node to its op row (op_rows.h), which checks
// shapes and builds the steps through the small API below; the six nodes of an RMS norm are
// checked one by one and build one step (find_rms_norms). Intermediates and scratch values get
// slots in one arena sized at the end; named constants that an operator reads at run time are
// retained from the WeightsCache, inline ones copied; the fully connected entries of all nodes are
// asked of the WeightsCache in one batch after the last node, so that a first load packs them all
// on every thread of the delegate's pool.
//
//   CompiledGraph compiled;
//   GraphCompiler compiler(*graph, &cache, map, &compiled);
//   ES_RETURN_IF_ERROR(compiler.compile(std::move(values)));   // values: read_values(*graph, ...)
//
// Errors: compile() returns InvalidProgram (which node and why), NotSupported (an op kind without a
// row, a HALF input where none may be), DelegateInitFailed (XNNPACK refused an operator) and the
// WeightsCache's errors. On failure `compiled` holds what was made so far; destroying it releases
// everything.
// Thread-safety: one compiler on one thread; the WeightsCache may be shared.
// Ownership: the graph and map are read during compile() only; the cache must outlive `compiled`.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_COMPILER_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_COMPILER_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/compiled_graph.h"
#include "edgeshare/backends/xnnpack/runtime/graph_reader.h"
#include "edgeshare/backends/xnnpack/runtime/op_rows.h"
#include "edgeshare/backends/xnnpack/runtime/steps.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/backends/xnnpack/xnnpack_graph_generated.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace xnnpack {

class GraphCompiler;

// One node as its row sees it.
struct NodeContext {
  GraphCompiler* compiler = nullptr;
  const OpRow* row = nullptr;
  uint32_t node = 0;
  const char* name = "";
  uint32_t in[kMaxNodeInputs] = {0, 0, 0};
  size_t num_in = 0;
  uint32_t out = 0;
  ValueInfo x, y;  // Copies of input 0 and the output: new_scratch() may grow the value table.
  float output_min = 0.0f, output_max = 0.0f, alpha = 0.0f;
  bool clamp_folded = false;  // A builder sets it when its operator applies the output range.
};

class GraphCompiler {
 public:
  GraphCompiler(const schema::Graph& graph, WeightsCache* cache, const runtime::NamedDataMap* map,
                CompiledGraph* out)
      : graph_(graph), cache_(cache), map_(map), out_(out) {}

  runtime::Status compile(GraphValues values);

  // For node builders.
  const ValueInfo& value(uint32_t id) const { return out_->values[id]; }
  // Whether some node reads the value at run time (not only as a packed weight).
  bool read_directly(uint32_t id) const { return read_directly_[id]; }
  // How a constant of the graph is named and identified, for the weights cache.
  ConstantRef constant_ref(uint32_t id) const;
  // The scales of a QC8W constant (float32 [out]) or a QC4W one (float16 [out, in / group]).
  ConstantRef scales_ref(uint32_t id) const;
  // Makes a named constant readable at run time (retained until the graph goes).
  runtime::Status ensure_pointer(uint32_t id);
  // Asks for the shared fully connected entry of `node`. The requests of every node are packed
  // together after the last node (one WeightsCache batch, all misses hashed and packed on the
  // threadpool at once); the k-th FullyConnectedStep added then gets the k-th request's entry.
  void request_packed(uint32_t node, FullyConnectedRequest request);
  // A new float32 arena value shaped like `like`.
  uint32_t new_scratch(const ValueInfo& like);
  // A new arena value of at least `bytes` (64-byte aligned) live during the current node only:
  // an operator's scratch.
  uint32_t new_scratch_bytes(size_t bytes);
  // A new constant [1] holding `value`.
  uint32_t new_constant(float value);
  // The channels of an elementwise operator over `v`, which sees it as [numel / channels,
  // channels]: numel for a static value (one row); for a dynamic one, the product of the dims
  // after its last symbolic dim, so the row count follows the symbols from run to run.
  static size_t elementwise_channels(const ValueInfo& v);
  template <typename T>
  void add_step(uint32_t node, T&& step) {
    out_->steps.push_back(Step{node, std::forward<T>(step)});
  }
  WeightsCache& cache() const { return *cache_; }
  const runtime::NamedDataMap* map() const { return map_; }

 private:
  void place_inline_constants();
  void mark_read_directly();
  // Finds the runs of six nodes that spell a root-mean-square norm (RmsNormStep) and notes them in
  // norm_role_ and norms_: their nodes are checked as usual and the last builds the fused step.
  void find_rms_norms();
  runtime::Status build_rms_norm(const NodeContext& c);
  runtime::Status compile_node(uint32_t n);
  runtime::Status read_inputs(const schema::Node& node, NodeContext* c) const;
  runtime::Status claim_output(const schema::Node& node, NodeContext* c);
  runtime::Status read_attributes(const schema::Node& node, NodeContext* c) const;
  runtime::Status add_output_clamp(const NodeContext& c);
  runtime::Status place_arena();
  // Gets the requested entries (request_packed) and hands them to the fully connected steps.
  runtime::Status pack_requested();
  // Fully connected steps over one input that quantize it alike (a layer's query and key
  // projections, its gate and up projections) share the first one's scratch: the later ones read
  // the rows it quantized, and its slot lives until the last of them.
  void share_quantized_inputs();
  uint32_t add_value(const ValueInfo& info);
  // Gives value `id` an arena slot of `floats`, live from the node being compiled to its last
  // reader; its offset is chosen in place_arena.
  void add_slot(uint32_t id, size_t floats);
  void mark_last_reads();

  const schema::Graph& graph_;
  WeightsCache* cache_;
  const runtime::NamedDataMap* map_;
  CompiledGraph* out_;
  std::vector<bool> defined_;
  std::vector<bool> read_directly_;
  std::vector<size_t> slot_offset_;  // Per value id: its arena offset in floats, or SIZE_MAX.
  std::vector<size_t> slot_floats_;  // Per value id: its slot size (padded), or 0.
  std::vector<uint32_t> first_use_;  // Per value id: the node that writes it.
  std::vector<uint32_t> last_use_;   // Per value id: the last node that reads it.
  uint32_t current_node_ = 0;
  size_t arena_floats_ = 0;
  std::vector<FullyConnectedRequest> requests_;  // In the order the nodes asked.
  std::vector<uint32_t> request_nodes_;          // Per request: the node asking (for messages).
  // A fused norm: its input, weight and epsilon (its output is its last node's).
  struct FusedNorm {
    uint32_t in = 0, weight = 0;
    float epsilon = 0.0f;
  };
  enum class NormRole : uint8_t { kNone, kInside, kLast };
  std::vector<NormRole> norm_role_;  // Per node.
  std::vector<size_t> norm_index_;   // Per node of a fused norm: its entry in norms_.
  std::vector<FusedNorm> norms_;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_GRAPH_COMPILER_H_
