// Helper threads for the runtime's own kernels and the delegate: how many threads one execute may
// split its work across, and parallel_for to split it.
//
// By default everything runs on the thread that calls Method::execute() (1 thread).
// set_num_threads(n) starts n - 1 helper threads once per count (kept for the life of the process
// and reused); parallel_for then hands items to them and to the caller. Unlike a pthreadpool call,
// which returns only once every pool thread has checked in, parallel_for waits only for the items
// a helper has taken, so a helper the system has not scheduled yet (a busy machine) costs
// parallelism, not a wait for the next scheduler tick. Helpers spin briefly for the next job, then
// sleep: an idle program costs no CPU.
//
//   ES_RETURN_IF_ERROR(edgeshare::runtime::set_num_threads(2));
//   edgeshare::runtime::parallel_for(heads, &attend_one_head, &context);
//
// The XNNPACK delegate's xnnpack::set_num_threads() sets this count too (and its operators' pool).
//
// Errors: InvalidArgument for 0 or more than 256 threads, MemoryAllocationFailed if the helpers
// cannot start.
// Thread-safety: every function may be called from any thread, set_num_threads() included while
// other threads run parallel_for: a call that already read the previous helpers finishes on them,
// because helpers are never stopped. While one thread's parallel_for holds the helpers, another
// thread's runs its items alone (no waiting). Never allocates after set_num_threads().

#ifndef EDGESHARE_RUNTIME_CORE_PARALLEL_H_
#define EDGESHARE_RUNTIME_CORE_PARALLEL_H_

#include <cstddef>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

Status set_num_threads(size_t threads);
size_t num_threads();

// Runs task(context, i) for every i in [0, count), each once, on the calling thread and the
// current thread count's helpers; returns when all are done.
using ParallelTask = void (*)(void* context, size_t index);
void parallel_for(size_t count, ParallelTask task, void* context);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_PARALLEL_H_
