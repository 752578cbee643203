#include "edgeshare/backends/xnnpack/runtime/threadpool.h"

#include "edgeshare/runtime/core/log.h"

namespace edgeshare {
namespace xnnpack {
namespace {

void* CreatePool(size_t threads) { return pthreadpool_create(threads); }

void DestroyPool(void* pool) { pthreadpool_destroy(static_cast<pthreadpool_t>(pool)); }

// The slot of the pool in every Threads, registered before main() (this file is linked into every
// binary that has the delegate: its operators call threadpool()). Never changes after.
const size_t kNoSlot = runtime::Threads::kMaxResources;
const size_t g_slot = [] {
  runtime::ThreadsResource pool;
  pool.create = &CreatePool;
  pool.destroy = &DestroyPool;
  runtime::Result<size_t> slot = runtime::register_threads_resource(pool);
  if (!slot.ok()) {
    ES_LOG(Error, "XNNPACK delegate: %s", slot.status().message());
    return kNoSlot;
  }
  return *slot;
}();

}  // namespace

size_t num_threads() {
  const runtime::Threads* threads = runtime::current_threads();
  return threads != nullptr ? threads->count() : 1;
}

pthreadpool_t threadpool() {
  const runtime::Threads* threads = runtime::current_threads();
  return threads != nullptr ? static_cast<pthreadpool_t>(threads->resource(g_slot)) : nullptr;
}

}  // namespace xnnpack
}  // namespace edgeshare
