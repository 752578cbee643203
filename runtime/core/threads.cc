#include "edgeshare/runtime/core/threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ES_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define ES_CPU_RELAX() __asm__ volatile("yield")
#else
#define ES_CPU_RELAX() ((void)0)
#endif

namespace edgeshare {
namespace runtime {
namespace {

// How long a helper spins for the next job before it sleeps: longer than the gaps between the
// parallel runs of one forward (small ops in between), far shorter than the gaps between forwards
// of an idle program. Measured on a clock, not in rounds: a pause takes 40-49 ns on one Xeon and
// 9 ns on another, and counted rounds slept four times as early there.
constexpr std::chrono::microseconds kHelperSpin{100};
// How long the caller, waiting for items a helper has taken, spins before it yields its core after
// each round: on a busy machine that is what lets the helper finish.
constexpr std::chrono::microseconds kCallerSpinBeforeYield{40};
// Pauses between readings of the clock while spinning.
constexpr unsigned kSpinsPerClockRead = 16;
// Cache lines a helper warms between looks for a job. A prefetch waits for a free fill buffer when
// many are in flight, so a look every few lines keeps a job from waiting on the helper's reads; a
// look is a few loads of lines this core already holds.
constexpr size_t kWarmLinesPerLook = 2;
constexpr size_t kLineBytes = 64;

// True once `budget` has passed since `start`, read every kSpinsPerClockRead calls (`spins`
// counts them).
bool spun_out(std::chrono::steady_clock::time_point start, std::chrono::microseconds budget,
              unsigned spins) {
  return spins % kSpinsPerClockRead == 0 && std::chrono::steady_clock::now() - start >= budget;
}

}  // namespace

// Helper threads sharing one job at a time. The job's claim word packs its generation (so a helper
// that wakes late cannot claim from a later job), its item count and the next item; a helper reads
// the task and context only after claiming an item, and the caller cannot start another job before
// that item is done, so they are the claimed job's.
class Threads::Crew {
 public:
  // Starts `helpers` threads. False when one cannot start (those that did are stopped by the
  // destructor).
  bool start(size_t helpers) {
    helpers_ = helpers;
    for (size_t i = 0; i < helpers; ++i) {
      starts_[i] = HelperStart{this, i};
      pthread_t thread;
      if (pthread_create(&thread, nullptr, &Crew::helper_main, &starts_[i]) != 0) return false;
      threads_[started_++] = thread;
    }
    return true;
  }

  // Replaces the ranges the helpers warm while idle, waking those asleep.
  void warm(const WarmRange* ranges, size_t count) {
    {
      std::lock_guard<std::mutex> lock(warm_mutex_);
      warm_count_ = std::min(count, kMaxWarmRanges);
      std::copy(ranges, ranges + warm_count_, warm_ranges_);
      warm_serial_.fetch_add(1, std::memory_order_seq_cst);
    }
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
  }

  size_t warmed_bytes() const { return warmed_bytes_.load(std::memory_order_relaxed); }

  // Wakes every helper to stop and joins it. No job may be running.
  ~Crew() {
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      stopping_.store(true, std::memory_order_seq_cst);
      wake_.notify_all();
    }
    for (size_t i = 0; i < started_; ++i) pthread_join(threads_[i], nullptr);
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
    const auto start = std::chrono::steady_clock::now();
    bool yielding = false;
    for (unsigned spins = 1; completed_.load(std::memory_order_acquire) < count; ++spins) {
      yielding = yielding || spun_out(start, kCallerSpinBeforeYield, spins);
      if (yielding) {
        sched_yield();
      } else {
        ES_CPU_RELAX();
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

  struct HelperStart {
    Crew* crew;
    size_t index;
  };

  // One helper's share of the current warm request and how far it has read it.
  struct WarmCursor {
    WarmRange ranges[kMaxWarmRanges];
    size_t count = 0, range = 0, offset = 0;
    uint64_t serial = 0;
  };

  static void* helper_main(void* start) {
    const HelperStart& s = *static_cast<const HelperStart*>(start);
    s.crew->helper_loop(s.index);
    return nullptr;
  }

  // Warms helper `index`'s share of the current request from where it stopped, until the share is
  // read or a job, a stop or a new request comes. False when there was nothing to read.
  bool warm_some(WarmCursor& cursor, size_t index, uint64_t seen) {
    if (warm_serial_.load(std::memory_order_acquire) != cursor.serial) {
      std::lock_guard<std::mutex> lock(warm_mutex_);
      cursor.count = 0;
      for (size_t r = index; r < warm_count_; r += helpers_) {
        cursor.ranges[cursor.count++] = warm_ranges_[r];
      }
      cursor.serial = warm_serial_.load(std::memory_order_relaxed);
      cursor.range = 0;
      cursor.offset = 0;
    }
    if (cursor.range >= cursor.count) return false;
    size_t lines = 0;
    while (cursor.range < cursor.count) {
      const WarmRange& r = cursor.ranges[cursor.range];
      const char* data = static_cast<const char*>(r.data);
      while (cursor.offset < r.bytes) {
        __builtin_prefetch(data + cursor.offset, 0, 2);
        cursor.offset += kLineBytes;
        if (++lines % kWarmLinesPerLook == 0 &&
            (!idle(seen) || warm_serial_.load(std::memory_order_relaxed) != cursor.serial)) {
          warmed_bytes_.fetch_add(lines * kLineBytes, std::memory_order_relaxed);
          return true;
        }
      }
      ++cursor.range;
      cursor.offset = 0;
    }
    warmed_bytes_.fetch_add(lines * kLineBytes, std::memory_order_relaxed);
    return true;
  }

  // True while there is neither a job after `seen` nor a stop to act on.
  bool idle(uint64_t seen) const {
    return generation_.load(std::memory_order_seq_cst) == seen &&
           !stopping_.load(std::memory_order_seq_cst);
  }

  void helper_loop(size_t index) {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    WarmCursor cursor;
    for (;;) {
      // The spin's budget runs from the last job or warm read.
      auto start = std::chrono::steady_clock::now();
      for (unsigned spins = 1; idle(seen); ++spins) {
        if (warm_some(cursor, index, seen)) {
          start = std::chrono::steady_clock::now();
          continue;
        }
        if (spun_out(start, kHelperSpin, spins)) break;
        ES_CPU_RELAX();
      }
      if (idle(seen)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        wake_.wait(lock, [&] {
          return !idle(seen) || warm_serial_.load(std::memory_order_seq_cst) != cursor.serial;
        });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      // A helper may first run after the stop (the caller ran every item itself): stopping_ is
      // checked whatever generation it saw.
      if (stopping_.load(std::memory_order_acquire)) return;
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
  std::atomic<bool> stopping_{false};
  // The warm request: written by warm() and copied by each helper under warm_mutex_; a new one
  // bumps warm_serial_.
  std::mutex warm_mutex_;
  WarmRange warm_ranges_[kMaxWarmRanges];
  size_t warm_count_ = 0;
  std::atomic<uint64_t> warm_serial_{0};
  std::atomic<size_t> warmed_bytes_{0};
  size_t helpers_ = 0;
  HelperStart starts_[Threads::kMaxThreads] = {};
  pthread_t threads_[Threads::kMaxThreads] = {};
  size_t started_ = 0;
};

namespace {

// The registered resources: written by static initializers before any Threads is made, read by
// Threads::create.
ThreadsResource g_resources[Threads::kMaxResources];
std::atomic<size_t> g_resource_count{0};
std::mutex g_resource_mutex;

thread_local const Threads* t_current = nullptr;

}  // namespace

Result<size_t> register_threads_resource(const ThreadsResource& resource) {
  ES_CHECK_OR_RETURN_ERROR(resource.create != nullptr && resource.destroy != nullptr,
                           Error::InvalidArgument,
                           "register_threads_resource: a resource needs create and destroy");
  std::lock_guard<std::mutex> lock(g_resource_mutex);
  const size_t slot = g_resource_count.load(std::memory_order_relaxed);
  ES_CHECK_OR_RETURN_ERROR(slot < Threads::kMaxResources, Error::OutOfRange,
                           "register_threads_resource: %zu resources registered already, the most "
                           "a Threads holds",
                           slot);
  g_resources[slot] = resource;
  g_resource_count.store(slot + 1, std::memory_order_release);
  return slot;
}

Result<Threads> Threads::create(size_t count) {
  ES_CHECK_OR_RETURN_ERROR(count > 0 && count <= kMaxThreads, Error::InvalidArgument,
                           "Threads::create: %zu threads asked for, 1 to %zu are possible", count,
                           kMaxThreads);
  Threads threads;
  threads.count_ = count;
  if (count == 1) return threads;
  threads.crew_ = new (std::nothrow) Crew();
  ES_CHECK_OR_RETURN_ERROR(threads.crew_ != nullptr, Error::MemoryAllocationFailed,
                           "Threads::create: no memory for %zu helper threads", count - 1);
  ES_CHECK_OR_RETURN_ERROR(threads.crew_->start(count - 1), Error::MemoryAllocationFailed,
                           "Threads::create: cannot start %zu helper threads", count - 1);
  const size_t resources = g_resource_count.load(std::memory_order_acquire);
  for (size_t slot = 0; slot < resources; ++slot) {
    threads.resources_[slot] = g_resources[slot].create(count);
    ES_CHECK_OR_RETURN_ERROR(threads.resources_[slot] != nullptr, Error::MemoryAllocationFailed,
                             "Threads::create: cannot make resource %zu for %zu threads", slot,
                             count);
  }
  return threads;
}

Threads::Threads(Threads&& other) noexcept
    : count_(other.count_), crew_(other.crew_) {
  for (size_t i = 0; i < kMaxResources; ++i) {
    resources_[i] = other.resources_[i];
    other.resources_[i] = nullptr;
  }
  other.count_ = 1;
  other.crew_ = nullptr;
}

Threads& Threads::operator=(Threads&& other) noexcept {
  if (this == &other) return *this;
  release();
  count_ = other.count_;
  crew_ = other.crew_;
  for (size_t i = 0; i < kMaxResources; ++i) {
    resources_[i] = other.resources_[i];
    other.resources_[i] = nullptr;
  }
  other.count_ = 1;
  other.crew_ = nullptr;
  return *this;
}

Threads::~Threads() { release(); }

void Threads::release() {
  for (size_t slot = 0; slot < kMaxResources; ++slot) {
    if (resources_[slot] != nullptr) g_resources[slot].destroy(resources_[slot]);
    resources_[slot] = nullptr;
  }
  delete crew_;
  crew_ = nullptr;
  count_ = 1;
}

ThreadsScope::ThreadsScope(const Threads* threads) : previous_(t_current) { t_current = threads; }

ThreadsScope::~ThreadsScope() { t_current = previous_; }

const Threads* current_threads() { return t_current; }

size_t Threads::warmed_bytes() const { return crew_ != nullptr ? crew_->warmed_bytes() : 0; }

void warm_while_idle(const WarmRange* ranges, size_t count) {
  const Threads* threads = t_current;
  if (threads == nullptr || threads->crew_ == nullptr) return;
  threads->crew_->warm(ranges, count);
}

void parallel_for(size_t count, ParallelTask task, void* context) {
  const Threads* threads = t_current;
  if (threads == nullptr || threads->crew_ == nullptr) {
    for (size_t i = 0; i < count; ++i) task(context, i);
    return;
  }
  threads->crew_->run(count, task, context);
}

}  // namespace runtime
}  // namespace edgeshare
