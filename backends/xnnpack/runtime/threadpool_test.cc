// The delegate's process-wide threadpool: thread counts can change while other threads run work on
// the pool they read (CI runs this under ASan and TSan: a pool destroyed under a user shows there).

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "edgeshare/runtime/core/parallel.h"

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
  // The changes go on until the worker has run work many times, however the two threads are
  // scheduled (on a loaded machine the worker may not start before 300 changes are done).
  for (int i = 0; i < 300 || (g_done.load() - before < 100 * 64 && i < 10000000); ++i)
    ASSERT_TRUE(set_num_threads(1 + i % 3).ok());
  stop.store(true);
  worker.join();
  const size_t done = g_done.load() - before;
  EXPECT_EQ(done % 64, 0u);  // every piece of every run was done
  EXPECT_GT(done, 0u);
  ASSERT_TRUE(set_num_threads(1).ok());
}

TEST(ThreadpoolTest, the_delegate_thread_count_is_the_runtime_helpers_count) {
  ASSERT_TRUE(set_num_threads(3).ok());
  EXPECT_EQ(runtime::num_threads(), 3u);
  ASSERT_TRUE(set_num_threads(1).ok());
  EXPECT_EQ(runtime::num_threads(), 1u);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
