// Two handles (two "programs") sharing packed foundation weights, run on two threads at once; an
// honest and a poisoned program loading the same foundation identity at once, with the delegate
// threadpool hashing while it packs; and two threads loading different weights (packed at the same
// time, the cache's lock not held) or the same weight (packed once), also as two batches of the
// same weights in opposite orders; and runs of one weight on two threads at once (no lock).
// Build with --config=tsan to check the locking.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/runtime/core/scoped_threads.h"

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
  const runtime::ScopedThreads scoped(2);  // Hash and pack on the pool's two threads.
  const std::vector<float> w = random_floats(kOut * kIn, -1, 1, 21);
  std::vector<float> poisoned = w;
  poisoned[5] = 100.0f;
  // The same identity (digest of w) in both maps; the bad one holds other bytes under it.
  InMemoryDataMap honest("honest.ptd"), bad("bad.ptd");
  auto build = [&](InMemoryDataMap* map, const std::vector<float>& bytes) {
    GraphBuilder g;
    const uint32_t x = g.input({kBatch, kIn});
    const uint32_t wid = g.named("base.weight", {kOut, kIn},
                                 map->add("base.weight", bytes, InMemoryDataMap::digest_of(w)));
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
    std::thread tg([&] {
      const runtime::ThreadsScope scope(scoped.get());
      good = TestDelegate::init(honest_blob, &honest);
    });
    std::thread te([&] {
      const runtime::ThreadsScope scope(scoped.get());
      evil = TestDelegate::init(bad_blob, &bad);
    });
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
}

// A data map whose get_data() returns only once `parties` callers are inside get_data() at the
// same time (or after a timeout, which it records): a miss that held the cache's lock while
// fetching would keep the other load out, and time out.
class RendezvousMap final : public runtime::NamedDataMap {
 public:
  RendezvousMap(InMemoryDataMap* map, std::mutex* mutex, std::condition_variable* cv, int* arrived,
                bool* timed_out)
      : map_(map), mutex_(mutex), cv_(cv), arrived_(arrived), timed_out_(timed_out) {}
  runtime::Result<runtime::TensorLayout> get_tensor_layout(const char* key) const override {
    return map_->get_tensor_layout(key);
  }
  runtime::Result<runtime::FreeableBuffer> get_data(const char* key) const override {
    std::unique_lock<std::mutex> lock(*mutex_);
    *arrived_ += 1;
    cv_->notify_all();
    if (!cv_->wait_for(lock, std::chrono::seconds(20), [&] { return *arrived_ >= 2; })) {
      *timed_out_ = true;
    }
    lock.unlock();
    return map_->get_data(key);
  }
  runtime::Status load_data_into(const char* key, void* dst, size_t size) const override {
    return map_->load_data_into(key, dst, size);
  }
  size_t get_num_keys() const override { return map_->get_num_keys(); }
  runtime::Result<const char*> get_key(size_t i) const override { return map_->get_key(i); }
  runtime::Result<runtime::Digest> get_digest(const char* key) const override {
    return map_->get_digest(key);
  }
  const char* name() const override { return map_->name(); }

 private:
  InMemoryDataMap* map_;
  std::mutex* mutex_;
  std::condition_variable* cv_;
  int* arrived_;
  bool* timed_out_;
};

// A [256, 64] weight (64 KiB), in 16 KiB slabs: 4 slabs, added to `map` under `key`.
ConstantRef slabbed_weight(InMemoryDataMap* map, const std::string& key, uint32_t seed) {
  ConstantRef ref;
  ref.key = key;
  ref.identity.dims = {256, 64};
  ref.identity.digest = map->add(key, random_floats(256 * 64, -1, 1, seed));
  return ref;
}

TEST(WeightsCacheThreads, loads_of_different_weights_pack_at_once_and_of_one_weight_pack_once) {
  set_weight_sharing(true);
  set_verify_content(true);
  const runtime::ScopedThreads scoped(2);  // Slabs packed and hashed on the pool's two threads.
  for (int round = 0; round < 10; ++round) {
    WeightsCache cache(/*slab_bytes=*/16384);
    std::mutex mutex;
    std::condition_variable cv;
    int arrived = 0;
    bool timed_out = false;
    InMemoryDataMap a("a.ptd"), b("b.ptd");
    const ConstantRef wa = slabbed_weight(&a, "wa", 31), wb = slabbed_weight(&b, "wb", 32);
    RendezvousMap ra(&a, &mutex, &cv, &arrived, &timed_out),
        rb(&b, &mutex, &cv, &arrived, &timed_out);
    runtime::Result<PackedOperator*> pa = runtime::Status(runtime::Error::Internal);
    runtime::Result<PackedOperator*> pb = runtime::Status(runtime::Error::Internal);
    std::thread ta([&] {
      const runtime::ThreadsScope scope(scoped.get());
      pa = cache.get_or_pack_fully_connected(&ra, wa, nullptr, 64, 256);
    });
    std::thread tb([&] {
      const runtime::ThreadsScope scope(scoped.get());
      pb = cache.get_or_pack_fully_connected(&rb, wb, nullptr, 64, 256);
    });
    ta.join();
    tb.join();
    ASSERT_TRUE(pa.ok()) << pa.status().message();
    ASSERT_TRUE(pb.ok()) << pb.status().message();
    EXPECT_FALSE(timed_out) << "one load waited for the other's fetch: a lock held across a miss";
    EXPECT_EQ((*pa)->num_slabs(), 4u);
    EXPECT_EQ(cache.stats().packs, 2u);

    // The same identity from two maps (two programs) at once: one fetch, one hash, one pack.
    InMemoryDataMap c("c.ptd"), d("d.ptd");
    const ConstantRef wc = slabbed_weight(&c, "shared", 33), wd = slabbed_weight(&d, "shared", 33);
    runtime::Result<PackedOperator*> pc = runtime::Status(runtime::Error::Internal);
    runtime::Result<PackedOperator*> pd = runtime::Status(runtime::Error::Internal);
    std::thread tc([&] {
      const runtime::ThreadsScope scope(scoped.get());
      pc = cache.get_or_pack_fully_connected(&c, wc, nullptr, 64, 256);
    });
    std::thread td([&] {
      const runtime::ThreadsScope scope(scoped.get());
      pd = cache.get_or_pack_fully_connected(&d, wd, nullptr, 64, 256);
    });
    tc.join();
    td.join();
    ASSERT_TRUE(pc.ok()) << pc.status().message();
    ASSERT_TRUE(pd.ok()) << pd.status().message();
    EXPECT_EQ(*pc, *pd);
    EXPECT_EQ(c.get_data_calls() + d.get_data_calls(), 1u);
    const WeightsCacheStats stats = cache.stats();
    EXPECT_EQ(stats.packs, 3u);
    EXPECT_EQ(stats.cache_hits, 1u);
    EXPECT_EQ(stats.verifications, 3u);
    EXPECT_EQ(stats.num_packed_entries, 3u);
    for (PackedOperator* op : {*pa, *pb, *pc, *pd}) cache.release(op);
    EXPECT_EQ(cache.get_num_packed_data(), 0u);
  }
}

// Two graphs asking for the same three weights in opposite orders, at once: each batch reserves
// what nobody packs yet and waits for the rest holding no reservation, so neither waits for the
// other forever, and every weight is fetched, hashed and packed once.
TEST(WeightsCacheThreads, two_batches_of_the_same_weights_in_opposite_orders_pack_each_once) {
  set_weight_sharing(true);
  set_verify_content(true);
  const runtime::ScopedThreads scoped(2);
  for (int round = 0; round < 10; ++round) {
    WeightsCache cache(/*slab_bytes=*/16384);
    InMemoryDataMap a("a.ptd"), b("b.ptd");
    std::vector<FullyConnectedRequest> ra(3), rb(3);
    for (uint32_t i = 0; i < 3; ++i) {
      const std::string key = "w" + std::to_string(i);
      ra[i].weight = slabbed_weight(&a, key, 40 + i);
      rb[2 - i].weight = slabbed_weight(&b, key, 40 + i);
      ra[i].input_channels = rb[2 - i].input_channels = 64;
      ra[i].output_channels = rb[2 - i].output_channels = 256;
    }
    std::vector<PackedOperator*> ea, eb;
    size_t fa = 0, fb = 0;
    runtime::Status sa, sb;
    std::thread ta([&] {
      const runtime::ThreadsScope scope(scoped.get());
      sa = cache.get_or_pack_fully_connected(&a, ra, &ea, &fa);
    });
    std::thread tb([&] {
      const runtime::ThreadsScope scope(scoped.get());
      sb = cache.get_or_pack_fully_connected(&b, rb, &eb, &fb);
    });
    ta.join();
    tb.join();
    ASSERT_TRUE(sa.ok()) << sa.message();
    ASSERT_TRUE(sb.ok()) << sb.message();
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ea[i], eb[2 - i]);
    EXPECT_EQ(a.get_data_calls() + b.get_data_calls(), 3u);
    const WeightsCacheStats stats = cache.stats();
    EXPECT_EQ(stats.packs, 3u);
    EXPECT_EQ(stats.cache_hits, 3u);
    EXPECT_EQ(stats.verifications, 3u);
    for (PackedOperator* op : ea) cache.release(op);
    for (PackedOperator* op : eb) cache.release(op);
    EXPECT_EQ(cache.get_num_packed_data(), 0u);
  }
}

// Runs of one shared weight on two threads at once, each with its own inputs, at 1, 3 and 9 rows:
// through the delegate's GEMV and GEMM kernels they set nothing up and take no lock, so each thread
// must still get its own rows.
TEST(WeightsCacheThreads, runs_of_one_weight_on_two_threads_at_once_without_a_lock) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  set_verify_content(true);
  WeightsCache cache(/*slab_bytes=*/16384);
  InMemoryDataMap map("m.ptd");
  constexpr uint32_t kRowIn = 64, kRowOut = 256, kMaxRows = 9;
  const std::vector<float> w = random_floats(kRowOut * kRowIn, -1, 1, 50);
  ConstantRef ref;
  ref.key = "w";
  ref.identity.dims = {kRowOut, kRowIn};
  ref.identity.digest = map.add("w", w);
  runtime::Result<PackedOperator*> entry =
      cache.get_or_pack_fully_connected(&map, ref, nullptr, kRowIn, kRowOut);
  ASSERT_TRUE(entry.ok()) << entry.status().message();
  EXPECT_EQ((*entry)->num_slabs(), 4u);
  const bool own = kernels::f32_kernel_sets().best_isa() != kernels::Isa::kScalar;
  EXPECT_EQ((*entry)->one_row_gemv(), own);
  EXPECT_EQ((*entry)->rows_gemm(), own && kernels::f32_kernel_sets().best().gemm != nullptr);

  std::atomic<int> failures{0};
  auto worker = [&](uint32_t seed) {
    const std::vector<float> x = random_floats(kMaxRows * kRowIn, -1, 1, seed);
    std::vector<float> want(kMaxRows * kRowOut), y(kMaxRows * kRowOut);
    for (uint32_t r = 0; r < kMaxRows; ++r) {
      for (uint32_t o = 0; o < kRowOut; ++o) {
        double acc = 0;
        for (uint32_t i = 0; i < kRowIn; ++i) acc += double(x[r * kRowIn + i]) * w[o * kRowIn + i];
        want[r * kRowOut + o] = float(acc);
      }
    }
    for (int run = 0; run < kRuns; ++run) {
      const uint32_t rows = run % 3 == 0 ? 1 : run % 3 == 1 ? 3 : kMaxRows;
      if (!(*entry)->run_fully_connected(rows, x.data(), y.data(), threadpool()).ok()) {
        failures++;
        return;
      }
      for (uint32_t o = 0; o < rows * kRowOut; ++o) {
        if (std::fabs(y[o] - want[o]) > 1e-4f * std::max(1.0f, std::fabs(want[o]))) {
          failures++;
          return;
        }
      }
    }
  };
  std::thread ta(worker, 51u);
  std::thread tb(worker, 52u);
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);
  cache.release(*entry);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
