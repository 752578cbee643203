#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

#include <atomic>
#include <mutex>

namespace edgeshare {
namespace xnnpack {
namespace {

std::atomic<pthreadpool_t> g_pool{nullptr};
std::atomic<size_t> g_threads{1};
std::mutex g_mutex;

}  // namespace

runtime::Status set_num_threads(size_t threads) {
  ES_CHECK_OR_RETURN_ERROR(threads > 0, runtime::Error::InvalidArgument,
                           "set_num_threads: at least one thread is needed");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (threads == g_threads.load()) return runtime::Status();
  pthreadpool_t pool = nullptr;
  if (threads > 1) {
    pool = pthreadpool_create(threads);
    ES_CHECK_OR_RETURN_ERROR(pool != nullptr, runtime::Error::MemoryAllocationFailed,
                             "set_num_threads: cannot create a pool of %zu threads", threads);
  }
  pthreadpool_t old = g_pool.exchange(pool);
  g_threads.store(threads);
  if (old != nullptr) pthreadpool_destroy(old);
  return runtime::Status();
}

size_t num_threads() { return g_threads.load(); }

pthreadpool_t threadpool() { return g_pool.load(std::memory_order_acquire); }

}  // namespace xnnpack
}  // namespace edgeshare
