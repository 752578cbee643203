// The runtime's helper threads: every item of a parallel_for runs exactly once, at any thread
// count, from two callers at once and while the count changes (CI runs this under TSan).

#include "edgeshare/runtime/core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace edgeshare {
namespace runtime {
namespace {

TEST(ParallelTest, zero_threads_is_an_error_and_changes_nothing) {
  ASSERT_TRUE(set_num_threads(2).ok());
  EXPECT_EQ(set_num_threads(0).code(), Error::InvalidArgument);
  EXPECT_EQ(set_num_threads(257).code(), Error::InvalidArgument);
  EXPECT_EQ(num_threads(), 2u);
  ASSERT_TRUE(set_num_threads(1).ok());
}

// Per-index counters for parallel_for: each index must be run exactly once.
struct Marks {
  std::atomic<int> seen[97];
};

void Mark(void* context, size_t i) {
  static_cast<Marks*>(context)->seen[i].fetch_add(1, std::memory_order_relaxed);
}

TEST(ParallelTest, parallel_for_runs_every_index_once_at_any_thread_count) {
  for (size_t threads : {1u, 2u, 3u}) {
    ASSERT_TRUE(set_num_threads(threads).ok());
    for (size_t count : {0u, 1u, 2u, 5u, 97u}) {
      for (int round = 0; round < 50; ++round) {
        Marks marks;
        for (auto& m : marks.seen) m.store(0);
        parallel_for(count, Mark, &marks);
        for (size_t i = 0; i < 97; ++i) ASSERT_EQ(marks.seen[i].load(), i < count ? 1 : 0) << i;
      }
    }
  }
  ASSERT_TRUE(set_num_threads(1).ok());
}

TEST(ParallelTest, parallel_for_from_two_threads_at_once_and_while_threads_change) {
  ASSERT_TRUE(set_num_threads(2).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  auto caller = [&] {
    while (!stop.load()) {
      Marks marks;
      for (auto& m : marks.seen) m.store(0);
      parallel_for(97, Mark, &marks);
      for (auto& m : marks.seen) wrong.fetch_add(m.load() == 1 ? 0 : 1);
    }
  };
  std::thread a(caller), b(caller);
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(set_num_threads(1 + i % 3).ok());
  stop.store(true);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
  ASSERT_TRUE(set_num_threads(1).ok());
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
