// Threads for the XNNPACK delegate: how many threads its operators split their work across.
//
// By default every operator runs on the thread that calls Method::execute() (1 thread). Asking for
// more creates one process-wide pthreadpool that every delegate handle uses; XNNPACK serialises
// concurrent calls into one pool, so two methods running on two threads stay correct. The same
// count is set for the runtime's helper threads (runtime/core/parallel.h), which parallel_for uses
// (the weights cache's slabs, the portable attention kernel).
//
//   ES_RETURN_IF_ERROR(edgeshare::xnnpack::set_num_threads(2));   // before executing
//   ... method.execute() ...
//
// Errors: InvalidArgument for 0 or more than 256 threads, MemoryAllocationFailed if the pool cannot
// be made.
// Thread-safety: every function may be called from any thread, set_num_threads() included while
// other threads execute: an execution that already read the previous pool finishes on it, because
// pools are never destroyed (one per thread count, kept for the life of the process and reused).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_THREADPOOL_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_THREADPOOL_H_

#include <pthreadpool.h>

#include <cstddef>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace xnnpack {

runtime::Status set_num_threads(size_t threads);
size_t num_threads();

// The pool operators run on, or null for the calling thread alone.
pthreadpool_t threadpool();

// Runs task(context, i) for every i in [0, count), each once, on the calling thread and the
// current thread count's helpers; returns when all are done. Never allocates. While another
// thread's parallel_for holds the helpers, this one runs its items alone (no waiting).
using ParallelTask = void (*)(void* context, size_t index);
void parallel_for(size_t count, ParallelTask task, void* context);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_THREADPOOL_H_
