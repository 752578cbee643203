// What users rely on from the weights cache: the foundation is fetched and packed once across
// programs, identity is the digest (never the key), entries go when their last user goes, and
// unpacked bytes are given back right after packing.

#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"

#include <gtest/gtest.h>

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

constexpr uint32_t kBatch = 4, kIn = 32, kOut = 16, kRank = 4;

// Foundation weight shared by every program (same bytes, possibly under another key).
const std::vector<float>& foundation_weight() {
  static const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 10);
  return w;
}

struct LoraProgram {
  std::vector<uint8_t> blob;
  std::vector<float> a, b;  // Adapter weights [kRank, kIn] and [kOut, kRank].
};

// y = x W^T + (x A^T) B^T: the base FC over the foundation weight plus a rank-4 adapter.
LoraProgram make_lora_program(InMemoryDataMap* map, const std::string& base_key,
                              const std::string& adapter, uint32_t seed) {
  LoraProgram p;
  p.a = random_floats(kRank * kIn, -1, 1, seed);
  p.b = random_floats(kOut * kRank, -1, 1, seed + 1);
  GraphBuilder g;
  const uint32_t x = g.input({kBatch, kIn});
  const uint32_t w = g.named(base_key, {kOut, kIn}, map->add(base_key, foundation_weight()));
  const uint32_t a = g.named(adapter + ".lora_A", {kRank, kIn}, map->add(adapter + ".lora_A", p.a));
  const uint32_t b = g.named(adapter + ".lora_B", {kOut, kRank}, map->add(adapter + ".lora_B", p.b));
  const uint32_t h = g.intermediate({kBatch, kOut});
  const uint32_t t = g.intermediate({kBatch, kRank});
  const uint32_t u = g.intermediate({kBatch, kOut});
  const uint32_t y = g.output({kBatch, kOut});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, w}, {h});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, a}, {t});
  g.node(schema::OpKind_FULLY_CONNECTED, {t, b}, {u});
  g.node(schema::OpKind_ADD, {h, u}, {y});
  p.blob = g.build();
  return p;
}

std::vector<float> matmul_t(const std::vector<float>& x, const std::vector<float>& w, size_t batch,
                            size_t in, size_t out) {
  std::vector<float> y(batch * out, 0.0f);
  for (size_t n = 0; n < batch; ++n)
    for (size_t o = 0; o < out; ++o) {
      double acc = 0;
      for (size_t i = 0; i < in; ++i) acc += double(x[n * in + i]) * w[o * in + i];
      y[n * out + o] = float(acc);
    }
  return y;
}

std::vector<float> lora_reference(const LoraProgram& p, const std::vector<float>& x) {
  std::vector<float> y = matmul_t(x, foundation_weight(), kBatch, kIn, kOut);
  const std::vector<float> t = matmul_t(x, p.a, kBatch, kIn, kRank);
  const std::vector<float> u = matmul_t(t, p.b, kBatch, kRank, kOut);
  for (size_t i = 0; i < y.size(); ++i) y[i] += u[i];
  return y;
}

void expect_runs_correctly(TestDelegate* d, const LoraProgram& p) {
  HostTensor x{{kBatch, kIn}, random_floats(kBatch * kIn, -1, 1, 99)};
  HostTensor y{{kBatch, kOut}, std::vector<float>(kBatch * kOut)};
  auto status = d->run({&x}, {&y});
  ASSERT_TRUE(status.ok()) << status.message();
  expect_near_relative(y.data, lora_reference(p, x.data), "lora");
}

class WeightsCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_weight_sharing(true);
    reset_weights_cache_counters();
    ASSERT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
  }
  void TearDown() override { set_weight_sharing(true); }
};

TEST_F(WeightsCacheTest, second_program_fetches_no_foundation_key) {
  // Two programs, two maps (as two .pte files would give), the foundation renamed in the second.
  InMemoryDataMap map_a("lora_a.pte+foundation.ptd"), map_b("lora_b.pte+foundation.ptd");
  LoraProgram pa = make_lora_program(&map_a, "layers.0.weight", "adapter_a", 20);
  LoraProgram pb = make_lora_program(&map_b, "layers.0.base.weight", "adapter_b", 30);
  {
    auto a = TestDelegate::init(pa.blob, &map_a, "forward");
    ASSERT_TRUE(a.ok()) << a.status().message();
    const size_t fetches_after_a = map_a.get_data_calls();
    auto b = TestDelegate::init(pb.blob, &map_b, "forward");
    ASSERT_TRUE(b.ok()) << b.status().message();

    EXPECT_EQ(map_a.get_data_calls("layers.0.weight"), 1u);
    EXPECT_EQ(map_a.get_data_calls(), fetches_after_a);
    // The second init costs no foundation fetch at all, only its adapters.
    EXPECT_EQ(map_b.calls("layers.0.base.weight"), 0u);  // Not even get_digest.
    EXPECT_EQ(map_b.get_data_calls("adapter_b.lora_A"), 1u);
    EXPECT_EQ(map_b.get_data_calls("adapter_b.lora_B"), 1u);

    WeightsCacheStats stats = process_weights_cache_stats();
    EXPECT_EQ(stats.packs, 5u);  // W once, two adapters x two matrices.
    EXPECT_EQ(stats.cache_hits, 1u);
    EXPECT_EQ(stats.num_packed_entries, 5u);
    EXPECT_EQ(stats.named_data_fetches.count("layers.0.base.weight"), 0u);
    EXPECT_EQ(stats.bytes_fetched,
              sizeof(float) * (kOut * kIn + 2 * (kRank * kIn + kOut * kRank)));
    EXPECT_TRUE(stats.unpacked_data_names.empty());

    expect_runs_correctly(&*a, pa);
    expect_runs_correctly(&*b, pb);
  }
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

TEST_F(WeightsCacheTest, sharing_off_gives_each_handle_its_own_packs) {
  set_weight_sharing(false);
  InMemoryDataMap map_a("a"), map_b("b");
  LoraProgram pa = make_lora_program(&map_a, "layers.0.weight", "adapter_a", 20);
  LoraProgram pb = make_lora_program(&map_b, "layers.0.weight", "adapter_b", 30);
  {
    auto a = TestDelegate::init(pa.blob, &map_a);
    ASSERT_TRUE(a.ok()) << a.status().message();
    auto b = TestDelegate::init(pb.blob, &map_b);
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(map_a.get_data_calls("layers.0.weight"), 1u);
    EXPECT_EQ(map_b.get_data_calls("layers.0.weight"), 1u);
    WeightsCacheStats stats = process_weights_cache_stats();
    EXPECT_EQ(stats.packs, 6u);
    EXPECT_EQ(stats.cache_hits, 0u);
    EXPECT_EQ(stats.named_data_fetches["layers.0.weight"], 2u);
    EXPECT_EQ(stats.num_packed_entries, 6u);
    expect_runs_correctly(&*a, pa);
    expect_runs_correctly(&*b, pb);
  }
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

TEST_F(WeightsCacheTest, colliding_keys_with_different_digests_do_not_share) {
  const std::vector<float> w1 = random_floats(kOut * kIn, -1, 1, 41);
  const std::vector<float> w2 = random_floats(kOut * kIn, -1, 1, 42);
  InMemoryDataMap map1("model1.ptd"), map2("model2.ptd");
  auto build = [](InMemoryDataMap* map, const std::vector<float>& w) {
    GraphBuilder g;
    const uint32_t x = g.input({kBatch, kIn});
    const uint32_t wid = g.named("linear.weight", {kOut, kIn}, map->add("linear.weight", w));
    const uint32_t y = g.output({kBatch, kOut});
    g.node(schema::OpKind_FULLY_CONNECTED, {x, wid}, {y});
    return g.build();
  };
  const std::vector<uint8_t> blob1 = build(&map1, w1), blob2 = build(&map2, w2);
  auto d1 = TestDelegate::init(blob1, &map1);
  ASSERT_TRUE(d1.ok()) << d1.status().message();
  auto d2 = TestDelegate::init(blob2, &map2);
  ASSERT_TRUE(d2.ok()) << d2.status().message();
  EXPECT_EQ(map1.get_data_calls("linear.weight"), 1u);
  EXPECT_EQ(map2.get_data_calls("linear.weight"), 1u);
  EXPECT_EQ(process_weights_cache_stats().packs, 2u);
  EXPECT_EQ(process_weights_cache_stats().cache_hits, 0u);

  HostTensor x{{kBatch, kIn}, random_floats(kBatch * kIn, -1, 1, 43)};
  HostTensor y1{{kBatch, kOut}, std::vector<float>(kBatch * kOut)};
  HostTensor y2 = y1;
  ASSERT_TRUE(d1->run({&x}, {&y1}).ok());
  ASSERT_TRUE(d2->run({&x}, {&y2}).ok());
  expect_near_relative(y1.data, matmul_t(x.data, w1, kBatch, kIn, kOut), "model1");
  expect_near_relative(y2.data, matmul_t(x.data, w2, kBatch, kIn, kOut), "model2");
}

TEST_F(WeightsCacheTest, digest_in_map_must_match_graph) {
  InMemoryDataMap map("foundation.ptd");
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 44);
  map.add("layers.0.weight", w);
  GraphBuilder g;
  const uint32_t x = g.input({kBatch, kIn});
  // The graph was exported against other bytes under the same key.
  const uint32_t wid = g.named("layers.0.weight", {kOut, kIn},
                               InMemoryDataMap::digest_of(random_floats(kOut * kIn, -1, 1, 45)));
  const uint32_t y = g.output({kBatch, kOut});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, wid}, {y});
  auto d = TestDelegate::init(g.build(), &map);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), runtime::Error::InvalidData);
  EXPECT_NE(std::string(d.status().message()).find("layers.0.weight"), std::string::npos)
      << d.status().message();
  EXPECT_EQ(map.get_data_calls(), 0u);
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

TEST_F(WeightsCacheTest, missing_key_names_key_and_map) {
  InMemoryDataMap map("foundation.ptd");
  GraphBuilder g;
  const uint32_t x = g.input({kBatch, kIn});
  const uint32_t wid = g.named("layers.9.weight", {kOut, kIn}, runtime::Digest{});
  const uint32_t y = g.output({kBatch, kOut});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, wid}, {y});
  auto d = TestDelegate::init(g.build(), &map);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), runtime::Error::NotFound);
  const std::string message = d.status().message();
  EXPECT_NE(message.find("layers.9.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("foundation.ptd"), std::string::npos) << message;
}

TEST_F(WeightsCacheTest, unpacked_buffers_are_freed_after_packing) {
  InMemoryDataMap map("p.ptd");
  LoraProgram p = make_lora_program(&map, "layers.0.weight", "adapter", 50);
  auto d = TestDelegate::init(p.blob, &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  // Still loaded, yet every fetched buffer has already been given back.
  EXPECT_EQ(map.get_data_calls(), 3u);
  EXPECT_EQ(map.frees(), 3u);
  EXPECT_TRUE(process_weights_cache_stats().unpacked_data_names.empty());
  expect_runs_correctly(&*d, p);
}

TEST_F(WeightsCacheTest, destroying_every_handle_empties_the_cache) {
  InMemoryDataMap map("p.ptd");
  LoraProgram p = make_lora_program(&map, "layers.0.weight", "adapter", 60);
  {
    auto d1 = TestDelegate::init(p.blob, &map);
    ASSERT_TRUE(d1.ok());
    {
      auto d2 = TestDelegate::init(p.blob, &map);
      ASSERT_TRUE(d2.ok());
      EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 3u);
    }
    // One user left: the entries stay.
    WeightsCacheStats stats = process_weights_cache_stats();
    EXPECT_EQ(stats.num_packed_entries, 3u);
    EXPECT_EQ(stats.packed_data_names,
              (std::vector<std::string>{"adapter.lora_A", "adapter.lora_B", "layers.0.weight"}));
    expect_runs_correctly(&*d1, p);
  }
  WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.num_packed_entries, 0u);
  EXPECT_TRUE(stats.packed_data_names.empty());
}

TEST_F(WeightsCacheTest, bias_and_no_bias_are_different_entries) {
  InMemoryDataMap map("m.ptd");
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 70);
  const std::vector<float> zeros(kOut, 0.0f);
  GraphBuilder g;
  const uint32_t x = g.input({kBatch, kIn});
  const uint32_t wid = g.named("w", {kOut, kIn}, map.add("w", w));
  const uint32_t bid = g.named("b", {kOut}, map.add("b", zeros));
  const uint32_t y1 = g.output({kBatch, kOut});
  const uint32_t y2 = g.output({kBatch, kOut});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, wid}, {y1});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, wid, bid}, {y2});
  auto d = TestDelegate::init(g.build(), &map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 2u);
  // The weight was fetched for each pack (the first buffer was freed after packing).
  EXPECT_EQ(map.get_data_calls("w"), 2u);
}

TEST_F(WeightsCacheTest, load_and_free_unpacked_data_directly) {
  InMemoryDataMap map("m.ptd");
  ConstantRef ref;
  ref.key = "k";
  ref.identity.dims = {4};
  ref.identity.digest = map.add("k", {1, 2, 3, 4});
  WeightsCache cache;
  auto first = cache.load_unpacked_data(&map, ref);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto again = cache.load_unpacked_data(&map, ref);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(map.get_data_calls("k"), 1u);
  EXPECT_EQ(cache.get_unpacked_data_names(), std::vector<std::string>{"k"});
  EXPECT_EQ(static_cast<const float*>(*first)[2], 3.0f);
  cache.free_unpacked_data();
  EXPECT_TRUE(cache.get_unpacked_data_names().empty());
  EXPECT_EQ(map.frees(), 1u);
  EXPECT_EQ(cache.stats().named_data_fetches.at("k"), 1u);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
