// What users rely on from the weights cache: the foundation is fetched and packed once across
// programs, identity is the digest (never the key), entries go when their last user goes, unpacked
// bytes are given back right after packing, and fetched bytes are checked against their SHA-256
// before anything built from them is shared (a changed file fails alone and poisons nothing).

#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/core/scoped_threads.h"

namespace edgeshare {
namespace xnnpack {
namespace {

constexpr uint32_t kBatch = 4, kIn = 32, kOut = 16, kRank = 4;

// Foundation weight shared by every program (same bytes, possibly under another key).
const std::vector<float>& foundation_weight() {
  static const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 10);
  return w;
}

// The foundation's bytes with one bit flipped: a data file changed after export, its recorded
// digest kept.
const std::vector<float>& tampered_foundation_weight() {
  static const std::vector<float> w = [] {
    std::vector<float> t = foundation_weight();
    uint32_t bits;
    std::memcpy(&bits, &t[7], sizeof(bits));
    bits ^= 1u << 20;
    std::memcpy(&t[7], &bits, sizeof(bits));
    return t;
  }();
  return w;
}

struct LoraProgram {
  std::vector<uint8_t> blob;
  std::vector<float> a, b;  // Adapter weights [kRank, kIn] and [kOut, kRank].
};

// y = x W^T + (x A^T) B^T: the base FC over the foundation weight plus a rank-4 adapter. With
// `tampered_base` the map holds tampered_foundation_weight() under the foundation's digest.
LoraProgram make_lora_program(InMemoryDataMap* map, const std::string& base_key,
                              const std::string& adapter, uint32_t seed,
                              bool tampered_base = false) {
  LoraProgram p;
  p.a = random_floats(kRank * kIn, -1, 1, seed);
  p.b = random_floats(kOut * kRank, -1, 1, seed + 1);
  GraphBuilder g;
  const uint32_t x = g.input({kBatch, kIn});
  const runtime::Digest base_digest =
      tampered_base ? map->add(base_key, tampered_foundation_weight(),
                               InMemoryDataMap::digest_of(foundation_weight()))
                    : map->add(base_key, foundation_weight());
  const uint32_t w = g.named(base_key, {kOut, kIn}, base_digest);
  const uint32_t a = g.named(adapter + ".lora_A", {kRank, kIn}, map->add(adapter + ".lora_A", p.a));
  const uint32_t b =
      g.named(adapter + ".lora_B", {kOut, kRank}, map->add(adapter + ".lora_B", p.b));
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

std::vector<float> lora_reference(const LoraProgram& p, const std::vector<float>& x,
                                  const std::vector<float>& base = foundation_weight()) {
  std::vector<float> y = matmul_t(x, base, kBatch, kIn, kOut);
  const std::vector<float> t = matmul_t(x, p.a, kBatch, kIn, kRank);
  const std::vector<float> u = matmul_t(t, p.b, kBatch, kRank, kOut);
  for (size_t i = 0; i < y.size(); ++i) y[i] += u[i];
  return y;
}

void expect_runs_correctly(TestDelegate* d, const LoraProgram& p,
                           const std::vector<float>& base = foundation_weight()) {
  HostTensor x{{kBatch, kIn}, random_floats(kBatch * kIn, -1, 1, 99)};
  HostTensor y{{kBatch, kOut}, std::vector<float>(kBatch * kOut)};
  auto status = d->run({&x}, {&y});
  ASSERT_TRUE(status.ok()) << status.message();
  expect_near_relative(y.data, lora_reference(p, x.data, base), "lora");
}

void expect_names(const runtime::Status& status, runtime::Error code,
                  const std::vector<std::string>& words) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), code) << status.message();
  for (const std::string& word : words) {
    EXPECT_NE(std::string(status.message()).find(word), std::string::npos)
        << "'" << word << "' not in: " << status.message();
  }
}

class WeightsCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_weight_sharing(true);
    set_verify_content(true);
    reset_weights_cache_counters();
    ASSERT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
  }
  void TearDown() override {
    set_weight_sharing(true);
    set_verify_content(true);
  }
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
    EXPECT_EQ(stats.bytes_fetched, sizeof(float) * (kOut * kIn + 2 * (kRank * kIn + kOut * kRank)));
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

// A weight of kSlabOut x kSlabIn in 2 KiB slabs: 4 slabs (widths are multiples of 32 output
// channels), the last one narrower (200 = 3 x 64 + 8).
constexpr uint32_t kSlabIn = 64, kSlabOut = 200;
constexpr size_t kSlabBytes = 2048;

// y = x W^T + b over the cache's entry `op`, against a double reference, for several batches.
void expect_slabbed_entry_computes(PackedOperator* op, const std::vector<float>& w,
                                   const std::vector<float>& b, const std::string& what) {
  for (size_t batch : {1u, 3u, 32u}) {
    const std::vector<float> x =
        random_floats(batch * kSlabIn, -1, 1, static_cast<uint32_t>(batch));
    std::vector<float> want(batch * kSlabOut), got(batch * kSlabOut, -7.0f);
    for (size_t n = 0; n < batch; ++n) {
      for (size_t o = 0; o < kSlabOut; ++o) {
        double acc = b[o];
        for (size_t i = 0; i < kSlabIn; ++i) acc += double(x[n * kSlabIn + i]) * w[o * kSlabIn + i];
        want[n * kSlabOut + o] = static_cast<float>(acc);
      }
    }
    // f16 weights take f32 activations and give f32 outputs, as f32 ones do.
    const runtime::Status status =
        op->run_fully_connected(batch, x.data(), got.data(), threadpool());
    ASSERT_TRUE(status.ok()) << status.message();
    expect_near_relative(got, want, what + " batch " + std::to_string(batch), 1e-4f);
  }
}

// Column slabs are one entry: one fetch, one pack, one hash; every slab writes its own columns of
// the output (the ragged last one too) at 1 and 2 threads.
TEST_F(WeightsCacheTest, slabbed_entry_is_one_pack_and_computes_every_column) {
  for (bool f16 : {false, true}) {
    {
      reset_weights_cache_counters();
      WeightsCache cache(kSlabBytes);
      std::vector<float> w = random_floats(kSlabOut * kSlabIn, -1, 1, 5);
      std::vector<float> b = random_floats(kSlabOut, -1, 1, 6);
      if (f16) {
        for (float& v : w) v = round_to_half(v);
        for (float& v : b) v = round_to_half(v);
      }
      InMemoryDataMap map("slabs.ptd");
      ConstantRef weight{"w", {}}, bias{"b", {}};
      weight.identity.dims = {kSlabOut, kSlabIn};
      bias.identity.dims = {kSlabOut};
      const auto dtype = f16 ? runtime::ScalarType::Half : runtime::ScalarType::Float;
      weight.identity.dtype = bias.identity.dtype = dtype;
      weight.identity.digest = map.add("w", f16 ? pack_halves(w) : w);
      bias.identity.digest = map.add("b", f16 ? pack_halves(b) : b);
      auto op = cache.get_or_pack_fully_connected(&map, weight, &bias, kSlabIn, kSlabOut);
      ASSERT_TRUE(op.ok()) << op.status().message();
      EXPECT_EQ((*op)->num_slabs(), 4u);
      const WeightsCacheStats stats = cache.stats();
      EXPECT_EQ(stats.packs, 1u);
      EXPECT_EQ(stats.num_packed_entries, 1u);
      EXPECT_EQ(stats.verifications, 2u);  // Weight and bias, each hashed whole once.
      EXPECT_EQ(map.get_data_calls("w"), 1u);
      for (size_t threads : {1u, 2u}) {
        const runtime::ScopedThreads scoped(threads);
        expect_slabbed_entry_computes(
            *op, w, b, std::string(f16 ? "f16" : "f32") + " threads " + std::to_string(threads));
      }
      cache.release(*op);
      EXPECT_EQ(cache.get_num_packed_data(), 0u);
    }
  }
}

// One run of a [kBitOut, kBitIn] weight with bias over `rows` rows (at most kBitRows) through a
// fresh cache with `slab_bytes`; returns the output and the entry's slab count.
constexpr size_t kBitIn = 512, kBitOut = 544, kBitRows = 5;

runtime::Result<std::vector<float>> run_through_cache(bool f16, size_t slab_bytes, size_t rows,
                                                      size_t* slabs) {
  const std::vector<float> w = random_floats(kBitOut * kBitIn, -1, 1, 1);
  const std::vector<float> b = random_floats(kBitOut, -1, 1, 2);
  const std::vector<float> x = random_floats(kBitRows * kBitIn, -1, 1, 3);
  WeightsCache cache(slab_bytes);
  InMemoryDataMap map("m.ptd");
  ConstantRef weight{"w", {}}, bias{"b", {}};
  weight.identity.dims = {static_cast<uint32_t>(kBitOut), static_cast<uint32_t>(kBitIn)};
  bias.identity.dims = {static_cast<uint32_t>(kBitOut)};
  weight.identity.dtype = bias.identity.dtype =
      f16 ? runtime::ScalarType::Half : runtime::ScalarType::Float;
  weight.identity.digest = map.add("w", f16 ? pack_halves(w) : w);
  bias.identity.digest = map.add("b", f16 ? pack_halves(b) : b);
  ES_ASSIGN_OR_RETURN(PackedOperator * op,
                      cache.get_or_pack_fully_connected(&map, weight, &bias, kBitIn, kBitOut));
  *slabs = op->num_slabs();
  std::vector<float> y(rows * kBitOut, 0.0f);
  const runtime::Status status = op->run_fully_connected(rows, x.data(), y.data(), threadpool());
  cache.release(op);
  if (!status.ok()) return status;
  return y;
}

// Slabs change where columns are computed, not how: the output is bit for bit that of one
// operator over the whole weight (f32 and f16, 1 and 2 threads, one row and several).
TEST_F(WeightsCacheTest, slabbed_output_is_bitwise_that_of_one_operator) {
  for (bool f16 : {false, true}) {
    for (size_t threads : {1u, 2u}) {
      for (size_t rows : {size_t{1}, kBitRows}) {
        const runtime::ScopedThreads scoped(threads);
        size_t one = 0, many = 0;
        auto whole = run_through_cache(f16, 0, rows, &one);
        ASSERT_TRUE(whole.ok()) << whole.status().message();
        auto slabbed = run_through_cache(f16, 64 * 1024, rows, &many);
        ASSERT_TRUE(slabbed.ok()) << slabbed.status().message();
        EXPECT_EQ(one, 1u);
        EXPECT_EQ(many, f16 ? 9u : 17u);  // 64 KiB of 1 or 2 KiB rows, in multiples of 32 rows.
        ASSERT_EQ(whole->size(), slabbed->size());
        EXPECT_EQ(std::memcmp(whole->data(), slabbed->data(), whole->size() * sizeof(float)), 0)
            << (f16 ? "f16" : "f32") << " threads " << threads << " rows " << rows;
      }
    }
  }
}

// No slabs (slab_bytes 0), or a weight no larger than a slab: one operator.
TEST_F(WeightsCacheTest, small_weight_or_no_slab_size_is_one_operator) {
  for (size_t slab_bytes : {size_t{0}, size_t{1} << 20}) {
    WeightsCache cache(slab_bytes);
    InMemoryDataMap map("slabs.ptd");
    const std::vector<float> w = random_floats(kSlabOut * kSlabIn, -1, 1, 5);
    ConstantRef weight{"w", {}};
    weight.identity.dims = {kSlabOut, kSlabIn};
    weight.identity.digest = map.add("w", w);
    auto op = cache.get_or_pack_fully_connected(&map, weight, nullptr, kSlabIn, kSlabOut);
    ASSERT_TRUE(op.ok()) << op.status().message();
    EXPECT_EQ((*op)->num_slabs(), 1u);
    expect_slabbed_entry_computes(*op, w, std::vector<float>(kSlabOut, 0.0f), "one op");
    cache.release(*op);
  }
}

// Content verification, run with the delegate's threadpool at 1 thread (hash, then pack, on the
// calling thread), at 2 (hash and pack at once on two threads) and at 3 (three lanes of tasks).
class VerifiedCacheTest : public WeightsCacheTest, public ::testing::WithParamInterface<size_t> {
 protected:
  void SetUp() override {
    WeightsCacheTest::SetUp();
    threads_.emplace(GetParam());
  }
  void TearDown() override {
    WeightsCacheTest::TearDown();
    threads_.reset();
  }

 private:
  std::optional<runtime::ScopedThreads> threads_;
};

INSTANTIATE_TEST_SUITE_P(Threads, VerifiedCacheTest, ::testing::Values(1u, 2u, 3u));

TEST_P(VerifiedCacheTest, tampered_weight_fails_naming_key_and_file_and_caches_nothing) {
  InMemoryDataMap map("foundation.ptd");
  LoraProgram p = make_lora_program(&map, "layers.0.weight", "adapter", 80, /*tampered_base=*/true);
  auto d = TestDelegate::init(p.blob, &map);
  expect_names(d.status(), runtime::Error::InvalidData,
               {"layers.0.weight", "foundation.ptd", "SHA-256"});
  const WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.num_packed_entries, 0u);
  EXPECT_EQ(stats.packs, 0u);
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.verifications, 1u);
  EXPECT_EQ(stats.verification_failures, 1u);
  EXPECT_EQ(stats.bytes_verified, sizeof(float) * kOut * kIn);
  EXPECT_EQ(stats.named_data_fetches.at("layers.0.weight"), 1u);
  EXPECT_TRUE(stats.unpacked_data_names.empty());
  EXPECT_TRUE(stats.retained_data_names.empty());
  EXPECT_EQ(map.live_buffers(), 0u);  // The fetched bytes were given back.
}

TEST_P(VerifiedCacheTest, tampered_bias_discards_the_operator_packed_from_it) {
  InMemoryDataMap map("m.ptd");
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 81);
  const std::vector<float> bias = random_floats(kOut, -1, 1, 82);
  std::vector<float> tampered = bias;
  tampered[3] += 1.0f;
  GraphBuilder g;
  const uint32_t x = g.input({kBatch, kIn});
  const uint32_t wid = g.named("w", {kOut, kIn}, map.add("w", w));
  const uint32_t bid =
      g.named("b", {kOut}, map.add("b", tampered, InMemoryDataMap::digest_of(bias)));
  const uint32_t y = g.output({kBatch, kOut});
  g.node(schema::OpKind_FULLY_CONNECTED, {x, wid, bid}, {y});
  auto d = TestDelegate::init(g.build(), &map);
  expect_names(d.status(), runtime::Error::InvalidData, {"'b'", "m.ptd"});
  const WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.num_packed_entries, 0u);
  EXPECT_EQ(stats.packs, 0u);
  EXPECT_EQ(stats.verifications, 2u);  // Weight and bias were both hashed; the bias failed.
  EXPECT_EQ(stats.verification_failures, 1u);
  EXPECT_EQ(map.live_buffers(), 0u);
}

TEST_P(VerifiedCacheTest, poisoned_foundation_loaded_first_changes_nothing_for_an_honest_map) {
  // A bad adapter file claims the foundation's identity with other bytes and is loaded first.
  InMemoryDataMap bad("bad_adapter.pte+foundation.ptd");
  InMemoryDataMap honest("lora_a.pte+foundation.ptd");
  LoraProgram pb = make_lora_program(&bad, "layers.0.weight", "evil", 90, /*tampered_base=*/true);
  LoraProgram pa = make_lora_program(&honest, "layers.0.weight", "adapter_a", 20);
  auto poisoned = TestDelegate::init(pb.blob, &bad);
  expect_names(poisoned.status(), runtime::Error::InvalidData, {"layers.0.weight", "bad_adapter"});
  const WeightsCacheStats after_bad = process_weights_cache_stats();
  EXPECT_EQ(after_bad.num_packed_entries, 0u);
  EXPECT_EQ(after_bad.packs, 0u);

  auto a = TestDelegate::init(pa.blob, &honest);
  ASSERT_TRUE(a.ok()) << a.status().message();
  // The honest map packed the foundation from its own bytes: no entry was left to hit.
  EXPECT_EQ(honest.get_data_calls("layers.0.weight"), 1u);
  const WeightsCacheStats after_honest = process_weights_cache_stats();
  EXPECT_EQ(after_honest.cache_hits, 0u);
  EXPECT_EQ(after_honest.packs, 3u);
  EXPECT_EQ(after_honest.verification_failures, 1u);  // Only the bad map's.
  expect_runs_correctly(&*a, pa);
}

TEST_P(VerifiedCacheTest, verification_off_trusts_the_file_and_its_entries_serve_no_checked_load) {
  // Trusted-file mode: the tampered bytes are accepted as they are, and nothing is hashed.
  set_verify_content(false);
  InMemoryDataMap trusted("trusted.ptd");
  LoraProgram pt = make_lora_program(&trusted, "layers.0.weight", "t", 100, /*tampered_base=*/true);
  auto t = TestDelegate::init(pt.blob, &trusted);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(process_weights_cache_stats().verifications, 0u);
  expect_runs_correctly(&*t, pt, tampered_foundation_weight());

  // Back on: a load of the same identity does not get the unchecked entry (it packs its own,
  // checked one), while the trusted handle keeps working.
  set_verify_content(true);
  InMemoryDataMap honest("honest.ptd");
  LoraProgram ph = make_lora_program(&honest, "layers.0.weight", "h", 110);
  auto h = TestDelegate::init(ph.blob, &honest);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(honest.get_data_calls("layers.0.weight"), 1u);
  const WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.cache_hits, 0u);
  EXPECT_EQ(stats.num_packed_entries, 6u);
  EXPECT_EQ(stats.verifications, 3u);
  expect_runs_correctly(&*h, ph);
  expect_runs_correctly(&*t, pt, tampered_foundation_weight());

  // Off again: a trusted load may hit either entry (the checked one first).
  set_verify_content(false);
  InMemoryDataMap trusted2("trusted2.ptd");
  LoraProgram p2 = make_lora_program(&trusted2, "layers.0.weight", "t2", 120);
  auto t2 = TestDelegate::init(p2.blob, &trusted2);
  ASSERT_TRUE(t2.ok()) << t2.status().message();
  EXPECT_EQ(trusted2.calls("layers.0.weight"), 0u);
  EXPECT_EQ(process_weights_cache_stats().cache_hits, 1u);
  expect_runs_correctly(&*t2, p2);
}

TEST_P(VerifiedCacheTest, each_identity_is_hashed_once_while_cached) {
  InMemoryDataMap map_a("lora_a.pte+foundation.ptd"), map_b("lora_b.pte+foundation.ptd");
  LoraProgram pa = make_lora_program(&map_a, "layers.0.weight", "adapter_a", 20);
  LoraProgram pb = make_lora_program(&map_b, "layers.0.base.weight", "adapter_b", 30);
  const uint64_t adapter_bytes = sizeof(float) * (kRank * kIn + kOut * kRank);
  auto a = TestDelegate::init(pa.blob, &map_a);
  ASSERT_TRUE(a.ok()) << a.status().message();
  WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.verifications, 3u);
  EXPECT_EQ(stats.bytes_verified, sizeof(float) * kOut * kIn + adapter_bytes);
  // The second program hashes its adapter only; its foundation hit costs no hashing.
  auto b = TestDelegate::init(pb.blob, &map_b);
  ASSERT_TRUE(b.ok()) << b.status().message();
  stats = process_weights_cache_stats();
  EXPECT_EQ(stats.verifications, 5u);
  EXPECT_EQ(stats.bytes_verified, sizeof(float) * kOut * kIn + 2 * adapter_bytes);
  EXPECT_EQ(stats.verification_failures, 0u);
  EXPECT_EQ(stats.bytes_verified, stats.bytes_fetched);
  // A third handle over the first program hits everything and hashes nothing.
  auto a2 = TestDelegate::init(pa.blob, &map_a);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(process_weights_cache_stats().verifications, 5u);
  expect_runs_correctly(&*a2, pa);
  expect_runs_correctly(&*b, pb);
}

// The cache's own contract, without a delegate: a failed get_or_pack / retain_constant adds no
// entry, takes no reference, holds no bytes.
TEST_P(VerifiedCacheTest, failed_calls_leave_entries_and_refcounts_unchanged) {
  ASSERT_EQ(xnn_initialize(/*allocator=*/nullptr),
            xnn_status_success);  // No delegate does it here.
  InMemoryDataMap map("m.ptd");
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 130);
  const std::vector<float> s = random_floats(kOut, -1, 1, 131);
  auto ref = [&](const std::string& key, std::vector<uint32_t> dims, const runtime::Digest& d) {
    ConstantRef r;
    r.key = key;
    r.identity.dims = std::move(dims);
    r.identity.digest = d;
    return r;
  };
  const ConstantRef good_w = ref("w", {kOut, kIn}, map.add("w", w));
  const ConstantRef good_s = ref("s", {kOut}, map.add("s", s));
  // Identities the cache does not hold yet (a held identity is a hit: its bytes are never read).
  const runtime::Digest other_w = InMemoryDataMap::digest_of(random_floats(kOut * kIn, -1, 1, 132));
  const runtime::Digest other_s = InMemoryDataMap::digest_of(random_floats(kOut, -1, 1, 133));
  const ConstantRef tampered_w = ref("tw", {kOut, kIn}, map.add("tw", w, other_w));
  const ConstantRef tampered_s = ref("ts", {kOut}, map.add("ts", s, other_s));
  // Same bytes as "w" (so the map's digest is right) but the graph claims a larger shape.
  const ConstantRef short_w = ref("w", {kOut, kIn + 1}, good_w.identity.digest);
  const ConstantRef missing = ref("nope", {kOut, kIn}, other_w);

  WeightsCache cache;
  auto fc = cache.get_or_pack_fully_connected(&map, good_w, nullptr, kIn, kOut);
  ASSERT_TRUE(fc.ok()) << fc.status().message();
  auto kept = cache.retain_constant(&map, good_s);
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  const WeightsCacheStats before = cache.stats();

  expect_names(cache.get_or_pack_fully_connected(&map, tampered_w, nullptr, kIn, kOut).status(),
               runtime::Error::InvalidData, {"'tw'", "m.ptd", "SHA-256"});
  expect_names(cache.get_or_pack_fully_connected(&map, good_w, &tampered_s, kIn, kOut).status(),
               runtime::Error::InvalidData, {"'ts'"});
  expect_names(cache.get_or_pack_fully_connected(&map, short_w, nullptr, kIn + 1, kOut).status(),
               runtime::Error::InvalidData, {"'w'", "bytes"});
  expect_names(cache.get_or_pack_fully_connected(&map, missing, nullptr, kIn, kOut).status(),
               runtime::Error::NotFound, {"nope"});
  expect_names(cache.retain_constant(&map, tampered_s).status(), runtime::Error::InvalidData,
               {"'ts'", "SHA-256"});
  expect_names(cache.retain_constant(&map, ref("s", {kOut + 1}, good_s.identity.digest)).status(),
               runtime::Error::InvalidData, {"'s'"});
  expect_names(cache.retain_constant(&map, ref("gone", {kOut}, other_s)).status(),
               runtime::Error::NotFound, {"gone"});

  const WeightsCacheStats after = cache.stats();
  EXPECT_EQ(after.num_packed_entries, before.num_packed_entries);
  EXPECT_EQ(after.packed_data_names, before.packed_data_names);
  EXPECT_EQ(after.retained_data_names, before.retained_data_names);
  EXPECT_TRUE(after.unpacked_data_names.empty());
  EXPECT_EQ(after.packs, before.packs);
  EXPECT_EQ(after.cache_hits, before.cache_hits);
  EXPECT_EQ(after.verification_failures, before.verification_failures + 3);
  EXPECT_EQ(map.live_buffers(), 1u);  // Only the retained constant's bytes.

  // Refcounts are unchanged: one release each empties the cache.
  cache.release(*fc);
  cache.release(*kept);
  EXPECT_EQ(cache.get_num_packed_data(), 0u);
  EXPECT_TRUE(cache.stats().retained_data_names.empty());
  EXPECT_EQ(map.live_buffers(), 0u);
}

// A graph's requests in one batch: one entry per request (a repeated key is a hit on the
// batch's own entry), each computing its own weight, counted as requests made one by one.
TEST_P(VerifiedCacheTest, batch_gives_every_request_its_entry_and_counts_as_one_by_one) {
  ASSERT_EQ(xnn_initialize(/*allocator=*/nullptr), xnn_status_success);
  InMemoryDataMap map("m.ptd");
  std::vector<std::vector<float>> w;
  std::vector<FullyConnectedRequest> requests(4);
  for (uint32_t i = 0; i < 3; ++i) {
    w.push_back(random_floats(kSlabOut * kSlabIn, -1, 1, 150 + i));
    requests[i].weight.key = "w" + std::to_string(i);
    requests[i].weight.identity.dims = {kSlabOut, kSlabIn};
    requests[i].weight.identity.digest = map.add(requests[i].weight.key, w[i]);
    requests[i].input_channels = kSlabIn;
    requests[i].output_channels = kSlabOut;
  }
  const std::vector<float> b = random_floats(kSlabOut, -1, 1, 160);
  requests[2].has_bias = true;
  requests[2].bias.key = "b";
  requests[2].bias.identity.dims = {kSlabOut};
  requests[2].bias.identity.digest = map.add("b", b);
  requests[3] = requests[0];       // The same weight again, under the same key.
  WeightsCache cache(kSlabBytes);  // Four slabs per weight.
  std::vector<PackedOperator*> entries;
  size_t failed = 0;
  const runtime::Status status =
      cache.get_or_pack_fully_connected(&map, requests, &entries, &failed);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[3], entries[0]);
  const WeightsCacheStats stats = cache.stats();
  EXPECT_EQ(stats.packs, 3u);
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.verifications, 4u);  // Three weights and the bias, each hashed once.
  EXPECT_EQ(stats.named_data_fetches.at("w0"), 1u);
  EXPECT_EQ(map.get_data_calls("w0"), 1u);
  EXPECT_EQ(map.live_buffers(), 0u);  // Every fetched byte was given back after packing.
  const std::vector<float> no_bias(kSlabOut, 0.0f);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(entries[i]->num_slabs(), 4u);
    expect_slabbed_entry_computes(entries[i], w[i], i == 2 ? b : no_bias,
                                  "batch request " + std::to_string(i));
  }
  for (PackedOperator* entry : entries) cache.release(entry);
  EXPECT_EQ(cache.get_num_packed_data(), 0u);
}

// A failing request in the middle of a batch: its error and index, nothing held, and the counters
// of requests made one by one up to it (what was done for the requests after it is not counted).
TEST_P(VerifiedCacheTest, batch_failing_midway_holds_nothing_and_counts_up_to_the_failure) {
  ASSERT_EQ(xnn_initialize(/*allocator=*/nullptr), xnn_status_success);
  InMemoryDataMap map("m.ptd");
  std::vector<FullyConnectedRequest> requests(4);
  for (uint32_t i = 0; i < 4; ++i) {
    const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 170 + i);
    requests[i].weight.key = "w" + std::to_string(i);
    requests[i].weight.identity.dims = {kOut, kIn};
    // Request 2's bytes are changed under their digest.
    requests[i].weight.identity.digest =
        i == 2 ? map.add("w2", random_floats(kOut * kIn, -1, 1, 180), InMemoryDataMap::digest_of(w))
               : map.add(requests[i].weight.key, w);
    requests[i].input_channels = kIn;
    requests[i].output_channels = kOut;
  }
  requests[1] = requests[0];
  WeightsCache cache;
  std::vector<PackedOperator*> entries;
  size_t failed = 0;
  expect_names(cache.get_or_pack_fully_connected(&map, requests, &entries, &failed),
               runtime::Error::InvalidData, {"'w2'", "m.ptd", "SHA-256"});
  EXPECT_EQ(failed, 2u);
  EXPECT_TRUE(entries.empty());
  const WeightsCacheStats stats = cache.stats();
  EXPECT_EQ(stats.num_packed_entries, 0u);
  EXPECT_EQ(stats.packs, 1u);  // w0, published and given back.
  EXPECT_EQ(stats.cache_hits, 1u);
  EXPECT_EQ(stats.verifications, 2u);
  EXPECT_EQ(stats.verification_failures, 1u);
  EXPECT_EQ(stats.named_data_fetches.count("w3"), 0u);
  EXPECT_EQ(map.live_buffers(), 0u);

  // A request that cannot be fetched ends the batch before it: nothing after it is fetched.
  requests[2].weight.key = "missing";
  expect_names(cache.get_or_pack_fully_connected(&map, requests, &entries, &failed),
               runtime::Error::NotFound, {"missing"});
  EXPECT_EQ(failed, 2u);
  EXPECT_EQ(map.get_data_calls("w3"), 1u);  // Only the first batch's.
  EXPECT_EQ(cache.get_num_packed_data(), 0u);
  EXPECT_EQ(map.live_buffers(), 0u);
}

TEST_P(VerifiedCacheTest, init_failing_after_taking_a_packed_entry_gives_it_back) {
  // The weight packs (the handle takes the entry), then the node's constant input fails its check.
  InMemoryDataMap map("m.ptd");
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 140);
  const std::vector<float> x = random_floats(kBatch * kIn, -1, 1, 141);
  std::vector<float> tampered_x = x;
  tampered_x[0] += 1.0f;
  GraphBuilder g;
  const uint32_t xid =
      g.named("x", {kBatch, kIn}, map.add("x", tampered_x, InMemoryDataMap::digest_of(x)));
  const uint32_t wid = g.named("w", {kOut, kIn}, map.add("w", w));
  const uint32_t y = g.output({kBatch, kOut});
  g.node(schema::OpKind_FULLY_CONNECTED, {xid, wid}, {y});
  auto d = TestDelegate::init(g.build(), &map);
  expect_names(d.status(), runtime::Error::InvalidData, {"'x'"});
  const WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.num_packed_entries, 0u) << "the failed init kept a reference";
  EXPECT_TRUE(stats.retained_data_names.empty());
  EXPECT_EQ(map.live_buffers(), 0u);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
