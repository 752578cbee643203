// The compiler refuses hostile or inconsistent graphs with an Error (never a crash), and execute()
// refuses args that do not match the graph.

#include "edgeshare/backends/xnnpack/runtime/xnn_executor.h"

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

// A small valid graph touching FC, bias, a named elementwise operand, an inline one, SILU.
struct ValidGraph {
  InMemoryDataMap map{"m.ptd"};
  std::vector<uint8_t> blob;
  ValidGraph() {
    GraphBuilder g;
    const uint32_t x = g.input({2, 8});
    const uint32_t w = g.named("w", {4, 8}, map.add("w", random_floats(32, -1, 1, 1)));
    const uint32_t b = g.named("b", {4}, map.add("b", random_floats(4, -1, 1, 2)));
    const uint32_t s = g.named("s", {4}, map.add("s", random_floats(4, -1, 1, 3)));
    const uint32_t c = g.inline_constant({1}, {0.5f});
    const uint32_t h = g.intermediate({2, 4});
    const uint32_t m = g.intermediate({2, 4});
    const uint32_t k = g.intermediate({2, 4});
    const uint32_t y = g.output({2, 4});
    g.node(schema::OpKind_FULLY_CONNECTED, {x, w, b}, {h});
    g.node(schema::OpKind_MULTIPLY, {h, s}, {m});
    g.node(schema::OpKind_ADD, {m, c}, {k});
    g.node(schema::OpKind_SILU, {k}, {y});
    blob = g.build();
  }
};

Error init_error(const std::vector<uint8_t>& blob, const runtime::NamedDataMap* map) {
  auto d = TestDelegate::init(blob, map);
  return d.ok() ? Error::Ok : d.status().code();
}

class XnnExecutorTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Whatever failed half-way released what it had taken.
    EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
    EXPECT_TRUE(process_weights_cache_stats().retained_data_names.empty());
  }
};

TEST_F(XnnExecutorTest, valid_graph_loads) {
  ValidGraph v;
  EXPECT_EQ(init_error(v.blob, &v.map), Error::Ok);
}

TEST_F(XnnExecutorTest, empty_and_garbage_blobs_are_invalid_program) {
  ValidGraph v;
  EXPECT_EQ(init_error({}, &v.map), Error::InvalidProgram);
  EXPECT_EQ(init_error(std::vector<uint8_t>(64, 0xAB), &v.map), Error::InvalidProgram);
  std::vector<uint8_t> wrong_id = v.blob;
  wrong_id[4] = 'X';  // The file identifier lives at bytes 4..7.
  EXPECT_EQ(init_error(wrong_id, &v.map), Error::InvalidProgram);
}

TEST_F(XnnExecutorTest, every_truncation_fails_cleanly) {
  ValidGraph v;
  for (size_t n = 0; n < v.blob.size(); ++n) {
    std::vector<uint8_t> cut(v.blob.begin(), v.blob.begin() + n);
    EXPECT_NE(init_error(cut, &v.map), Error::Ok) << "truncated to " << n << " bytes";
  }
}

TEST_F(XnnExecutorTest, bit_flips_never_crash) {
  ValidGraph v;
  for (size_t i = 0; i < v.blob.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> flipped = v.blob;
      flipped[i] ^= static_cast<uint8_t>(1u << bit);
      // Some flips still describe a valid graph (e.g. a changed float); none may crash, and one
      // that loads must run or refuse cleanly.
      auto d = TestDelegate::init(flipped, &v.map);
      if (!d.ok()) continue;
      HostTensor x{{2, 8}, std::vector<float>(16, 0.25f)};
      HostTensor y{{2, 4}, std::vector<float>(8)};
      (void)d->run({&x}, {&y});
    }
  }
}

// A chain of 8 elementwise ops over [64, 64] needs two live intermediates at a time, not 7: values
// that are never live together share arena bytes (a delegate at max-seq-len holds many).
TEST_F(XnnExecutorTest, intermediates_share_the_arena_by_lifetime) {
  InMemoryDataMap map("m");
  GraphBuilder g;
  uint32_t v = g.input({64, 64});
  for (int i = 0; i < 7; ++i) {
    const uint32_t next = g.intermediate({64, 64});
    g.node(schema::OpKind_ABS, {v}, {next});
    v = next;
  }
  g.node(schema::OpKind_NEGATE, {v}, {g.output({64, 64})});
  const std::vector<uint8_t> blob = g.build();
  auto executor = XnnExecutor::create(blob.data(), blob.size(), &map, /*share_weights=*/true);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  const size_t one = 64 * 64 * sizeof(float);
  EXPECT_GE((*executor)->arena_bytes(), 2 * one);
  EXPECT_LT((*executor)->arena_bytes(), 3 * one);
  // And it still computes: -|...|x|...| = -|x|.
  auto d = TestDelegate::init(blob, &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  HostTensor x{{64, 64}, random_floats(64 * 64, -1, 1, 5)};
  HostTensor y{{64, 64}, std::vector<float>(64 * 64)};
  ASSERT_TRUE(d->run({&x}, {&y}).ok());
  for (size_t i = 0; i < x.data.size(); ++i) EXPECT_EQ(y.data[i], -std::fabs(x.data[i]));
}

// An elementwise operator is set up again only when a pointer or shape moves: runs from other
// inputs into other outputs each get their own results (a step left set up for the last buffers
// would read and write those), and the first buffers' result repeats.
TEST_F(XnnExecutorTest, steps_follow_their_buffers_from_run_to_run) {
  InMemoryDataMap map("m");
  GraphBuilder g;
  const uint32_t x = g.input({2, 8});
  const uint32_t h = g.intermediate({2, 8});
  const uint32_t k = g.intermediate({2, 8});
  const uint32_t y = g.output({2, 8});
  g.node(schema::OpKind_ABS, {x}, {h});     // unary, reads the input
  g.node(schema::OpKind_ADD, {h, x}, {k});  // binary, reads the input
  g.node(schema::OpKind_NEGATE, {k}, {y});  // unary, writes the output
  const std::vector<uint8_t> blob = g.build();
  auto d = TestDelegate::init(blob, &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<HostTensor> ins = {HostTensor{{2, 8}, random_floats(16, -1, 1, 7)},
                                 HostTensor{{2, 8}, random_floats(16, -1, 1, 8)}};
  std::vector<HostTensor> outs(4, HostTensor{{2, 8}, std::vector<float>(16, -9.0f)});
  for (size_t run = 0; run < outs.size(); ++run) {
    HostTensor& in = ins[run % 2];
    ASSERT_TRUE(d->run({&in}, {&outs[run]}).ok());
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_EQ(outs[run].data[i], -(std::fabs(in.data[i]) + in.data[i])) << "run " << run;
    }
  }
}

TEST_F(XnnExecutorTest, unsupported_version) {
  InMemoryDataMap map("m");
  GraphBuilder g;
  const uint32_t x = g.input({4});
  const uint32_t y = g.output({4});
  g.node(schema::OpKind_ABS, {x}, {y});
  EXPECT_EQ(init_error(g.build(/*version=*/99), &map), Error::NotSupported);
}

// Builds x[2,8] -> node -> y with one knob broken per test.
struct Broken {
  InMemoryDataMap map{"m.ptd"};
  GraphBuilder g;
  uint32_t x, w, y;
  Broken() {
    x = g.input({2, 8});
    w = g.named("w", {4, 8}, map.add("w", random_floats(32, -1, 1, 1)));
    y = g.output({2, 4});
  }
};

TEST_F(XnnExecutorTest, bad_indices_are_invalid_program) {
  {
    Broken b;
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, 99}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {77});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Writes a constant.
    b.g.node(schema::OpKind_ABS, {b.x}, {b.w});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Reads an intermediate no node writes.
    const uint32_t h = b.g.intermediate({2, 4});
    b.g.node(schema::OpKind_ABS, {h}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // The output is never written.
    const uint32_t h = b.g.intermediate({2, 8});
    b.g.node(schema::OpKind_ABS, {b.x}, {h});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Two values claim output 0.
    const uint32_t y2 = b.g.output({2, 4});
    b.g.set_io_index(y2, 0);
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // io_index past num_inputs.
    b.g.set_io_index(b.x, 5);
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Unknown op kind.
    b.g.node(static_cast<schema::OpKind>(200), {b.x}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
  }
  {
    Broken b;  // Wrong arity.
    b.g.node(schema::OpKind_ADD, {b.x}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
}

TEST_F(XnnExecutorTest, non_float_dtype_is_not_supported) {
  Broken b;
  b.g.set_dtype(b.x, 3 /* INT */);
  b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
  EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
}

// HALF is accepted for a fully connected node's named weight and bias only, both or the weight
// alone; anything else is refused at init with a message naming the value.
TEST_F(XnnExecutorTest, half_only_for_fully_connected_weights_and_bias) {
  constexpr int8_t kHalf = edgeshare::schema::ScalarType_HALF;
  auto message = [](const std::vector<uint8_t>& blob, const runtime::NamedDataMap* map) {
    auto d = TestDelegate::init(blob, map);
    return d.ok() ? std::string() : std::string(d.status().message());
  };
  {
    Broken b;  // HALF weight, float32 bias.
    b.g.set_dtype(b.w, kHalf);
    const uint32_t bias = b.g.named("b", {4}, b.map.add("b", random_floats(4, -1, 1, 2)));
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w, bias}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
    EXPECT_NE(message(b.g.build(), &b.map).find("both must be float32 or both HALF"),
              std::string::npos);
  }
  {
    Broken b;  // float32 weight, HALF bias.
    const uint32_t bias = b.g.named("b", {4}, b.map.add("b", random_floats(2, -1, 1, 2)));
    b.g.set_dtype(bias, kHalf);
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w, bias}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
  }
  {
    Broken b;  // HALF operand of an elementwise op.
    const uint32_t s = b.g.named("s", {8}, b.map.add("s", random_floats(4, -1, 1, 2)));
    b.g.set_dtype(s, kHalf);
    const uint32_t y = b.g.output({2, 8});
    b.g.node(schema::OpKind_ADD, {b.x, s}, {y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
    EXPECT_NE(message(b.g.build(), &b.map).find("only a fully connected node's weight and bias"),
              std::string::npos);
  }
  {
    Broken b;  // HALF input, intermediate or inline constant.
    b.g.set_dtype(b.x, kHalf);
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
  }
  {
    Broken b;
    const uint32_t c = b.g.inline_constant({2}, {0.5f});
    b.g.set_dtype(c, kHalf);
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::NotSupported);
  }
  {
    Broken b;  // HALF weight too short for its dims (the map holds 2 bytes per element needed).
    const uint32_t w = b.g.named("w16", {4, 8}, b.map.add("w16", random_floats(8, -1, 1, 1)));
    b.g.set_dtype(w, kHalf);
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidData);
  }
}

TEST_F(XnnExecutorTest, inconsistent_fully_connected_shapes) {
  {
    Broken b;  // Weight rank 1.
    const uint32_t w1 = b.g.named("w1", {32}, b.map.add("w1", random_floats(32, -1, 1, 1)));
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, w1}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Weight is an input, not a constant.
    const uint32_t wi = b.g.input({4, 8});
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, wi}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Input channels disagree.
    const uint32_t w2 = b.g.named("w2", {4, 6}, b.map.add("w2", random_floats(24, -1, 1, 1)));
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, w2}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Bias of the wrong size.
    const uint32_t bias = b.g.named("b", {3}, b.map.add("b", random_floats(3, -1, 1, 1)));
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w, bias}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // Output shape disagrees.
    const uint32_t y2 = b.g.intermediate({2, 5});
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {y2});
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
}

TEST_F(XnnExecutorTest, bad_constants) {
  {
    Broken b;  // 31-byte digest.
    b.g.set_digest(b.w, std::vector<uint8_t>(31, 7));
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
    EXPECT_EQ(b.map.get_data_calls(), 0u);
  }
  {
    Broken b;  // Inline data of the wrong size.
    const uint32_t c = b.g.inline_constant({4}, {1.0f, 2.0f});
    const uint32_t h = b.g.intermediate({2, 4});
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {h});
    b.g.node(schema::OpKind_ADD, {h, c}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidProgram);
  }
  {
    Broken b;  // The map holds fewer bytes than the graph's dims need (digest agrees).
    const std::vector<float> small = random_floats(8, -1, 1, 9);
    const uint32_t w = b.g.named("small", {4, 8}, b.map.add("small", small));
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), &b.map), Error::InvalidData);
    EXPECT_EQ(b.map.live_buffers(), 0u);
  }
  {
    // No NamedDataMap at all while the graph names constants.
    Broken b;
    b.g.node(schema::OpKind_FULLY_CONNECTED, {b.x, b.w}, {b.y});
    EXPECT_EQ(init_error(b.g.build(), nullptr), Error::InvalidArgument);
  }
}

TEST_F(XnnExecutorTest, incompatible_broadcast_and_bad_attributes) {
  {
    InMemoryDataMap map("m");
    GraphBuilder g;
    const uint32_t a = g.input({2, 3});
    const uint32_t b = g.input({4});
    const uint32_t y = g.output({2, 4});
    g.node(schema::OpKind_ADD, {a, b}, {y});
    EXPECT_EQ(init_error(g.build(), &map), Error::InvalidProgram);
  }
  {
    InMemoryDataMap map("m");
    GraphBuilder g;
    const uint32_t a = g.input({4});
    const uint32_t y = g.output({4});
    g.node(schema::OpKind_CLAMP, {a}, {y}, 1.0f, -1.0f);  // min > max.
    EXPECT_EQ(init_error(g.build(), &map), Error::InvalidProgram);
  }
  {
    InMemoryDataMap map("m");
    GraphBuilder g;
    const uint32_t a = g.input({4});
    const uint32_t y = g.output({4});
    g.node(schema::OpKind_ELU, {a}, {y}, -INFINITY, INFINITY, /*alpha=*/NAN);
    EXPECT_EQ(init_error(g.build(), &map), Error::InvalidProgram);
  }
  {
    InMemoryDataMap map("m");
    GraphBuilder g;
    const uint32_t a = g.input({4, 2});
    const uint32_t y = g.output({3, 3});
    g.node(schema::OpKind_COPY, {a}, {y});
    EXPECT_EQ(init_error(g.build(), &map), Error::InvalidProgram);
  }
  {
    InMemoryDataMap map("m");
    GraphBuilder g;
    const uint32_t a = g.input({1u << 20, 1u << 20});
    const uint32_t y = g.output({1u << 20, 1u << 20});
    g.node(schema::OpKind_ABS, {a}, {y});
    EXPECT_EQ(init_error(g.build(), &map), Error::InvalidProgram);
  }
}

TEST_F(XnnExecutorTest, mean_last_dim_output_must_hold_one_mean_per_row) {
  const std::vector<std::vector<uint32_t>> bad_outputs = {{2, 3, 5}, {2, 5}, {6}, {3, 2, 1}};
  for (const std::vector<uint32_t>& bad : bad_outputs) {
    InMemoryDataMap map("m");
    GraphBuilder g;
    const uint32_t x = g.input({2, 3, 5});
    const uint32_t y = g.output(bad);
    g.node(schema::OpKind_MEAN_LAST_DIM, {x}, {y});
    auto d = TestDelegate::init(g.build(), &map);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), Error::InvalidProgram);
    const std::string message = d.status().message();
    EXPECT_NE(message.find("MEAN_LAST_DIM"), std::string::npos) << message;
    EXPECT_NE(message.find("[2, 3, 1] or [2, 3]"), std::string::npos) << message;
  }
  InMemoryDataMap map("m");
  GraphBuilder g;
  const uint32_t x = g.input({});
  const uint32_t y = g.output({});
  g.node(schema::OpKind_MEAN_LAST_DIM, {x}, {y});
  EXPECT_EQ(init_error(g.build(), &map), Error::InvalidProgram);
}

TEST_F(XnnExecutorTest, execute_checks_args) {
  ValidGraph v;
  auto d = TestDelegate::init(v.blob, &v.map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  HostTensor x{{2, 8}, std::vector<float>(16, 0.5f)};
  HostTensor y{{2, 4}, std::vector<float>(8)};
  EXPECT_TRUE(d->run({&x}, {&y}).ok());
  EXPECT_EQ(d->run({&x}, {}).code(), Error::InvalidArgument);
  EXPECT_EQ(d->run({&x, &x}, {&y}).code(), Error::InvalidArgument);
  HostTensor wrong_shape{{2, 7}, std::vector<float>(14)};
  EXPECT_EQ(d->run({&wrong_shape}, {&y}).code(), Error::InvalidArgument);
  HostTensor wrong_rank{{16}, std::vector<float>(16)};
  EXPECT_EQ(d->run({&wrong_rank}, {&y}).code(), Error::InvalidArgument);

  std::vector<int32_t> ints(16);
  runtime::EValue xi(runtime::Tensor(runtime::ScalarType::Int, {2, 8}, ints.data()));
  runtime::EValue yo(runtime::Tensor(runtime::ScalarType::Float, {2, 4}, y.data.data()));
  runtime::EValue* args[] = {&xi, &yo};
  EXPECT_EQ(d->execute(runtime::Span<runtime::EValue* const>(args, 2)).code(),
            Error::InvalidArgument);
  runtime::EValue not_tensor(int64_t{3});
  runtime::EValue* args2[] = {&not_tensor, &yo};
  EXPECT_EQ(d->execute(runtime::Span<runtime::EValue* const>(args2, 2)).code(),
            Error::InvalidArgument);
  const std::string message = d->run({&wrong_shape}, {&y}).message();
  EXPECT_NE(message.find("arg 0"), std::string::npos) << message;
}

TEST_F(XnnExecutorTest, backend_is_registered_and_available) {
  const runtime::BackendInterface* backend = runtime::get_backend("XnnpackBackend");
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend, &xnnpack_backend());
  EXPECT_TRUE(backend->is_available());
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
