// Working memory: the executors of a process share one block of intermediates and scratch, so the
// working memory of N loaded programs does not grow N-fold; an execute that finds the block leased
// (another thread running) runs in its executor's own arena and computes the same.

#include "edgeshare/backends/xnnpack/runtime/working_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"
#include "edgeshare/backends/xnnpack/runtime/packed_operator.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/xnn_executor.h"

namespace edgeshare {
namespace xnnpack {
namespace {

constexpr uint32_t kRows = 32, kChannels = 64, kLayers = 4;

// x [32, 64] -> kLayers int8 fully connected [64 -> 64], each followed by SiLU -> y: every node
// quantizes its rows into scratch, and the intermediates of all of them are live one at a time.
struct Int8Chain {
  InMemoryDataMap map{"foundation.ptd"};
  std::vector<uint8_t> blob;
  Int8Chain() {
    GraphBuilder g;
    uint32_t v = g.input({kRows, kChannels});
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      const std::string key = "layers." + std::to_string(layer) + ".weight.qc8w";
      // int8 values in [-100, 100] carried in floats (InMemoryDataMap holds float entries).
      std::vector<int8_t> q(kChannels * kChannels);
      const std::vector<float> r = random_floats(q.size(), -100, 100, 10 + layer);
      for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(r[i]);
      std::vector<float> bytes(q.size() / 4);
      std::memcpy(bytes.data(), q.data(), q.size());
      const uint32_t w = g.named(key, {kChannels, kChannels}, map.add(key, bytes));
      g.set_qc8w(w, key + ".scales",
                 map.add(key + ".scales", random_floats(kChannels, 1e-3f, 2e-3f, 20 + layer)));
      const uint32_t h = g.intermediate({kRows, kChannels});
      g.node(schema::OpKind_FULLY_CONNECTED, {v, w}, {h});
      const uint32_t next = layer + 1 == kLayers ? g.output({kRows, kChannels})
                                                 : g.intermediate({kRows, kChannels});
      g.node(schema::OpKind_SILU, {h}, {next});
      v = next;
    }
    blob = g.build();
  }
};

std::vector<float> run(TestDelegate* d, const std::vector<float>& input) {
  HostTensor x{{kRows, kChannels}, input};
  HostTensor y{{kRows, kChannels}, std::vector<float>(kRows * kChannels)};
  const runtime::Status status = d->run({&x}, {&y});
  EXPECT_TRUE(status.ok()) << status.message();
  return y.data;
}

// The int8 nodes' scratch lives in the arena, live during its node only: the graph holds one
// node's scratch, not one per node.
TEST(WorkingMemoryTest, int8_scratch_is_shared_by_the_nodes_of_a_graph) {
  Int8Chain chain;
  auto executor =
      XnnExecutor::create(chain.blob.data(), chain.blob.size(), &chain.map, /*share_weights=*/true);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  const size_t scratch = fc_format(runtime::ScalarType::Char)->scratch(kRows, FcShape{kChannels, kChannels, 0}).bytes;
  const size_t value = kRows * kChannels * sizeof(float);
  EXPECT_GE((*executor)->arena_bytes(), scratch);
  EXPECT_LT((*executor)->arena_bytes(), 2 * scratch + 3 * value);
}

// Eight delegates over one graph (eight programs' worth): one block the size of one executor's
// arena, leased by each execute in turn; every execute computes what the first did.
TEST(WorkingMemoryTest, executors_share_one_block) {
  Int8Chain chain;
  auto one =
      XnnExecutor::create(chain.blob.data(), chain.blob.size(), &chain.map, /*share_weights=*/true);
  ASSERT_TRUE(one.ok()) << one.status().message();
  const size_t arena = (*one)->arena_bytes();
  std::vector<TestDelegate> delegates;
  for (int i = 0; i < 8; ++i) {
    auto d = TestDelegate::init(chain.blob, &chain.map);
    ASSERT_TRUE(d.ok()) << d.status().message();
    delegates.push_back(std::move(*d));
  }
  const WorkingMemoryStats before = WorkingMemory::shared().stats();
  // Other tests of this binary reserve no more than this graph does.
  EXPECT_EQ(before.block_bytes, arena);
  const std::vector<float> input = random_floats(kRows * kChannels, -1, 1, 5);
  const std::vector<float> want = run(&delegates[0], input);
  for (TestDelegate& d : delegates) EXPECT_EQ(run(&d, input), want);
  const WorkingMemoryStats after = WorkingMemory::shared().stats();
  EXPECT_EQ(after.block_bytes, arena);
  EXPECT_EQ(after.leases - before.leases, 9u);
  EXPECT_EQ(after.busy, before.busy);
}

// While another execute holds the block, an execute runs in its own arena: same result.
TEST(WorkingMemoryTest, execute_while_the_block_is_leased_uses_its_own_arena) {
  Int8Chain chain;
  auto d = TestDelegate::init(chain.blob, &chain.map);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const std::vector<float> input = random_floats(kRows * kChannels, -1, 1, 6);
  const std::vector<float> want = run(&*d, input);
  const WorkingMemoryStats before = WorkingMemory::shared().stats();
  {
    const WorkingMemory::Lease held(&WorkingMemory::shared(), 1);
    ASSERT_NE(held.block(), nullptr);
    EXPECT_EQ(run(&*d, input), want);
  }
  EXPECT_EQ(run(&*d, input), want);  // Back in the shared block.
  const WorkingMemoryStats after = WorkingMemory::shared().stats();
  EXPECT_EQ(after.busy - before.busy, 1u);
  EXPECT_EQ(after.leases - before.leases, 2u);
}

// Two threads executing at once (and a third loading more executors, which may grow the block)
// never share bytes: each result is the single-thread one.
TEST(WorkingMemoryTest, concurrent_executes_each_get_their_own_memory) {
  Int8Chain chain;
  auto a = TestDelegate::init(chain.blob, &chain.map);
  auto b = TestDelegate::init(chain.blob, &chain.map);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<float> input = random_floats(kRows * kChannels, -1, 1, 7);
  const std::vector<float> want = run(&*a, input);
  auto loop = [&](TestDelegate* d) {
    for (int i = 0; i < 20; ++i) EXPECT_EQ(run(d, input), want);
  };
  std::thread t1(loop, &*a), t2(loop, &*b);
  std::thread t3([&] {
    for (int i = 0; i < 4; ++i) {
      auto more = TestDelegate::init(chain.blob, &chain.map);
      EXPECT_TRUE(more.ok());
    }
    // A larger reservation grows the block while the others run.
    EXPECT_TRUE(WorkingMemory::shared().reserve(WorkingMemory::shared().stats().block_bytes + 64).ok());
  });
  t1.join();
  t2.join();
  t3.join();
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
