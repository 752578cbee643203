// ScopedThreads, for tests and benchmarks: a Threads of a given count, current on the calling
// thread while the object lives. Other threads of the test open their own ThreadsScope on get().
//
//   for (size_t count : {1u, 2u}) {
//     const ScopedThreads threads(count);   // aborts if the threads cannot start
//     ... run the operator ...
//   }
//
// wait_for_warmed polls a Threads until its helpers have warmed a number of bytes
// (warm_while_idle), for tests that check a request is served.
//
// Thread-safety: one lives on one thread. Not for production code: it aborts instead of returning
// an error.

#ifndef EDGESHARE_RUNTIME_CORE_SCOPED_THREADS_H_
#define EDGESHARE_RUNTIME_CORE_SCOPED_THREADS_H_

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
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

// Polls (for at most ten seconds) until `threads` has warmed at least `bytes`; returns what it had
// warmed then.
inline size_t wait_for_warmed(const Threads& threads, size_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t warmed = threads.warmed_bytes();
  while (warmed < bytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    warmed = threads.warmed_bytes();
  }
  return warmed;
}

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_SCOPED_THREADS_H_
