// Threads and parallel_for: every item runs exactly once at any thread count, from two callers
// sharing one Threads, and from two threads each under its own Threads of another count (CI runs
// this under TSan); a Threads stops its helpers when destroyed; helpers warm each requested line
// once between jobs, asleep or not.

#include "edgeshare/runtime/core/threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "edgeshare/runtime/core/scoped_threads.h"

namespace edgeshare {
namespace runtime {
namespace {

TEST(ThreadsTest, zero_or_too_many_threads_is_an_error) {
  EXPECT_EQ(Threads::create(0).error(), Error::InvalidArgument);
  EXPECT_EQ(Threads::create(257).error(), Error::InvalidArgument);
  Result<Threads> two = Threads::create(2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->count(), 2u);
}

// Per-index counters for parallel_for: each index must be run exactly once.
struct Marks {
  std::atomic<int> seen[97];
};

void Mark(void* context, size_t i) {
  static_cast<Marks*>(context)->seen[i].fetch_add(1, std::memory_order_relaxed);
}

// True when parallel_for(count) under the current Threads ran each of count items once.
bool EveryItemOnce(size_t count) {
  Marks marks;
  for (auto& m : marks.seen) m.store(0);
  parallel_for(count, Mark, &marks);
  for (size_t i = 0; i < 97; ++i) {
    if (marks.seen[i].load() != (i < count ? 1 : 0)) return false;
  }
  return true;
}

TEST(ThreadsTest, parallel_for_runs_every_index_once_at_any_thread_count) {
  EXPECT_EQ(current_threads(), nullptr);
  EXPECT_TRUE(EveryItemOnce(97));  // no scope: the calling thread alone
  for (size_t count : {1u, 2u, 3u}) {
    Result<Threads> threads = Threads::create(count);
    ASSERT_TRUE(threads.ok()) << threads.status().message();
    const ThreadsScope scope(&*threads);
    EXPECT_EQ(current_threads(), &*threads);
    for (size_t items : {0u, 1u, 2u, 5u, 97u}) {
      for (int round = 0; round < 50; ++round) ASSERT_TRUE(EveryItemOnce(items)) << items;
    }
  }
  EXPECT_EQ(current_threads(), nullptr);
}

TEST(ThreadsTest, scopes_nest_and_restore_the_previous_threads) {
  Result<Threads> two = Threads::create(2);
  Result<Threads> three = Threads::create(3);
  ASSERT_TRUE(two.ok() && three.ok());
  {
    const ThreadsScope outer(&*two);
    {
      const ThreadsScope inner(&*three);
      EXPECT_EQ(current_threads(), &*three);
      const ThreadsScope alone(nullptr);
      EXPECT_EQ(current_threads(), nullptr);
    }
    EXPECT_EQ(current_threads(), &*two);
  }
  EXPECT_EQ(current_threads(), nullptr);
}

TEST(ThreadsTest, two_callers_share_one_threads) {
  Result<Threads> threads = Threads::create(2);
  ASSERT_TRUE(threads.ok());
  std::atomic<int> wrong{0};
  auto caller = [&] {
    const ThreadsScope scope(&*threads);
    for (int round = 0; round < 300; ++round) wrong.fetch_add(EveryItemOnce(97) ? 0 : 1);
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadsTest, two_threads_each_under_its_own_threads_at_once) {
  Result<Threads> one = Threads::create(1);
  Result<Threads> two = Threads::create(2);
  ASSERT_TRUE(one.ok() && two.ok());
  std::atomic<int> wrong{0};
  auto caller = [&](const Threads* threads) {
    const ThreadsScope scope(threads);
    for (int round = 0; round < 300; ++round) wrong.fetch_add(EveryItemOnce(97) ? 0 : 1);
    if (current_threads() != threads) wrong.fetch_add(1);
  };
  std::thread a(caller, &*one), b(caller, &*two);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadsTest, threads_made_and_destroyed_many_times_stop_their_helpers) {
  for (int round = 0; round < 100; ++round) {
    Result<Threads> threads = Threads::create(1 + round % 4);
    ASSERT_TRUE(threads.ok()) << threads.status().message();
    const ThreadsScope scope(&*threads);
    ASSERT_TRUE(EveryItemOnce(round % 97));
  }
}

TEST(ThreadsTest, a_moved_threads_keeps_its_helpers) {
  Result<Threads> made = Threads::create(3);
  ASSERT_TRUE(made.ok());
  Threads threads = std::move(*made);
  EXPECT_EQ(threads.count(), 3u);
  const ThreadsScope scope(&threads);
  EXPECT_TRUE(EveryItemOnce(97));
}

TEST(ThreadsTest, helpers_warm_each_requested_line_once_while_idle) {
  std::vector<char> data(1 << 20);
  for (size_t count : {2u, 3u}) {
    Result<Threads> threads = Threads::create(count);
    ASSERT_TRUE(threads.ok()) << threads.status().message();
    const ThreadsScope scope(&*threads);
    // Eight ranges, one of a part line: each is read by one helper, a line at a time.
    WarmRange ranges[8];
    size_t want = 0;
    constexpr size_t kRangeBytes = size_t{64} << 10;
    for (size_t i = 0; i < 8; ++i) {
      ranges[i] = {data.data() + i * kRangeBytes, kRangeBytes - (i == 3 ? 10 : 0)};
      want += kRangeBytes;
    }
    warm_while_idle(ranges, 8);
    EXPECT_EQ(wait_for_warmed(*threads, want), want);
    // Past kMaxWarmRanges a request is cut; a job in the middle of one runs every item.
    std::vector<WarmRange> many(kMaxWarmRanges + 30, WarmRange{data.data(), 64});
    warm_while_idle(many.data(), many.size());
    EXPECT_TRUE(EveryItemOnce(97));
    want += kMaxWarmRanges * 64;
    EXPECT_EQ(wait_for_warmed(*threads, want), want);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(threads->warmed_bytes(), want);
  }
}

TEST(ThreadsTest, helpers_asleep_wake_for_a_warm_request_and_jobs_preempt_one) {
  std::vector<char> data(8 << 20);
  Result<Threads> threads = Threads::create(2);
  ASSERT_TRUE(threads.ok());
  const ThreadsScope scope(&*threads);
  ASSERT_TRUE(EveryItemOnce(97));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the helpers' spin
  const WarmRange all{data.data(), data.size()};
  warm_while_idle(&all, 1);
  // Jobs while the helper reads 8 MiB: each takes the helper off it and gives it back.
  for (int round = 0; round < 200; ++round) ASSERT_TRUE(EveryItemOnce(round % 97));
  EXPECT_EQ(wait_for_warmed(*threads, data.size()), data.size());
}

TEST(ThreadsTest, warming_without_helpers_does_nothing) {
  std::vector<char> data(4096);
  const WarmRange range{data.data(), data.size()};
  warm_while_idle(&range, 1);  // no current Threads
  Result<Threads> one = Threads::create(1);
  ASSERT_TRUE(one.ok());
  const ThreadsScope scope(&*one);
  warm_while_idle(&range, 1);
  EXPECT_EQ(one->warmed_bytes(), 0u);
  EXPECT_TRUE(EveryItemOnce(97));
}

int g_made = 0;
int g_destroyed = 0;
void* MakeResource(size_t threads) {
  ++g_made;
  return reinterpret_cast<void*>(threads);
}
void DestroyResource(void* /*resource*/) { ++g_destroyed; }

TEST(ThreadsTest, a_registered_resource_lives_as_long_as_each_threads_of_two_or_more) {
  ThreadsResource resource;
  resource.create = &MakeResource;
  resource.destroy = &DestroyResource;
  Result<size_t> slot = register_threads_resource(resource);
  ASSERT_TRUE(slot.ok()) << slot.status().message();
  EXPECT_EQ(register_threads_resource(ThreadsResource()).error(), Error::InvalidArgument);
  {
    Result<Threads> one = Threads::create(1);
    Result<Threads> three = Threads::create(3);
    ASSERT_TRUE(one.ok() && three.ok());
    EXPECT_EQ(one->resource(*slot), nullptr);
    EXPECT_EQ(three->resource(*slot), reinterpret_cast<void*>(3));
    EXPECT_EQ(g_made, 1);
    EXPECT_EQ(g_destroyed, 0);
  }
  EXPECT_EQ(g_destroyed, 1);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
