// FULLY_CONNECTED through the delegate, shared and private, against a naive reference.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/xnn_executor.h"
#include "edgeshare/runtime/core/scoped_threads.h"

namespace edgeshare {
namespace xnnpack {
namespace {

class FullyConnected : public ::testing::TestWithParam<bool> {};

TEST_P(FullyConnected, with_bias) {
  LinearTester()
      .input_channels(64)
      .output_channels(32)
      .batch_size(5)
      .has_bias(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, without_bias) {
  LinearTester()
      .input_channels(23)
      .output_channels(17)
      .batch_size(3)
      .has_bias(false)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, batch_is_product_of_leading_dims) {
  LinearTester()
      .input_channels(16)
      .output_channels(8)
      .batch_dims({2, 3})
      .has_bias(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, batch_one) {
  LinearTester()
      .input_channels(128)
      .output_channels(64)
      .batch_size(1)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, output_clamp_is_applied_outside_the_shared_operator) {
  LinearTester()
      .input_channels(32)
      .output_channels(16)
      .batch_size(4)
      .output_range(0.0f, 0.5f)
      .share_weights(GetParam())
      .Test();
}

// Weights larger than the cache's default column slab (L2/8: 256 KiB here, 128 KiB where the L2
// size is unknown) are packed as several slab operators, each writing its own output columns;
// every slab runs over all rows on one thread, or one pool thread each with 2 threads.
TEST_P(FullyConnected, weight_larger_than_a_slab) {
  for (size_t threads : {1u, 2u}) {
    const runtime::ScopedThreads scoped(threads);
    LinearTester()
        .input_channels(512)
        .output_channels(544)
        .batch_size(9)
        .has_bias(true)
        .share_weights(GetParam())
        .Test();
  }
}

TEST_P(FullyConnected, fp16_weight_larger_than_a_slab) {
  for (size_t threads : {1u, 2u}) {
    const runtime::ScopedThreads scoped(threads);
    LinearTester()
        .input_channels(256)
        .output_channels(1088)
        .batch_size(3)
        .has_bias(true)
        .weight_dtype_fp16(true)
        .share_weights(GetParam())
        .Test();
  }
}

// int8 weights (the exporter's quantize="int8"): the delegate's int8 kernels over its own packing,
// keyed by scheme, weight, scales and bias; equal to the same computation in the tester.
TEST_P(FullyConnected, int8_with_bias_odd_sizes) {
  LinearTester()
      .input_channels(36)
      .output_channels(21)
      .batch_size(5)
      .has_bias(true)
      .weight_int8(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, int8_without_bias_one_row) {
  LinearTester()
      .input_channels(64)
      .output_channels(48)
      .batch_size(1)
      .has_bias(false)
      .weight_int8(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, int8_batch_is_product_of_leading_dims) {
  LinearTester()
      .input_channels(32)
      .output_channels(40)
      .batch_dims({2, 3})
      .weight_int8(true)
      .share_weights(GetParam())
      .Test();
}

// Several slabs, each run over the rows quantized once, on one thread or one pool thread each.
TEST_P(FullyConnected, int8_weight_larger_than_a_slab) {
  for (size_t threads : {1u, 2u}) {
    const runtime::ScopedThreads scoped(threads);
    for (size_t batch : {1u, 9u}) {
      LinearTester()
          .input_channels(512)
          .output_channels(1088)
          .batch_size(batch)
          .has_bias(true)
          .weight_int8(true)
          .share_weights(GetParam())
          .Test();
    }
  }
}

// int4 weights in groups (the exporter's quantize="int4"): the delegate's int4 kernels, every group
// size, no bias, rank-3 input, and several slabs on one thread or one pool thread each.
TEST_P(FullyConnected, int4_every_group_size) {
  for (size_t group : {32u, 64u, 128u}) {
    LinearTester()
        .input_channels(256)
        .output_channels(37)
        .batch_size(5)
        .has_bias(true)
        .weight_int4(group)
        .share_weights(GetParam())
        .Test();
  }
}

TEST_P(FullyConnected, int4_without_bias_rank3) {
  LinearTester()
      .input_channels(64)
      .output_channels(48)
      .batch_dims({2, 3})
      .has_bias(false)
      .weight_int4(32)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, int4_weight_larger_than_a_slab) {
  for (size_t threads : {1u, 2u}) {
    const runtime::ScopedThreads scoped(threads);
    for (size_t batch : {1u, 9u}) {
      LinearTester()
          .input_channels(1024)
          .output_channels(1088)
          .batch_size(batch)
          .has_bias(true)
          .weight_int4(32)
          .share_weights(GetParam())
          .Test();
    }
  }
}

// fp16 weights (the exporter's fc_weight_dtype="fp16"): an f16 operator in the weights cache, fed
// through per-handle f32<->f16 converts; fetched and packed once with sharing, twice without.
TEST_P(FullyConnected, fp16_with_bias) {
  LinearTester()
      .input_channels(64)
      .output_channels(32)
      .batch_size(5)
      .has_bias(true)
      .weight_dtype_fp16(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, fp16_without_bias_odd_sizes) {
  LinearTester()
      .input_channels(23)
      .output_channels(17)
      .batch_size(3)
      .has_bias(false)
      .weight_dtype_fp16(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, fp16_batch_is_product_of_leading_dims) {
  LinearTester()
      .input_channels(16)
      .output_channels(8)
      .batch_dims({2, 3})
      .has_bias(true)
      .weight_dtype_fp16(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, fp16_wide_input) {
  LinearTester()
      .input_channels(512)
      .output_channels(64)
      .batch_size(4)
      .has_bias(true)
      .weight_dtype_fp16(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(FullyConnected, fp16_output_clamp) {
  LinearTester()
      .input_channels(32)
      .output_channels(16)
      .batch_size(4)
      .output_range(0.0f, 0.5f)
      .weight_dtype_fp16(true)
      .share_weights(GetParam())
      .Test();
}

// The same weight as f32 and as f16 in one graph: two entries (the op kind and the identity's
// dtype differ), each fetched once however many handles use them.
TEST(FullyConnectedF16, f32_and_f16_entries_never_mix) {
  InMemoryDataMap map("foundation.ptd");
  std::vector<float> w = random_floats(8 * 16, -1, 1, 1);
  for (float& v : w) v = round_to_half(v);
  GraphBuilder g;
  const uint32_t x = g.input({2, 16});
  const uint32_t w32 = g.named("w", {8, 16}, map.add("w", w));
  const uint32_t w16 = g.named("w.fp16", {8, 16}, map.add("w.fp16", pack_halves(w)));
  g.set_dtype(w16, edgeshare::schema::ScalarType_HALF);
  const uint32_t a = g.intermediate({2, 8});
  const uint32_t b = g.intermediate({2, 8});
  const uint32_t y = g.output({2, 8});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, w32}, {a});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, w16}, {b});
  g.node(schema::OpKind_SUBTRACT, {a, b}, {y});
  const std::vector<float> input = random_floats(2 * 16, -1, 1, 3);
  // Both compute the same product of the same weight values in f32, so they agree to rounding.
  run_two_handles(g.build(), map, {"w", "w.fp16"}, /*packs_per_handle=*/2,
                  /*retained_per_handle=*/0, /*share=*/true, {HostTensor{{2, 16}, input}}, {2, 8},
                  std::vector<float>(16, 0.0f), 1e-6f);
}

// Random int8 values carried in floats (InMemoryDataMap holds float entries).
std::vector<float> random_bytes(size_t count, uint32_t seed) {
  std::vector<float> out((count + 3) / 4, 0.0f);
  std::vector<int8_t> bytes(count);
  const std::vector<float> values = random_floats(count, -127, 127, seed);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<int8_t>(std::lrint(values[i]));
  std::memcpy(out.data(), bytes.data(), count);
  return out;
}

// An [out, kSharedIn] weight in `g`: int8 per row (qc8w) or int4 in groups of 32 (qc4w), random.
constexpr uint32_t kSharedIn = 64, kSharedRows = 5;

uint32_t quantized_weight(GraphBuilder* g, InMemoryDataMap* map, const std::string& key,
                          uint32_t out, bool int4, uint32_t seed) {
  const std::string wkey = key + (int4 ? ".qc4w" : ".qc8w");
  const uint32_t w = g->named(wkey, {out, kSharedIn},
                              map->add(wkey, random_bytes(out * kSharedIn / (int4 ? 2 : 1), seed)));
  const std::string skey = wkey + ".scales";
  if (int4) {
    g->set_qc4w(
        w, skey,
        map->add(skey, pack_halves(random_floats(out * kSharedIn / 32, 0.01f, 0.02f, seed + 1))),
        32);
  } else {
    g->set_qc8w(w, skey, map->add(skey, random_floats(out, 0.001f, 0.002f, seed + 1)));
  }
  return w;
}

// One fully connected node over the weight `key` alone, run on `input`.
std::vector<float> run_alone(const std::string& key, uint32_t out, bool int4, uint32_t seed,
                             const std::vector<float>& input) {
  InMemoryDataMap map("alone.ptd");
  GraphBuilder g;
  const uint32_t x = g.input({kSharedRows, kSharedIn});
  const uint32_t w = quantized_weight(&g, &map, key, out, int4, seed);
  g.node(schema::OpKind_FULLY_CONNECTED, {x, w}, {g.output({kSharedRows, out})});
  auto d = TestDelegate::init(g.build(), &map);
  EXPECT_TRUE(d.ok()) << d.status().message();
  HostTensor xt{{kSharedRows, kSharedIn}, input};
  HostTensor yt{{kSharedRows, static_cast<int32_t>(out)}, std::vector<float>(kSharedRows * out)};
  EXPECT_TRUE(d->run({&xt}, {&yt}).ok());
  return yt.data;
}

// Three fully connected nodes over one input (int8, int8, int4: one quantizer) quantize it once:
// the later two read the first one's scratch, which outlives a value written between them that
// would otherwise take its bytes. Every output has the bits of its node run alone.
TEST(FullyConnectedShared, nodes_over_one_input_quantize_it_once) {
  for (size_t threads : {1u, 2u}) {
    const runtime::ScopedThreads scoped(threads);
    InMemoryDataMap map("foundation.ptd");
    GraphBuilder g;
    const uint32_t x = g.input({kSharedRows, kSharedIn});
    const uint32_t w1 = quantized_weight(&g, &map, "q", 48, false, 10);
    const uint32_t w2 = quantized_weight(&g, &map, "k", 40, false, 20);
    const uint32_t w3 = quantized_weight(&g, &map, "up", 96, true, 30);
    const uint32_t h = g.intermediate({kSharedRows, 48});
    const uint32_t z = g.intermediate({kSharedRows, 48});
    const uint32_t y2 = g.output({kSharedRows, 40});
    const uint32_t y3 = g.output({kSharedRows, 96});
    const uint32_t ya = g.output({kSharedRows, 48});
    g.node(schema::OpKind_FULLY_CONNECTED, {x, w1}, {h});
    g.node(schema::OpKind_MULTIPLY, {h, h}, {z});
    g.node(schema::OpKind_FULLY_CONNECTED, {x, w2}, {y2});
    g.node(schema::OpKind_FULLY_CONNECTED, {x, w3}, {y3});
    g.node(schema::OpKind_ABS, {z}, {ya});
    const std::vector<uint8_t> blob = g.build();
    auto executor = XnnExecutor::create(blob.data(), blob.size(), &map, /*share_weights=*/true);
    ASSERT_TRUE(executor.ok()) << executor.status().message();
    EXPECT_EQ((*executor)->shared_quantized_inputs(), 2u);

    const std::vector<float> input = random_floats(kSharedRows * kSharedIn, -1, 1, 3);
    auto d = TestDelegate::init(blob, &map);
    ASSERT_TRUE(d.ok()) << d.status().message();
    HostTensor xt{{kSharedRows, kSharedIn}, input};
    HostTensor t2{{kSharedRows, 40}, std::vector<float>(kSharedRows * 40)};
    HostTensor t3{{kSharedRows, 96}, std::vector<float>(kSharedRows * 96)};
    HostTensor ta{{kSharedRows, 48}, std::vector<float>(kSharedRows * 48)};
    ASSERT_TRUE(d->run({&xt}, {&t2, &t3, &ta}).ok());
    std::vector<float> want_a = run_alone("q", 48, false, 10, input);
    for (float& v : want_a) v = std::fabs(v * v);
    EXPECT_EQ(t2.data, run_alone("k", 40, false, 20, input)) << threads << " threads";
    EXPECT_EQ(t3.data, run_alone("up", 96, true, 30, input)) << threads << " threads";
    EXPECT_EQ(ta.data, want_a) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(SharingOnAndOff, FullyConnected, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "shared" : "private";
                         });

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
