// ScopedThreads, for tests and benchmarks: a Threads of a given count, current on the calling
// thread while the object lives. Other threads of the test open their own ThreadsScope on get().
//
//   for (size_t count : {1u, 2u}) {
//     const ScopedThreads threads(count);   // aborts if the threads cannot start
//     ... run the operator ...
//   }
//
// Thread-safety: one lives on one thread. Not for production code: it aborts instead of returning
// an error.

#ifndef EDGESHARE_RUNTIME_CORE_SCOPED_THREADS_H_
#define EDGESHARE_RUNTIME_CORE_SCOPED_THREADS_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "edgeshare/runtime/core/threads.h"

namespace edgeshare {
namespace runtime {

class ScopedThreads {
 public:
  explicit ScopedThreads(size_t count) : threads_(make(count)), scope_(&threads_) {}

  const Threads* get() const { return &threads_; }

 private:
  static Threads make(size_t count) {
    Result<Threads> threads = Threads::create(count);
    if (!threads.ok()) {
      std::fprintf(stderr, "ScopedThreads: %s\n", threads.status().message());
      std::abort();
    }
    return std::move(*threads);
  }

  Threads threads_;
  ThreadsScope scope_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_SCOPED_THREADS_H_
