#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ES_TOUCH_AVX512 1
#endif

namespace edgeshare {
namespace xnnpack {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
// Smaller aligned allocations (operator structs, small weights) stay with malloc.
constexpr size_t kLargeBytes = 16 << 10;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Live mappings, so that XNNPACK's deallocation of a block inside one is told apart from a malloc
// block. Looked up only when XNNPACK frees memory (operators deleted), never during a run.
struct Mappings {
  std::mutex mutex;
  std::vector<std::pair<const char*, const char*>> ranges;

  bool contains(const void* p) {
    const char* c = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& r : ranges) {
      if (c >= r.first && c < r.second) return true;
    }
    return false;
  }
  void add(const char* begin, const char* end) {
    std::lock_guard<std::mutex> lock(mutex);
    ranges.emplace_back(begin, end);
  }
  void resize(const char* begin, const char* end) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& r : ranges) {
      if (r.first == begin) r.second = end;
    }
  }
  void remove(const char* begin) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = ranges.begin(); it != ranges.end(); ++it) {
      if (it->first == begin) {
        ranges.erase(it);
        return;
      }
    }
  }
};

Mappings& mappings() {
  static Mappings* m = new Mappings();  // Leaked: regions may outlive static destruction order.
  return *m;
}

thread_local PackedRegionScope* t_scope = nullptr;

}  // namespace

// XNNPACK's allocator: large aligned blocks made inside a scope go to its region.
struct PackedAllocator {
  static void* allocate(void*, size_t size) { return std::malloc(size); }
  static void* reallocate(void*, void* pointer, size_t size) {
    return std::realloc(pointer, size);
  }
  static void deallocate(void*, void* pointer) { std::free(pointer); }
  static void* aligned_allocate(void*, size_t alignment, size_t size) {
    PackedRegionScope* scope = t_scope;
    if (scope != nullptr && size >= kLargeBytes) {
      if (void* block = scope->region_->allocate(size, alignment)) {
        scope->last_block_ = block;
        scope->last_size_ = size;
        return block;
      }
    }
    void* p = nullptr;
    return posix_memalign(&p, std::max(alignment, sizeof(void*)), size) == 0 ? p : nullptr;
  }
  static void aligned_deallocate(void*, void* pointer) {
    if (pointer == nullptr || mappings().contains(pointer)) return;  // freed with its region
    std::free(pointer);
  }
};

PackedRegion::PackedRegion(size_t capacity, size_t expected_blocks)
    : capacity_(round_up(capacity, kPage)), expected_blocks_(expected_blocks) {}

PackedRegion::~PackedRegion() {
  if (base_ == nullptr) return;
  mappings().remove(base_);
  if (mapped_ > 0) munmap(base_, mapped_);
}

void PackedRegion::map_locked() {
  // Over-reserve by a huge page to align the start, then give back the unaligned head and tail.
  const size_t reserve = capacity_ + kHugePage;
  void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    map_failed_ = true;
    return;
  }
  char* raw = static_cast<char*>(p);
  char* aligned = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(raw), kHugePage));
  if (aligned > raw) munmap(raw, aligned - raw);
  const size_t tail = (raw + reserve) - (aligned + capacity_);
  if (tail > 0) munmap(aligned + capacity_, tail);
  // Only advice: where the kernel has no huge page at hand it maps 4 KiB pages, as malloc would.
  madvise(aligned, capacity_, MADV_HUGEPAGE);
  base_ = aligned;
  mapped_ = capacity_;
  mappings().add(base_, base_ + mapped_);
}

// The blocks are all placed: the rest of the mapping is never used, give it back (pages touched
// there, e.g. the end of a huge page, leave RSS with it).
void PackedRegion::trim_locked() {
  const size_t keep = round_up(used_, kPage);
  if (keep >= mapped_) return;
  munmap(base_ + keep, mapped_ - keep);
  mapped_ = keep;
  mappings().resize(base_, base_ + mapped_);
}

void* PackedRegion::allocate(size_t size, size_t alignment) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (base_ == nullptr && !map_failed_) map_locked();
  if (base_ == nullptr || blocks_ >= expected_blocks_) return nullptr;
  // Each block starts on a cache line (or its own alignment, if larger).
  const size_t start = round_up(used_, std::max<size_t>(alignment, 64));
  if (start + size > mapped_) return nullptr;
  used_ = start + size;
  if (++blocks_ == expected_blocks_) trim_locked();
  return base_ + start;
}

PackedRegionScope::PackedRegionScope(PackedRegion* region) : region_(region), previous_(t_scope) {
  t_scope = this;
}

PackedRegionScope::~PackedRegionScope() { t_scope = previous_; }

xnn_status initialize_xnnpack() {
  static const xnn_allocator allocator = {
      /*context=*/nullptr,
      &PackedAllocator::allocate,
      &PackedAllocator::reallocate,
      &PackedAllocator::deallocate,
      &PackedAllocator::aligned_allocate,
      &PackedAllocator::aligned_deallocate,
  };
  return xnn_initialize(&allocator);
}

#ifdef ES_TOUCH_AVX512
namespace {

// Full-line 64-byte loads: measured faster than one narrower load or a prefetch per line (0.93x
// vs 0.98x of no touch at T=32, huge pages, reference weights), hence this one AVX-512 loop.
__attribute__((target("avx512f"))) void touch_avx512(const char* p, size_t size) {
  __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 128 <= size; i += 128) {
    a = _mm512_add_ps(a, _mm512_load_ps(reinterpret_cast<const float*>(p + i)));
    b = _mm512_add_ps(b, _mm512_load_ps(reinterpret_cast<const float*>(p + i + 64)));
  }
  for (; i < size; i += 64) __builtin_prefetch(p + i, 0, 3);
  // Keeps the loads: the sum is consumed by an empty asm statement.
  __asm__ volatile("" : : "v"(_mm512_add_ps(a, b)));
}

const bool kHasAvx512 = __builtin_cpu_supports("avx512f");

}  // namespace
#endif

void touch(const void* data, size_t size) {
  if (data == nullptr) return;
  const char* p = static_cast<const char*>(data);
#ifdef ES_TOUCH_AVX512
  if (kHasAvx512) {
    touch_avx512(p, size);
    return;
  }
#endif
  for (size_t i = 0; i < size; i += 64) __builtin_prefetch(p + i, 0, 3);
}

}  // namespace xnnpack
}  // namespace edgeshare
