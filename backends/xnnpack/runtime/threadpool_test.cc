// The delegate's pools: one per runtime Threads of 2+ threads, made with it; the calling thread's
// current Threads picks the pool; two threads under two Threads run work on their own pools at
// once (CI runs this under ASan and TSan).

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::Result;
using runtime::Threads;
using runtime::ThreadsScope;

// Pieces of work done. Constant-initialized, so no thread writes it before the pool's threads do:
// Debian's pthreadpool is not built for ThreadSanitizer, whose reports would otherwise flag the
// pool threads' first touch of memory another thread initialized (it cannot see the pool's own
// synchronisation).
std::atomic<size_t> g_done{0};

void Count(void* /*context*/, size_t /*i*/) { g_done.fetch_add(1, std::memory_order_relaxed); }

TEST(ThreadpoolTest, without_threads_there_is_no_pool) {
  EXPECT_EQ(threadpool(), nullptr);
  EXPECT_EQ(num_threads(), 1u);
  Result<Threads> one = Threads::create(1);
  ASSERT_TRUE(one.ok());
  const ThreadsScope scope(&*one);
  EXPECT_EQ(threadpool(), nullptr);
  EXPECT_EQ(num_threads(), 1u);
}

TEST(ThreadpoolTest, each_threads_carries_its_own_pool_of_its_count) {
  Result<Threads> two = Threads::create(2);
  Result<Threads> three = Threads::create(3);
  ASSERT_TRUE(two.ok() && three.ok());
  pthreadpool_t pool_two = nullptr;
  {
    const ThreadsScope scope(&*two);
    pool_two = threadpool();
    ASSERT_NE(pool_two, nullptr);
    EXPECT_EQ(pthreadpool_get_threads_count(pool_two), 2u);
    EXPECT_EQ(num_threads(), 2u);
  }
  {
    const ThreadsScope scope(&*three);
    ASSERT_NE(threadpool(), nullptr);
    EXPECT_NE(threadpool(), pool_two);
    EXPECT_EQ(pthreadpool_get_threads_count(threadpool()), 3u);
  }
  EXPECT_EQ(threadpool(), nullptr);
}

TEST(ThreadpoolTest, two_threads_under_two_threads_objects_run_work_at_once) {
  Result<Threads> two = Threads::create(2);
  Result<Threads> three = Threads::create(3);
  ASSERT_TRUE(two.ok() && three.ok());
  const size_t before = g_done.load();
  std::atomic<int> wrong_pool{0};
  auto worker = [&](const Threads* threads) {
    const ThreadsScope scope(threads);
    for (int round = 0; round < 200; ++round) {
      // What an operator run does with its pool: work split across its threads.
      pthreadpool_t pool = threadpool();
      if (pthreadpool_get_threads_count(pool) != threads->count()) wrong_pool.fetch_add(1);
      pthreadpool_parallelize_1d(pool, Count, nullptr, 64, /*flags=*/0);
    }
  };
  std::thread a(worker, &*two), b(worker, &*three);
  a.join();
  b.join();
  EXPECT_EQ(wrong_pool.load(), 0);
  EXPECT_EQ(g_done.load() - before, 2u * 200u * 64u);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
