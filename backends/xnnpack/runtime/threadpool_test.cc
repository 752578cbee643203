// The delegate's process-wide threadpool: thread counts can change while other threads run work on
// the pool they read (CI runs this under ASan and TSan: a pool destroyed under a user shows there).

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace edgeshare {
namespace xnnpack {
namespace {

// Pieces of work done. Constant-initialized, so no thread writes it before the pool's threads do:
// Debian's pthreadpool is not built for ThreadSanitizer, whose reports would otherwise flag the
// pool threads' first touch of memory another thread initialized (it cannot see the pool's own
// synchronisation).
std::atomic<size_t> g_done{0};

void Count(void* /*context*/, size_t /*i*/) { g_done.fetch_add(1, std::memory_order_relaxed); }

TEST(ThreadpoolTest, zero_threads_is_an_error_and_changes_nothing) {
  ASSERT_TRUE(set_num_threads(1).ok());
  EXPECT_EQ(set_num_threads(0).code(), runtime::Error::InvalidArgument);
  EXPECT_EQ(num_threads(), 1u);
  EXPECT_EQ(threadpool(), nullptr);
}

TEST(ThreadpoolTest, a_thread_count_reuses_its_pool) {
  ASSERT_TRUE(set_num_threads(2).ok());
  const pthreadpool_t two = threadpool();
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(pthreadpool_get_threads_count(two), 2u);
  ASSERT_TRUE(set_num_threads(1).ok());
  EXPECT_EQ(threadpool(), nullptr);
  ASSERT_TRUE(set_num_threads(2).ok());
  EXPECT_EQ(threadpool(), two);
  ASSERT_TRUE(set_num_threads(1).ok());
}

TEST(ThreadpoolTest, changing_threads_while_another_thread_runs_work_is_safe) {
  std::atomic<bool> stop{false};
  const size_t before = g_done.load();
  std::thread worker([&] {
    while (!stop.load()) {
      pthreadpool_t pool = threadpool();
      // What an operator run does with the pool it read: work split across its threads.
      if (pool != nullptr)
        pthreadpool_parallelize_1d(pool, Count, nullptr, 64, /*flags=*/0);
      else
        g_done.fetch_add(64);
    }
  });
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(set_num_threads(1 + i % 3).ok());
  stop.store(true);
  worker.join();
  const size_t done = g_done.load() - before;
  EXPECT_EQ(done % 64, 0u);  // every piece of every run was done
  EXPECT_GT(done, 0u);
  ASSERT_TRUE(set_num_threads(1).ok());
}

// Per-index counters for parallel_for: each index must be run exactly once.
struct Marks {
  std::atomic<int> seen[97];
};

void Mark(void* context, size_t i) {
  static_cast<Marks*>(context)->seen[i].fetch_add(1, std::memory_order_relaxed);
}

TEST(ThreadpoolTest, parallel_for_runs_every_index_once_at_any_thread_count) {
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

TEST(ThreadpoolTest, parallel_for_from_two_threads_at_once_and_while_threads_change) {
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
}  // namespace xnnpack
}  // namespace edgeshare
