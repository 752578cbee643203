#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

#include <atomic>
#include <mutex>

#include "edgeshare/runtime/core/parallel.h"

namespace edgeshare {
namespace xnnpack {
namespace {

// Pools are never destroyed: an execute() on another thread may have read the previous pool just
// before set_num_threads() switched, and must be able to finish on it. One pool per thread count,
// made on first use and reused after, bounds what is kept to the distinct counts a process asks
// for.
constexpr size_t kMaxThreads = 256;
pthreadpool_t g_pools[kMaxThreads + 1] = {};
std::atomic<pthreadpool_t> g_pool{nullptr};
std::mutex g_mutex;

}  // namespace

runtime::Status set_num_threads(size_t threads) {
  ES_CHECK_OR_RETURN_ERROR(threads > 0 && threads <= kMaxThreads, runtime::Error::InvalidArgument,
                           "set_num_threads: %zu threads asked for, 1 to %zu are possible", threads,
                           kMaxThreads);
  std::lock_guard<std::mutex> lock(g_mutex);
  pthreadpool_t pool = nullptr;
  if (threads > 1) {
    if (g_pools[threads] == nullptr) g_pools[threads] = pthreadpool_create(threads);
    pool = g_pools[threads];
    ES_CHECK_OR_RETURN_ERROR(pool != nullptr, runtime::Error::MemoryAllocationFailed,
                             "set_num_threads: cannot create a pool of %zu threads", threads);
  }
  ES_RETURN_IF_ERROR(runtime::set_num_threads(threads));
  g_pool.store(pool, std::memory_order_release);
  return runtime::Status();
}

size_t num_threads() { return runtime::num_threads(); }

pthreadpool_t threadpool() { return g_pool.load(std::memory_order_acquire); }

void parallel_for(size_t count, ParallelTask task, void* context) {
  runtime::parallel_for(count, task, context);
}

}  // namespace xnnpack
}  // namespace edgeshare
