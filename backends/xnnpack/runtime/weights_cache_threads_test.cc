// Two handles (two "programs") sharing packed foundation weights, run on two threads at once, and
// an honest and a poisoned program loading the same foundation identity at once, with the delegate
// threadpool hashing while it packs. Build with --config=tsan to check the locking.

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"

namespace edgeshare {
namespace xnnpack {
namespace {

constexpr uint32_t kBatch = 2, kIn = 16, kOut = 8;
constexpr int kRuns = 1000;

TEST(WeightsCacheThreads, two_programs_share_packed_weights_across_threads) {
  set_weight_sharing(true);
  reset_weights_cache_counters();
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 1);
  const std::vector<float> bias = random_floats(kOut, -1, 1, 2);
  InMemoryDataMap map_a("a.pte"), map_b("b.pte");
  // Program A: y = relu(x W^T + b); program B: y = x W^T + b scaled by an adapter vector.
  const std::vector<float> scale = random_floats(kOut, 0.5f, 2, 3);
  auto build = [&](InMemoryDataMap* map, bool with_scale) {
    GraphBuilder g;
    const uint32_t x = g.input({kBatch, kIn});
    const uint32_t wid = g.named("base.weight", {kOut, kIn}, map->add("base.weight", w));
    const uint32_t bid = g.named("base.bias", {kOut}, map->add("base.bias", bias));
    const uint32_t y = g.output({kBatch, kOut});
    if (with_scale) {
      const uint32_t h = g.intermediate({kBatch, kOut});
      const uint32_t s = g.named("adapter.scale", {kOut}, map->add("adapter.scale", scale));
      g.node(schema::OpKind_FULLY_CONNECTED, {x, wid, bid}, {h});
      g.node(schema::OpKind_MULTIPLY, {h, s}, {y});
    } else {
      g.node(schema::OpKind_FULLY_CONNECTED, {x, wid, bid}, {y}, 0.0f, INFINITY);
    }
    return g.build();
  };
  const std::vector<uint8_t> blob_a = build(&map_a, false), blob_b = build(&map_b, true);
  auto a = TestDelegate::init(blob_a, &map_a);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = TestDelegate::init(blob_b, &map_b);
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(process_weights_cache_stats().num_packed_entries, 1u);
  ASSERT_EQ(map_b.calls("base.weight"), 0u);
  ASSERT_EQ(map_b.calls("base.bias"), 0u);

  auto reference = [&](const std::vector<float>& x, bool with_scale) {
    std::vector<float> y(kBatch * kOut);
    for (uint32_t n = 0; n < kBatch; ++n)
      for (uint32_t o = 0; o < kOut; ++o) {
        double acc = bias[o];
        for (uint32_t i = 0; i < kIn; ++i) acc += double(x[n * kIn + i]) * w[o * kIn + i];
        float v = float(acc);
        y[n * kOut + o] = with_scale ? v * scale[o] : (v > 0 ? v : 0);
      }
    return y;
  };

  std::atomic<int> failures{0};
  auto worker = [&](TestDelegate* d, bool with_scale, uint32_t seed) {
    // Each thread uses its own inputs so that a run seeing the other thread's setup shows up.
    HostTensor x{{kBatch, kIn}, random_floats(kBatch * kIn, -1, 1, seed)};
    const std::vector<float> want = reference(x.data, with_scale);
    HostTensor y{{kBatch, kOut}, std::vector<float>(kBatch * kOut)};
    for (int run = 0; run < kRuns; ++run) {
      if (!d->run({&x}, {&y}).ok()) {
        failures++;
        return;
      }
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::fabs(y.data[i] - want[i]) > 1e-4f * std::max(1.0f, std::fabs(want[i]))) {
          failures++;
          return;
        }
      }
    }
  };
  std::thread ta(worker, &*a, false, 11u);
  std::thread tb(worker, &*b, true, 12u);
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(WeightsCacheThreads, racing_poisoned_load_never_poisons_an_honest_one) {
  set_weight_sharing(true);
  set_verify_content(true);
  ASSERT_TRUE(set_num_threads(2).ok());  // Hash and pack on the pool's two threads.
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 21);
  std::vector<float> poisoned = w;
  poisoned[5] = 100.0f;
  // The same identity (digest of w) in both maps; the bad one holds other bytes under it.
  InMemoryDataMap honest("honest.ptd"), bad("bad.ptd");
  auto build = [&](InMemoryDataMap* map, const std::vector<float>& bytes) {
    GraphBuilder g;
    const uint32_t x = g.input({kBatch, kIn});
    const uint32_t wid =
        g.named("base.weight", {kOut, kIn}, map->add("base.weight", bytes,
                                                     InMemoryDataMap::digest_of(w)));
    const uint32_t y = g.output({kBatch, kOut});
    g.node(schema::OpKind_FULLY_CONNECTED, {x, wid}, {y});
    return g.build();
  };
  const std::vector<uint8_t> honest_blob = build(&honest, w), bad_blob = build(&bad, poisoned);
  HostTensor x{{kBatch, kIn}, random_floats(kBatch * kIn, -1, 1, 22)};
  std::vector<float> want(kBatch * kOut);
  for (uint32_t n = 0; n < kBatch; ++n)
    for (uint32_t o = 0; o < kOut; ++o) {
      double acc = 0;
      for (uint32_t i = 0; i < kIn; ++i) acc += double(x.data[n * kIn + i]) * w[o * kIn + i];
      want[n * kOut + o] = float(acc);
    }
  auto runs_honestly = [&](TestDelegate* d) {
    HostTensor y{{kBatch, kOut}, std::vector<float>(kBatch * kOut)};
    if (!d->run({&x}, {&y}).ok()) return false;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::fabs(y.data[i] - want[i]) > 1e-4f * std::max(1.0f, std::fabs(want[i]))) return false;
    }
    return true;
  };

  for (int round = 0; round < 20; ++round) {
    runtime::Result<TestDelegate> good = runtime::Status(runtime::Error::Internal);
    runtime::Result<TestDelegate> evil = runtime::Status(runtime::Error::Internal);
    std::thread tg([&] { good = TestDelegate::init(honest_blob, &honest); });
    std::thread te([&] { evil = TestDelegate::init(bad_blob, &bad); });
    tg.join();
    te.join();
    ASSERT_TRUE(good.ok()) << good.status().message();
    EXPECT_TRUE(runs_honestly(&*good)) << "round " << round;
    // The bad load either failed its check, or came second and hit the honest entry without
    // reading its own bytes: either way nobody computes with the poisoned weight.
    if (evil.ok()) {
      EXPECT_TRUE(runs_honestly(&*evil)) << "round " << round;
    } else {
      EXPECT_EQ(evil.status().code(), runtime::Error::InvalidData) << evil.status().message();
    }
  }
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
  ASSERT_TRUE(set_num_threads(1).ok());
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
