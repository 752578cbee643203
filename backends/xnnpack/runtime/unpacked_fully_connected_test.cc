// FULLY_CONNECTED_UNPACKED: a linear over a weight that is a delegate input (a swappable adapter's
// bytes), read as stored at each execute. The delegate packs and retains nothing for it, a run
// over other weight bytes gives that weight's product (what a rebind relies on), token counts
// follow the bound symbol, and inconsistent graphs are refused at init.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::Error;

constexpr int32_t kMaxTokens = 7;
constexpr int32_t kIn = 24;
constexpr int32_t kRank = 8;
constexpr int32_t kOut = 20;

// y[t, o] = sum_r (sum_i x[t, i] a[r, i]) b[o, r], in double.
std::vector<float> lora_reference(const std::vector<float>& x, const std::vector<float>& a,
                                  const std::vector<float>& b, int32_t tokens) {
  std::vector<float> y(static_cast<size_t>(tokens) * kOut);
  for (int32_t t = 0; t < tokens; ++t) {
    std::vector<double> h(kRank);
    for (int32_t r = 0; r < kRank; ++r) {
      for (int32_t i = 0; i < kIn; ++i) h[r] += double(x[t * kIn + i]) * a[r * kIn + i];
    }
    for (int32_t o = 0; o < kOut; ++o) {
      double s = 0;
      for (int32_t r = 0; r < kRank; ++r) s += h[r] * b[o * kRank + r];
      y[t * kOut + o] = static_cast<float>(s);
    }
  }
  return y;
}

// x [1, T, in] -> A -> [1, T, rank] -> B -> y [1, T, out], A and B delegate inputs (as a swappable
// program's LoRA products are lowered), T a symbol.
std::vector<uint8_t> lora_graph() {
  GraphBuilder g;
  const uint32_t t = g.symbol("s0", kMaxTokens);
  const uint32_t x = g.input({1, kMaxTokens, kIn}, {0, t, 0});
  const uint32_t a = g.input({kRank, kIn});
  const uint32_t b = g.input({kOut, kRank});
  const uint32_t h = g.intermediate({1, kMaxTokens, kRank}, {0, t, 0});
  const uint32_t y = g.output({1, kMaxTokens, kOut}, {0, t, 0});
  g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {x, a}, {h});
  g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {h, b}, {y});
  return g.build(/*version=*/2);
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "element " << i;
  }
}

TEST(UnpackedFullyConnected, runs_the_weights_bound_at_each_execute_and_packs_nothing) {
  InMemoryDataMap map("empty.ptd");
  auto d = TestDelegate::init(lora_graph(), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
  EXPECT_TRUE(process_weights_cache_stats().retained_data_names.empty());

  // Two adapters' weights; runs alternate between them on one delegate, as swaps do.
  HostTensor a1{{kRank, kIn}, random_floats(kRank * kIn, -1, 1, 1)};
  HostTensor b1{{kOut, kRank}, random_floats(kOut * kRank, -1, 1, 2)};
  HostTensor a2{{kRank, kIn}, random_floats(kRank * kIn, -1, 1, 3)};
  HostTensor b2{{kOut, kRank}, random_floats(kOut * kRank, -1, 1, 4)};
  for (int32_t tokens : {kMaxTokens, 1, 3}) {
    HostTensor x{{1, tokens, kIn}, random_floats(size_t(tokens) * kIn, -1, 1, 10 + tokens)};
    for (int round = 0; round < 2; ++round) {
      HostTensor y1{{1, tokens, kOut}, std::vector<float>(size_t(tokens) * kOut)};
      ASSERT_TRUE(d->run({&x, &a1, &b1}, {&y1}).ok());
      expect_near(y1.data, lora_reference(x.data, a1.data, b1.data, tokens));
      HostTensor y2{{1, tokens, kOut}, std::vector<float>(size_t(tokens) * kOut)};
      ASSERT_TRUE(d->run({&x, &a2, &b2}, {&y2}).ok());
      expect_near(y2.data, lora_reference(x.data, a2.data, b2.data, tokens));
    }
  }
  // Weights the caller changes in place are read as they are now: nothing was copied.
  a1.data.assign(a1.data.size(), 0.0f);
  HostTensor x{{1, 1, kIn}, random_floats(kIn, -1, 1, 5)};
  HostTensor y{{1, 1, kOut}, std::vector<float>(kOut, 1.0f)};
  ASSERT_TRUE(d->run({&x, &a1, &b1}, {&y}).ok());
  expect_near(y.data, std::vector<float>(kOut, 0.0f));
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

TEST(UnpackedFullyConnected, a_weight_of_another_shape_is_refused_per_execute) {
  InMemoryDataMap map("empty.ptd");
  auto d = TestDelegate::init(lora_graph(), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  HostTensor x{{1, 2, kIn}, random_floats(2 * kIn, -1, 1, 1)};
  HostTensor a{{kRank, kIn}, random_floats(kRank * kIn, -1, 1, 2)};
  HostTensor b{{kOut, kRank}, random_floats(kOut * kRank, -1, 1, 3)};
  HostTensor wide_a{{kRank * 2, kIn}, random_floats(2 * kRank * kIn, -1, 1, 4)};
  HostTensor y{{1, 2, kOut}, std::vector<float>(2 * kOut)};
  EXPECT_EQ(d->run({&x, &wide_a, &b}, {&y}).code(), Error::InvalidArgument);
  EXPECT_TRUE(d->run({&x, &a, &b}, {&y}).ok());
}

// The adapter formats: A as IEEE half, B as int8 with float scales per output row, all three
// delegate inputs; the product equals the one over the widened weights.
TEST(UnpackedFullyConnected, half_and_int8_weights_run_as_stored) {
  GraphBuilder g;
  const uint32_t t = g.symbol("s0", kMaxTokens);
  const uint32_t x = g.input({1, kMaxTokens, kIn}, {0, t, 0});
  const uint32_t a = g.input({kRank, kIn});
  g.set_dtype(a, edgeshare::schema::ScalarType_HALF);
  const uint32_t b = g.input({kOut, kRank});
  g.set_dtype(b, edgeshare::schema::ScalarType_CHAR);
  const uint32_t b_scales = g.input({kOut});
  const uint32_t h = g.intermediate({1, kMaxTokens, kRank}, {0, t, 0});
  const uint32_t y = g.output({1, kMaxTokens, kOut}, {0, t, 0});
  g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {x, a}, {h});
  g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {h, b, b_scales}, {y});
  InMemoryDataMap map("empty.ptd");
  auto d = TestDelegate::init(g.build(/*version=*/2), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();

  std::vector<uint16_t> a_half(kRank * kIn);
  std::vector<float> a_wide(kRank * kIn);
  const std::vector<float> a_values = random_floats(kRank * kIn, -1, 1, 1);
  for (size_t i = 0; i < a_half.size(); ++i) {
    a_half[i] = runtime::kernels::float_to_half(a_values[i]);
    a_wide[i] = runtime::kernels::half_to_float(a_half[i]);
  }
  std::vector<int8_t> b_int8(kOut * kRank);
  std::vector<float> scales = random_floats(kOut, 0.001f, 0.02f, 2), b_wide(kOut * kRank);
  const std::vector<float> b_values = random_floats(kOut * kRank, -127, 127, 3);
  for (size_t i = 0; i < b_int8.size(); ++i) {
    b_int8[i] = static_cast<int8_t>(std::lround(b_values[i]));
    b_wide[i] = static_cast<float>(b_int8[i]) * scales[i / kRank];
  }
  for (int32_t tokens : {kMaxTokens, 1}) {
    std::vector<float> xs = random_floats(size_t(tokens) * kIn, -1, 1, 10 + tokens);
    std::vector<float> ys(size_t(tokens) * kOut, NAN);
    const std::vector<int32_t> x_dims = {1, tokens, kIn}, y_dims = {1, tokens, kOut};
    const std::vector<int32_t> a_dims = {kRank, kIn}, b_dims = {kOut, kRank}, s_dims = {kOut};
    using runtime::ScalarType;
    using runtime::Span;
    runtime::EValue args[] = {
        runtime::EValue(
            runtime::Tensor(ScalarType::Float, Span<const int32_t>(x_dims.data(), 3), xs.data())),
        runtime::EValue(runtime::Tensor(ScalarType::Half, Span<const int32_t>(a_dims.data(), 2),
                                        a_half.data())),
        runtime::EValue(runtime::Tensor(ScalarType::Char, Span<const int32_t>(b_dims.data(), 2),
                                        b_int8.data())),
        runtime::EValue(runtime::Tensor(ScalarType::Float, Span<const int32_t>(s_dims.data(), 1),
                                        scales.data())),
        runtime::EValue(
            runtime::Tensor(ScalarType::Float, Span<const int32_t>(y_dims.data(), 3), ys.data())),
    };
    runtime::EValue* ptrs[] = {&args[0], &args[1], &args[2], &args[3], &args[4]};
    ASSERT_TRUE(d->execute(Span<runtime::EValue* const>(ptrs, 5)).ok());
    expect_near(ys, lora_reference(xs, a_wide, b_wide, tokens));

    // The float bytes of A where the graph says half: refused by name, nothing run.
    std::vector<float> a_float(a_wide);
    runtime::EValue wrong(
        runtime::Tensor(ScalarType::Float, Span<const int32_t>(a_dims.data(), 2), a_float.data()));
    runtime::EValue* bad[] = {&args[0], &wrong, &args[2], &args[3], &args[4]};
    EXPECT_EQ(d->execute(Span<runtime::EValue* const>(bad, 5)).code(), Error::InvalidArgument);
  }
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

struct Broken {
  InMemoryDataMap map{"m.ptd"};
  GraphBuilder g;
  uint32_t x = g.input({2, 8});
  uint32_t y = g.output({2, 4});
};

Error init_error(const std::vector<uint8_t>& blob, const runtime::NamedDataMap* map) {
  auto d = TestDelegate::init(blob, map);
  return d.ok() ? Error::Ok : d.status().code();
}

TEST(UnpackedFullyConnected, inconsistent_graphs_are_refused) {
  {
    Broken b;  // The weight is a constant (it would have to be packed or retained): not this op.
    const uint32_t w = b.g.named("w", {4, 8}, b.map.add("w", random_floats(32, -1, 1, 1)));
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Rank-1 weight.
    const uint32_t w = b.g.input({32});
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Input channels disagree.
    const uint32_t w = b.g.input({4, 6});
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Output shape disagrees.
    const uint32_t w = b.g.input({5, 8});
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // A bias: the unpacked product has none.
    const uint32_t w = b.g.input({4, 8});
    const uint32_t bias = b.g.input({4});
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w, bias}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // An int8 weight without its scales.
    const uint32_t w = b.g.input({4, 8});
    b.g.set_dtype(w, edgeshare::schema::ScalarType_CHAR);
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // An int4 weight: not a format that runs as stored.
    const uint32_t w = b.g.input({4, 8});
    b.g.set_dtype(w, edgeshare::schema::ScalarType_BYTE);
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
  }
  {
    Broken b;  // A weight with a symbolic dim.
    const uint32_t s = b.g.symbol("s0", 4);
    const uint32_t w = b.g.input({4, 8}, {s, 0});
    b.g.node(schema::OpKind_FULLY_CONNECTED_UNPACKED, {b.x, w}, {b.y});
    EXPECT_NE(init_error(b.g.build(2), &b.map), Error::Ok);
  }
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
