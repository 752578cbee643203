// The XNNPACK delegate's threads: the pthreadpool its operators run on, one per runtime Threads.
//
// The delegate registers a ThreadsResource (runtime/core/threads.h), so every Threads of 2+ threads
// an embedder makes carries a pthreadpool of its count; the delegate's operators and its weights
// cache's packing run on the pool of the Threads current on the calling thread (a Method opens a
// scope of the Threads it was loaded with around its load and every execute). No current Threads,
// or a 1-thread one: null, the calling thread alone. XNNPACK serialises concurrent calls into one
// pool, so two methods sharing one Threads on two threads stay correct.
//
//   ES_ASSIGN_OR_RETURN(runtime::Threads threads, runtime::Threads::create(2));
//   const runtime::ThreadsScope scope(&threads);
//   pthreadpool_t pool = edgeshare::xnnpack::threadpool();   // threads' pool of 2
//
// Thread-safety: every function may be called from any thread; each reads the calling thread's
// current Threads. Never allocates.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_THREADPOOL_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_THREADPOOL_H_

#include <pthreadpool.h>

#include <cstddef>

#include "edgeshare/runtime/core/threads.h"

namespace edgeshare {
namespace xnnpack {

// The current Threads' count (1 without one).
size_t num_threads();

// The pool operators run on, or null for the calling thread alone.
pthreadpool_t threadpool();

// runtime::parallel_for: the current Threads' helpers.
using runtime::parallel_for;
using runtime::ParallelTask;

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_THREADPOOL_H_
