#include "edgeshare/runtime/core/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ES_CPU_RELAX() _mm_pause()
#else
#define ES_CPU_RELAX() ((void)0)
#endif

namespace edgeshare {
namespace runtime {
namespace {

// A helper spins this many rounds (a pause each, 40-49 ns measured on this project's Xeon) for the
// next job before it sleeps: about 100 us, longer than the gaps between the slab runs of one
// forward (small ops in between), far shorter than the gaps between forwards of an idle program.
constexpr int kHelperSpins = 2500;
// The caller, waiting for items a helper has taken, yields its core after this many rounds (about
// 40 us): on a busy machine that is what lets the helper finish.
constexpr int kCallerSpinsBeforeYield = 1000;

// Helper threads sharing one job at a time. The job's claim word packs its generation (so a helper
// that wakes late cannot claim from a later job), its item count and the next item; a helper reads
// the task and context only after claiming an item, and the caller cannot start another job before
// that item is done, so they are the claimed job's.
class Crew {
 public:
  // Starts `helpers` threads (they live as long as the process). False when one cannot start.
  bool start(size_t helpers) {
    for (size_t i = 0; i < helpers; ++i) {
      pthread_t thread;
      if (pthread_create(&thread, nullptr, &Crew::helper_main, this) != 0) return false;
      pthread_detach(thread);
    }
    return true;
  }

  void run(size_t count, ParallelTask task, void* context) {
    std::unique_lock<std::mutex> busy(job_mutex_, std::try_to_lock);
    if (!busy.owns_lock() || count < 2 || count > kMaxItems) {
      for (size_t i = 0; i < count; ++i) task(context, i);
      return;
    }
    task_.store(task, std::memory_order_relaxed);
    context_.store(context, std::memory_order_relaxed);
    completed_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (generation_.load(std::memory_order_relaxed) + 1) & kGenerationMask;
    claim_.store(pack(generation, count, 0), std::memory_order_release);
    generation_.store(generation, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    size_t mine = 0;
    for (size_t i; (i = claim(generation)) != kNone; ++mine) task(context, i);
    completed_.fetch_add(mine, std::memory_order_acq_rel);
    for (int spins = 0; completed_.load(std::memory_order_acquire) < count; ++spins) {
      if (spins < kCallerSpinsBeforeYield) {
        ES_CPU_RELAX();
      } else {
        sched_yield();
      }
    }
  }

 private:
  static constexpr size_t kNone = SIZE_MAX;
  static constexpr uint64_t kItemBits = 20;
  static constexpr uint64_t kMaxItems = (uint64_t{1} << kItemBits) - 1;
  static constexpr uint64_t kGenerationMask = (uint64_t{1} << (64 - 2 * kItemBits)) - 1;

  static uint64_t pack(uint64_t generation, uint64_t count, uint64_t next) {
    return generation << (2 * kItemBits) | count << kItemBits | next;
  }

  // The next unclaimed item of job `generation`, or kNone when it has none left (or is over).
  size_t claim(uint64_t generation) {
    uint64_t word = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = word & kMaxItems;
      const uint64_t count = (word >> kItemBits) & kMaxItems;
      if ((word >> (2 * kItemBits)) != generation || next >= count) return kNone;
      if (claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        return static_cast<size_t>(next);
      }
    }
  }

  static void* helper_main(void* crew) {
    static_cast<Crew*>(crew)->helper_loop();
    return nullptr;
  }

  void helper_loop() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      int spins = 0;
      while (generation_.load(std::memory_order_acquire) == seen && spins++ < kHelperSpins) {
        ES_CPU_RELAX();
      }
      if (generation_.load(std::memory_order_acquire) == seen) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = generation_.load(std::memory_order_acquire);
      for (size_t i; (i = claim(seen)) != kNone;) {
        task_.load(std::memory_order_relaxed)(context_.load(std::memory_order_relaxed), i);
        completed_.fetch_add(1, std::memory_order_acq_rel);
      }
    }
  }

  std::mutex job_mutex_;  // Held by the caller of the current job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> completed_{0};
  std::atomic<ParallelTask> task_{nullptr};
  std::atomic<void*> context_{nullptr};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

// Crews are never destroyed: a parallel_for on another thread may have read the previous crew just
// before set_num_threads() switched, and must be able to finish on it. One crew per thread count,
// made on first use and reused after, bounds what is kept to the distinct counts a process asks for.
constexpr size_t kMaxThreads = 256;
Crew* g_crews[kMaxThreads + 1] = {};
std::atomic<Crew*> g_crew{nullptr};
std::atomic<size_t> g_threads{1};
std::mutex g_mutex;

}  // namespace

Status set_num_threads(size_t threads) {
  ES_CHECK_OR_RETURN_ERROR(threads > 0 && threads <= kMaxThreads, Error::InvalidArgument,
                           "set_num_threads: %zu threads asked for, 1 to %zu are possible", threads,
                           kMaxThreads);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (threads == g_threads.load()) return Status();
  Crew* crew = nullptr;
  if (threads > 1) {
    if (g_crews[threads] == nullptr) {
      Crew* made = new Crew();
      // A crew whose threads did not all start still works (with fewer helpers): kept either way.
      const bool started = made->start(threads - 1);
      g_crews[threads] = made;
      ES_CHECK_OR_RETURN_ERROR(started, Error::MemoryAllocationFailed,
                               "set_num_threads: cannot start %zu helper threads", threads - 1);
    }
    crew = g_crews[threads];
  }
  g_crew.store(crew, std::memory_order_release);
  g_threads.store(threads);
  return Status();
}

size_t num_threads() { return g_threads.load(); }

void parallel_for(size_t count, ParallelTask task, void* context) {
  Crew* crew = g_crew.load(std::memory_order_acquire);
  if (crew == nullptr) {
    for (size_t i = 0; i < count; ++i) task(context, i);
    return;
  }
  crew->run(count, task, context);
}

}  // namespace runtime
}  // namespace edgeshare
