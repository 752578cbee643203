// Graphs with symbolic dims: one blob runs at several token counts T up to its bound, every output
// resized to its real shape and equal to the reference at that T; inconsistent or out-of-bound
// inputs are refused naming the symbol, and malformed symbolic graphs are refused at init.

#include "edgeshare/backends/xnnpack/runtime/dynamic_shapes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::Error;

constexpr uint32_t kMaxT = 16;

// Runs `d` once: the output is given at its bound `out_bound` (filled with NaN), must come back
// as `out_dims`, hold `want` and nothing past it.
void expect_run(TestDelegate& d, std::vector<HostTensor> inputs,
                const std::vector<uint32_t>& out_bound, const std::vector<uint32_t>& out_dims,
                const std::vector<float>& want, const std::string& what, float tolerance = 1e-4f) {
  std::vector<HostTensor*> in;
  for (HostTensor& t : inputs) in.push_back(&t);
  HostTensor out{to_int_dims(out_bound), std::vector<float>(numel_of(out_bound), NAN)};
  const runtime::Status status = d.run(in, {&out});
  ASSERT_TRUE(status.ok()) << what << ": " << status.message();
  EXPECT_EQ(out.dims, to_int_dims(out_dims)) << what;
  const std::vector<float> got(out.data.begin(), out.data.begin() + want.size());
  expect_near_relative(got, want, what, tolerance);
  // Steps ran over this run's rows only: the bound's rest is untouched.
  for (size_t i = want.size(); i < out.data.size(); ++i) {
    ASSERT_TRUE(std::isnan(out.data[i])) << what << ": element " << i << " past the real shape";
  }
}

// y [rows, out] = x [rows, in] w^T + b, clamped.
std::vector<float> linear(const std::vector<float>& x, const std::vector<float>& w,
                          const std::vector<float>& b, size_t in_ch, size_t out_ch,
                          float lo = -INFINITY, float hi = INFINITY) {
  const size_t rows = x.size() / in_ch;
  std::vector<float> y(rows * out_ch);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t o = 0; o < out_ch; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (size_t i = 0; i < in_ch; ++i) acc += double(x[r * in_ch + i]) * w[o * in_ch + i];
      y[r * out_ch + o] = std::min(hi, std::max(lo, float(acc)));
    }
  }
  return y;
}

class DynamicShapesTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
    EXPECT_TRUE(process_weights_cache_stats().retained_data_names.empty());
  }
};

// linear on [1, T, 64]: the main case. The f16 path's batch follows T too.
void test_fully_connected(bool fp16) {
  constexpr uint32_t kIn = 64, kOut = 32;
  InMemoryDataMap map("foundation.ptd");
  std::vector<float> w = random_floats(kOut * kIn, -1, 1, 1);
  std::vector<float> b = random_floats(kOut, -1, 1, 2);
  if (fp16) {
    for (float& v : w) v = round_to_half(v);
    for (float& v : b) v = round_to_half(v);
  }
  GraphBuilder g;
  const uint32_t t = g.symbol("s70", kMaxT);
  const uint32_t x = g.input({1, kMaxT, kIn}, {0, t, 0});
  const uint32_t wid = g.named("w", {kOut, kIn}, map.add("w", fp16 ? pack_halves(w) : w));
  const uint32_t bid = g.named("b", {kOut}, map.add("b", fp16 ? pack_halves(b) : b));
  if (fp16) {
    g.set_dtype(wid, edgeshare::schema::ScalarType_HALF);
    g.set_dtype(bid, edgeshare::schema::ScalarType_HALF);
  }
  const uint32_t y = g.output({1, kMaxT, kOut}, {0, t, 0});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, wid, bid}, {y});
  auto d = TestDelegate::init(g.build(2), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  // Down, up to the bound, to 1 and back: nothing of one run leaks into the next.
  for (uint32_t tokens : {5u, kMaxT, 1u, 5u}) {
    std::vector<float> input = random_floats(tokens * kIn, -1, 1, 3 + tokens);
    expect_run(*d, {HostTensor{{1, int32_t(tokens), int32_t(kIn)}, input}}, {1, kMaxT, kOut},
               {1, tokens, kOut}, linear(input, w, b, kIn, kOut), "T=" + std::to_string(tokens),
               1e-4f);
  }
}

TEST_F(DynamicShapesTest, fully_connected_runs_at_every_token_count) {
  test_fully_connected(false);
}

TEST_F(DynamicShapesTest, fp16_fully_connected_runs_at_every_token_count) {
  test_fully_connected(true);
}

// [1, T, 8] * [1, T, 1] (both inputs), then + a named [8]: broadcasting over T.
TEST_F(DynamicShapesTest, binary_ops_broadcast_over_the_token_dim) {
  InMemoryDataMap map("adapter.ptd");
  const std::vector<float> bias = random_floats(8, -1, 1, 9);
  GraphBuilder g;
  const uint32_t t = g.symbol("s0", kMaxT);
  const uint32_t a = g.input({1, kMaxT, 8}, {0, t, 0});
  const uint32_t s = g.input({1, kMaxT, 1}, {0, t, 0});
  const uint32_t c = g.named("bias", {8}, map.add("bias", bias));
  const uint32_t m = g.intermediate({1, kMaxT, 8}, {0, t, 0});
  const uint32_t y = g.output({1, kMaxT, 8}, {0, t, 0});
  g.node(schema::OpKind_MULTIPLY, {a, s}, {m});
  g.node(schema::OpKind_ADD, {m, c}, {y});
  auto d = TestDelegate::init(g.build(2), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const BinaryReference& mul = *find_binary_reference(schema::OpKind_MULTIPLY);
  const BinaryReference& add = *find_binary_reference(schema::OpKind_ADD);
  for (uint32_t tokens : {3u, 11u}) {
    const std::vector<float> va = random_floats(tokens * 8, -2, 2, tokens);
    const std::vector<float> vs = random_floats(tokens, -2, 2, 100 + tokens);
    const std::vector<float> prod =
        binary_reference(mul, va, {1, tokens, 8}, vs, {1, tokens, 1}, -INFINITY, INFINITY);
    const std::vector<float> want =
        binary_reference(add, prod, {1, tokens, 8}, bias, {8}, -INFINITY, INFINITY);
    expect_run(*d,
               {HostTensor{{1, int32_t(tokens), 8}, va}, HostTensor{{1, int32_t(tokens), 1}, vs}},
               {1, kMaxT, 8}, {1, tokens, 8}, want, "T=" + std::to_string(tokens));
  }
}

struct UnaryCase {
  schema::OpKind op;
  std::vector<uint32_t> in_dims, in_syms, out_dims, out_syms;
  float lo = -INFINITY, hi = INFINITY;
};

// One unary node at T = 2 and T = 13; the reference works on rows of the input's last dim.
void test_unary(const UnaryCase& u) {
  const UnaryReference& ref = *find_unary_reference(u.op);
  InMemoryDataMap map("unused.ptd");
  GraphBuilder g;
  const uint32_t t = g.symbol("s1", kMaxT);
  auto with_t = [t](std::vector<uint32_t> syms) {
    for (uint32_t& s : syms) s = s != 0 ? t : 0;
    return syms;
  };
  const uint32_t x = g.input(u.in_dims, with_t(u.in_syms));
  const uint32_t y = g.output(u.out_dims, with_t(u.out_syms));
  g.node(u.op, {x}, {y}, u.lo, u.hi);
  auto d = TestDelegate::init(g.build(2), &map);
  ASSERT_TRUE(d.ok()) << schema::EnumNameOpKind(u.op) << ": " << d.status().message();
  for (uint32_t tokens : {2u, 13u}) {
    auto at = [&](std::vector<uint32_t> dims, const std::vector<uint32_t>& syms) {
      for (size_t i = 0; i < dims.size(); ++i) dims[i] = syms[i] != 0 ? tokens : dims[i];
      return dims;
    };
    const std::vector<uint32_t> in_dims = at(u.in_dims, u.in_syms);
    const std::vector<float> xs = random_floats(numel_of(in_dims), ref.input_lo, ref.input_hi, 7);
    const std::vector<float> want = unary_reference(ref, xs, in_dims.back(), 0.0f, u.lo, u.hi);
    expect_run(*d, {HostTensor{to_int_dims(in_dims), xs}}, u.out_dims, at(u.out_dims, u.out_syms),
               want, std::string(schema::EnumNameOpKind(u.op)) + " T=" + std::to_string(tokens));
  }
}

TEST_F(DynamicShapesTest, unary_ops_run_at_every_token_count) {
  const std::vector<uint32_t> td = {kMaxT, 8}, ts = {1, 0};
  for (schema::OpKind op : {schema::OpKind_SIGMOID, schema::OpKind_NEGATE, schema::OpKind_SQUARE,
                            schema::OpKind_SOFTMAX, schema::OpKind_SILU, schema::OpKind_RSQRT,
                            schema::OpKind_ABS, schema::OpKind_FLOOR}) {
    test_unary({op, td, ts, td, ts});
  }
  // A clamp applied by the operator itself.
  test_unary({schema::OpKind_CLAMP, td, ts, td, ts, -0.5f, 0.5f});
}

TEST_F(DynamicShapesTest, mean_and_reshape_follow_the_symbol) {
  // Keepdim and not.
  test_unary({schema::OpKind_MEAN_LAST_DIM, {1, kMaxT, 8}, {0, 1, 0}, {1, kMaxT, 1}, {0, 1, 0}});
  test_unary({schema::OpKind_MEAN_LAST_DIM, {1, kMaxT, 8}, {0, 1, 0}, {1, kMaxT}, {0, 1}});
  // Over a symbolic last dim: the pooling width is T.
  test_unary({schema::OpKind_MEAN_LAST_DIM, {2, kMaxT}, {0, 1}, {2}, {0}});
  // A view [1, T, 4, 2] -> [1, T, 8].
  test_unary({schema::OpKind_COPY, {1, kMaxT, 4, 2}, {0, 1, 0, 0}, {1, kMaxT, 8}, {0, 1, 0}});
}

// linear -> (clamp) -> silu -> linear through arena intermediates sized for the bound.
TEST_F(DynamicShapesTest, mlp_chain_runs_at_two_token_counts) {
  InMemoryDataMap map("foundation.ptd");
  const std::vector<float> w1 = random_floats(32 * 16, -1, 1, 11);
  const std::vector<float> w2 = random_floats(8 * 32, -1, 1, 12);
  GraphBuilder g;
  const uint32_t t = g.symbol("s5", kMaxT);
  const uint32_t x = g.input({1, kMaxT, 16}, {0, t, 0});
  const uint32_t a = g.named("w1", {32, 16}, map.add("w1", w1));
  const uint32_t b = g.named("w2", {8, 32}, map.add("w2", w2));
  const uint32_t h = g.intermediate({1, kMaxT, 32}, {0, t, 0});
  const uint32_t s = g.intermediate({1, kMaxT, 32}, {0, t, 0});
  const uint32_t y = g.output({1, kMaxT, 8}, {0, t, 0});
  // The shared fully connected operator cannot clamp: the compiler adds a clamp step.
  g.node(schema::OpKind_FULLY_CONNECTED, {x, a}, {h}, -1.0f, 1.0f);
  g.node(schema::OpKind_SILU, {h}, {s});
  g.node(schema::OpKind_FULLY_CONNECTED, {s, b}, {y});
  auto d = TestDelegate::init(g.build(2), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const UnaryReference& silu = *find_unary_reference(schema::OpKind_SILU);
  for (uint32_t tokens : {4u, 11u, 4u}) {
    const std::vector<float> xs = random_floats(tokens * 16, -2, 2, 20 + tokens);
    const std::vector<float> hs = linear(xs, w1, {}, 16, 32, -1.0f, 1.0f);
    const std::vector<float> ss = unary_reference(silu, hs, 32, 0.0f, -INFINITY, INFINITY);
    expect_run(*d, {HostTensor{{1, int32_t(tokens), 16}, xs}}, {1, kMaxT, 8}, {1, tokens, 8},
               linear(ss, w2, {}, 32, 8), "T=" + std::to_string(tokens));
  }
}

// Two inputs [T, 4] added: the symbol's size comes from both.
struct TwoInputGraph {
  InMemoryDataMap map{"unused.ptd"};
  std::vector<uint8_t> blob;
  TwoInputGraph() {
    GraphBuilder g;
    const uint32_t t = g.symbol("s70", 8);
    const uint32_t a = g.input({8, 4}, {t, 0});
    const uint32_t b = g.input({8, 4}, {t, 0});
    const uint32_t y = g.output({8, 4}, {t, 0});
    g.node(schema::OpKind_ADD, {a, b}, {y});
    blob = g.build(2);
  }
};

runtime::Status run_two(TestDelegate& d, int32_t ta, int32_t tb, std::vector<int32_t> out_dims,
                        int32_t width = 4) {
  HostTensor a{{ta, width}, std::vector<float>(size_t(ta) * width, 1.0f)};
  HostTensor b{{tb, 4}, std::vector<float>(size_t(tb) * 4, 2.0f)};
  HostTensor y{out_dims, std::vector<float>(numel_of({uint32_t(out_dims[0]), 4}), 0.0f)};
  return d.run({&a, &b}, {&y});
}

TEST_F(DynamicShapesTest, inconsistent_or_out_of_bound_sizes_are_refused_naming_the_symbol) {
  TwoInputGraph graph;
  auto d = TestDelegate::init(graph.blob, &graph.map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_TRUE(run_two(*d, 3, 3, {8, 4}).ok());

  runtime::Status s = run_two(*d, 3, 5, {8, 4});
  EXPECT_EQ(s.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(s.message()).find("'s70'"), std::string::npos) << s.message();

  s = run_two(*d, 9, 9, {9, 4});
  EXPECT_EQ(s.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(s.message()).find("'s70'"), std::string::npos) << s.message();
  EXPECT_NE(std::string(s.message()).find("[1, 8]"), std::string::npos) << s.message();

  // An exact dim of another size.
  s = run_two(*d, 3, 3, {8, 4}, /*width=*/5);
  EXPECT_EQ(s.code(), Error::InvalidArgument) << s.message();

  // An output planned smaller than this run's shape: refused before anything runs.
  s = run_two(*d, 6, 6, {5, 4});
  EXPECT_EQ(s.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(s.message()).find("output 0"), std::string::npos) << s.message();

  // And the delegate still runs afterwards.
  EXPECT_TRUE(run_two(*d, 8, 8, {8, 4}).ok());
}

Error init_error(const GraphBuilder& g, uint32_t version = 2) {
  InMemoryDataMap map("unused.ptd");
  auto d = TestDelegate::init(g.build(version), &map);
  return d.ok() ? Error::Ok : d.status().code();
}

TEST_F(DynamicShapesTest, malformed_symbolic_graphs_are_refused_at_init) {
  {  // Version 1 cannot hold symbols (an older delegate would run it at the bound).
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 8);
    g.node(schema::OpKind_NEGATE, {g.input({8}, {t})}, {g.output({8}, {t})});
    EXPECT_EQ(init_error(g, 1), Error::InvalidProgram);
    EXPECT_EQ(init_error(g, 2), Error::Ok);
  }
  {  // A symbol no input binds.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 8);
    g.node(schema::OpKind_COPY, {g.input({8})}, {g.output({8}, {t})});
    EXPECT_EQ(init_error(g), Error::InvalidProgram);
  }
  {  // A symbolic dim that does not hold its symbol's max.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 8);
    g.node(schema::OpKind_NEGATE, {g.input({7}, {t})}, {g.output({7}, {t})});
    EXPECT_EQ(init_error(g), Error::InvalidProgram);
  }
  {  // dim_symbols of another length, and a symbol number past the table.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 8);
    g.node(schema::OpKind_NEGATE, {g.input({8, 2}, {t})}, {g.output({8, 2}, {t, 0})});
    EXPECT_EQ(init_error(g), Error::InvalidProgram);
    GraphBuilder h;
    h.symbol("s0", 8);
    h.node(schema::OpKind_NEGATE, {h.input({8}, {2})}, {h.output({8}, {2})});
    EXPECT_EQ(init_error(h), Error::InvalidProgram);
  }
  {  // A symbol broadcast against an exact size other than 1.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 4);
    const uint32_t a = g.input({4}, {t});
    const uint32_t b = g.input({4});
    g.node(schema::OpKind_ADD, {a, b}, {g.output({4}, {t})});
    EXPECT_EQ(init_error(g), Error::InvalidProgram);
  }
  {  // Two symbols whose product is reshaped into one of them.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 4);
    const uint32_t u = g.symbol("s1", 4);
    g.node(schema::OpKind_COPY, {g.input({4, 4}, {t, u})}, {g.output({4, 4}, {t, 0})});
    EXPECT_EQ(init_error(g), Error::InvalidProgram);
  }
  {  // Softmax's row length is fixed at create.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 8);
    g.node(schema::OpKind_SOFTMAX, {g.input({2, 8}, {0, t})}, {g.output({2, 8}, {0, t})});
    EXPECT_EQ(init_error(g), Error::NotSupported);
  }
  {  // An output whose symbolic dim is exact elsewhere: the shape rule sees the difference.
    GraphBuilder g;
    const uint32_t t = g.symbol("s0", 8);
    g.node(schema::OpKind_SIGMOID, {g.input({8}, {t})}, {g.output({8})});
    EXPECT_EQ(init_error(g), Error::InvalidProgram);
  }
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
