// The six nodes torch exports for an RMS norm (square, mean over the last dim, + eps, rsqrt, times
// the input, times the weight) compile to one fused step, equal to the formula at every row count
// a dynamic graph runs; where the chain is not private (an intermediate is also an output, a node
// clamps) the nodes compile one by one and still give the same numbers.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/compiled_graph.h"
#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/graph_compiler.h"
#include "edgeshare/backends/xnnpack/runtime/graph_reader.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"

namespace edgeshare {
namespace xnnpack {
namespace {

constexpr uint32_t kChannels = 40;  // Two whole blocks of 16 and a partial one.
constexpr uint32_t kMaxRows = 8;
constexpr float kEps = 1e-5f;

// w * (x * rsqrt(mean(x^2) + eps)) per row, in double.
std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w,
                            float lo = -std::numeric_limits<float>::infinity(),
                            float hi = std::numeric_limits<float>::infinity()) {
  const size_t rows = x.size() / w.size(), n = w.size();
  std::vector<float> y(x.size());
  for (size_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (size_t c = 0; c < n; ++c) sum += double{x[r * n + c]} * x[r * n + c];
    const double scale = 1.0 / std::sqrt(sum / n + kEps);
    for (size_t c = 0; c < n; ++c) {
      y[r * n + c] = std::min(hi, std::max(lo, static_cast<float>(w[c] * (x[r * n + c] * scale))));
    }
  }
  return y;
}

// What may differ from the fused chain.
struct Variant {
  bool rsqrt_is_output = false;  // The reciprocal root is a second delegate output.
  float clamp_max = std::numeric_limits<float>::infinity();  // On the weight's product.
  bool weight_first = true;  // The weight is the last product's first operand (torch's order).
};

struct Graph {
  std::vector<uint8_t> blob;
  InMemoryDataMap map{"norm.ptd"};
};

// x [1, rows, kChannels] (rows a symbol up to kMaxRows) -> the norm [1, rows, kChannels].
void build(const Variant& v, const std::vector<float>& weight, Graph* out) {
  GraphBuilder g;
  const uint32_t t = g.symbol("rows", kMaxRows);
  const std::vector<uint32_t> sym = {0, t, 0};
  const uint32_t w = g.named("norm.weight", {kChannels}, out->map.add("norm.weight", weight));
  const uint32_t x = g.input({1, kMaxRows, kChannels}, sym);
  const uint32_t y = g.output({1, kMaxRows, kChannels}, sym);
  const uint32_t rsqrt =
      v.rsqrt_is_output ? g.output({1, kMaxRows, 1}, sym) : g.intermediate({1, kMaxRows, 1}, sym);
  const uint32_t eps = g.inline_constant({}, {kEps});
  const uint32_t square = g.intermediate({1, kMaxRows, kChannels}, sym);
  const uint32_t mean = g.intermediate({1, kMaxRows, 1}, sym);
  const uint32_t shifted = g.intermediate({1, kMaxRows, 1}, sym);
  const uint32_t scaled = g.intermediate({1, kMaxRows, kChannels}, sym);
  g.node(schema::OpKind_SQUARE, {x}, {square});
  g.node(schema::OpKind_MEAN_LAST_DIM, {square}, {mean});
  g.node(schema::OpKind_ADD, {mean, eps}, {shifted});
  g.node(schema::OpKind_RSQRT, {shifted}, {rsqrt});
  g.node(schema::OpKind_MULTIPLY, {x, rsqrt}, {scaled});
  const std::vector<uint32_t> last =
      v.weight_first ? std::vector<uint32_t>{w, scaled} : std::vector<uint32_t>{scaled, w};
  g.node(schema::OpKind_MULTIPLY, last, {y}, -std::numeric_limits<float>::infinity(), v.clamp_max);
  out->blob = g.build(/*version=*/2);
}

// Compiles the graph into `compiled`.
void compile(const Graph& graph, WeightsCache* cache, CompiledGraph* compiled) {
  runtime::Result<const schema::Graph*> verified =
      verify_graph(graph.blob.data(), graph.blob.size());
  EXPECT_TRUE(verified.ok());
  GraphValues read;
  EXPECT_TRUE(read_values(**verified, &read).ok());
  GraphCompiler compiler(**verified, cache, &graph.map, compiled);
  const runtime::Status status = compiler.compile(std::move(read));
  EXPECT_TRUE(status.ok()) << status.message();
}

size_t fused_steps(const CompiledGraph& compiled) {
  size_t n = 0;
  for (const Step& step : compiled.steps) n += std::holds_alternative<RmsNormStep>(step.op);
  return n;
}

// Runs the graph at 1, 3 and kMaxRows rows against the formula.
void expect_norm(const Variant& v, const std::vector<float>& weight) {
  Graph graph;
  build(v, weight, &graph);
  runtime::Result<TestDelegate> delegate = TestDelegate::init(graph.blob, &graph.map);
  ASSERT_TRUE(delegate.ok()) << delegate.status().message();
  for (uint32_t rows : {1u, 3u, kMaxRows}) {
    SCOPED_TRACE(rows);
    HostTensor x{{1, static_cast<int32_t>(rows), kChannels},
                 random_floats(rows * kChannels, -4.0f, 4.0f, rows)};
    HostTensor y{to_int_dims({1, kMaxRows, kChannels}),
                 std::vector<float>(kMaxRows * kChannels, NAN)};
    HostTensor r{to_int_dims({1, kMaxRows, 1}), std::vector<float>(kMaxRows, NAN)};
    std::vector<HostTensor*> outputs = {&y};
    if (v.rsqrt_is_output) outputs.push_back(&r);
    const runtime::Status status = delegate->run({&x}, outputs);
    ASSERT_TRUE(status.ok()) << status.message();
    const std::vector<float> want = rms_norm(x.data, weight, -INFINITY, v.clamp_max);
    const std::vector<float> got(y.data.begin(), y.data.begin() + want.size());
    expect_near_relative(got, want, "norm", 1e-5f);
  }
}

TEST(RmsNorm, the_six_nodes_are_one_step_equal_to_the_formula) {
  const std::vector<float> weight = random_floats(kChannels, -2.0f, 2.0f, 99);
  for (bool weight_first : {true, false}) {
    SCOPED_TRACE(weight_first);
    Variant v;
    v.weight_first = weight_first;
    Graph graph;
    build(v, weight, &graph);
    WeightsCache cache;
    CompiledGraph compiled;
    compile(graph, &cache, &compiled);
    EXPECT_EQ(compiled.steps.size(), 1u);
    EXPECT_EQ(fused_steps(compiled), 1u);
    expect_norm(v, weight);
  }
}

TEST(RmsNorm, a_chain_that_is_not_private_runs_node_by_node) {
  const std::vector<float> weight = random_floats(kChannels, -2.0f, 2.0f, 98);
  Variant shared;
  shared.rsqrt_is_output = true;
  Variant clamped;
  clamped.clamp_max = 0.5f;
  for (const Variant& v : {shared, clamped}) {
    Graph graph;
    build(v, weight, &graph);
    WeightsCache cache;
    CompiledGraph compiled;
    compile(graph, &cache, &compiled);
    EXPECT_EQ(fused_steps(compiled), 0u);
    EXPECT_GT(compiled.steps.size(), 5u);
    expect_norm(v, weight);
  }
}

TEST(RmsNorm, a_constant_input_is_fetched_for_the_fused_step) {
  const std::vector<float> weight = random_floats(kChannels, -2.0f, 2.0f, 97);
  const std::vector<float> input = random_floats(3 * kChannels, -4.0f, 4.0f, 96);
  Graph graph;
  GraphBuilder g;
  const uint32_t x = g.named("x", {3, kChannels}, graph.map.add("x", input));
  const uint32_t w = g.named("w", {kChannels}, graph.map.add("w", weight));
  const uint32_t eps = g.inline_constant({1}, {kEps});
  const uint32_t u = g.input({4});
  const uint32_t y = g.output({3, kChannels});
  const uint32_t v = g.output({4});
  const uint32_t square = g.intermediate({3, kChannels});
  const uint32_t mean = g.intermediate({3, 1});
  const uint32_t shifted = g.intermediate({3, 1});
  const uint32_t rsqrt = g.intermediate({3, 1});
  const uint32_t scaled = g.intermediate({3, kChannels});
  g.node(schema::OpKind_SQUARE, {x}, {square});
  g.node(schema::OpKind_MEAN_LAST_DIM, {square}, {mean});
  g.node(schema::OpKind_ADD, {eps, mean}, {shifted});
  g.node(schema::OpKind_RSQRT, {shifted}, {rsqrt});
  g.node(schema::OpKind_MULTIPLY, {rsqrt, x}, {scaled});
  g.node(schema::OpKind_MULTIPLY, {scaled, w}, {y});
  g.node(schema::OpKind_ABS, {u}, {v});
  graph.blob = g.build();
  WeightsCache cache;
  CompiledGraph compiled;
  compile(graph, &cache, &compiled);
  EXPECT_EQ(fused_steps(compiled), 1u);
  runtime::Result<TestDelegate> delegate = TestDelegate::init(graph.blob, &graph.map);
  ASSERT_TRUE(delegate.ok()) << delegate.status().message();
  HostTensor ut{{4}, {-1.0f, 2.0f, -3.0f, 4.0f}};
  HostTensor yt{{3, kChannels}, std::vector<float>(3 * kChannels, NAN)};
  HostTensor vt{{4}, std::vector<float>(4, NAN)};
  ASSERT_TRUE(delegate->run({&ut}, {&yt, &vt}).ok());
  expect_near_relative(yt.data, rms_norm(input, weight), "norm", 1e-5f);
  EXPECT_EQ(vt.data, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
