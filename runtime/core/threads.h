// Threads: the helper threads one execution context splits its work across, owned by the embedder
// and passed to what runs (Program::load_method, and through it every execute of the Method), and
// parallel_for to split work across the current thread's Threads.
//
// Nothing here is process-wide. An embedder makes a Threads with a count; a ThreadsScope makes it
// the current one on the calling thread for as long as the scope lives (a Method opens one around
// its load and every execute); parallel_for and the delegates' pools read the current one. Without
// a scope, or with a 1-thread Threads, everything runs on the calling thread. Two Threads of
// different counts serve two threads of one process at once.
//
//   using edgeshare::runtime::Threads;
//   ES_ASSIGN_OR_RETURN(Threads threads, Threads::create(2));   // kept in place while used
//   ES_ASSIGN_OR_RETURN(Method forward, program.load_method("forward", &data, &threads));
//   ES_RETURN_IF_ERROR(forward.execute());   // its kernels and delegates split work over 2 threads
//
//   const edgeshare::runtime::ThreadsScope scope(&threads);   // code that is not a Method
//   edgeshare::runtime::parallel_for(heads, &attend_one_head, &context);
//
// Unlike a pthreadpool call, which returns only once every pool thread has checked in,
// parallel_for waits only for the items a helper has taken, so a helper the system has not
// scheduled yet (a busy machine) costs parallelism, not a wait for the next scheduler tick.
// Helpers spin briefly for the next job, then sleep: an idle Threads costs no CPU.
//
// While it spins between jobs a helper can read into its caches what the caller is about to need
// (warm_while_idle): the caller's serial work between two parallel operators then hides the fetch
// of the next operator's data instead of leaving the helper's core and its memory traffic idle.
//
// A backend that needs its own pool per Threads (the XNNPACK delegate's pthreadpool) registers a
// ThreadsResource once, from a static initializer; every Threads of 2+ threads made after makes
// one of each and destroys it with itself, so an execute never creates threads.
//
// Errors: create() returns InvalidArgument for 0 or more than 256 threads, MemoryAllocationFailed
// if a helper thread or a resource cannot be made.
// Thread-safety: a Threads may be current on several threads at once: while one thread's
// parallel_for holds its helpers, another thread's runs its items alone (no waiting), and
// resources must allow the same (pthreadpool serialises its callers). parallel_for never
// allocates.
// Ownership and lifetime: a Threads owns its helper threads (joined by its destructor) and
// resources. Whatever points at it (a scope, a Method) must be gone before it is destroyed or
// moved; the embedder keeps it in place (e.g. behind a std::unique_ptr) for as long.

#ifndef EDGESHARE_RUNTIME_CORE_THREADS_H_
#define EDGESHARE_RUNTIME_CORE_THREADS_H_

#include <cstddef>

#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace runtime {

using ParallelTask = void (*)(void* context, size_t index);

// Bytes for the helpers to read into their caches while idle (warm_while_idle).
struct WarmRange {
  const void* data = nullptr;
  size_t bytes = 0;
};

// What a backend keeps per Threads of 2+ threads, made and destroyed with it.
struct ThreadsResource {
  // Makes the resource for `threads` threads (the caller's included); null when it cannot.
  void* (*create)(size_t threads) = nullptr;
  void (*destroy)(void* resource) = nullptr;
};

class Threads {
 public:
  static constexpr size_t kMaxThreads = 256;
  static constexpr size_t kMaxResources = 4;

  // `count` threads: the caller's and count - 1 helpers, started now.
  static Result<Threads> create(size_t count);

  Threads(Threads&& other) noexcept;
  Threads& operator=(Threads&& other) noexcept;
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;
  ~Threads();

  size_t count() const { return count_; }
  // Bytes the helpers have read for warm_while_idle since this Threads was made (0 with no
  // helpers): what a caller can check that its requests are served.
  size_t warmed_bytes() const;
  // The resource registered at `slot` (register_threads_resource), or null for a 1-thread Threads
  // or one made before the registration.
  void* resource(size_t slot) const { return slot < kMaxResources ? resources_[slot] : nullptr; }

 private:
  friend void parallel_for(size_t count, ParallelTask task, void* context);
  friend void warm_while_idle(const WarmRange* ranges, size_t count);
  class Crew;
  Threads() = default;
  void release();

  size_t count_ = 1;
  Crew* crew_ = nullptr;  // Null for 1 thread.
  void* resources_[kMaxResources] = {};
};

// Registers a resource for every Threads made after; returns its slot for Threads::resource.
// Meant for static initializers, before any Threads is made. Errors: InvalidArgument for a
// resource without create or destroy; OutOfRange past kMaxResources registrations.
Result<size_t> register_threads_resource(const ThreadsResource& resource);

// Makes `threads` the calling thread's current Threads until the scope ends, then restores the
// previous one. Null: the calling thread alone. Scopes nest; one lives on one thread.
class ThreadsScope {
 public:
  explicit ThreadsScope(const Threads* threads);
  ~ThreadsScope();
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  const Threads* previous_;
};

// The calling thread's current Threads, or null (the calling thread alone).
const Threads* current_threads();

// Runs task(context, i) for every i in [0, count), each once, on the calling thread and the
// current Threads' helpers; returns when all are done.
void parallel_for(size_t count, ParallelTask task, void* context);

// The most ranges one warm_while_idle request holds.
constexpr size_t kMaxWarmRanges = 64;

// Asks the current Threads' helpers to read `ranges` (the first kMaxWarmRanges) into their caches
// while they have no job, replacing the request before: each helper takes every helpers-th range
// and reads it a cache line at a time, pausing for each parallel_for job and going on after it
// from where it stopped. Returns at once; the ranges are copied, and their memory need not stay
// valid (the reads are prefetches, which never fault). A request wakes helpers that sleep (no job
// for a while). Without helpers it does nothing. Never allocates.
void warm_while_idle(const WarmRange* ranges, size_t count);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_THREADS_H_
