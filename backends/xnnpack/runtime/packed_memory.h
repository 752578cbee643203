// Packed memory: where the weights cache's packed slabs live, and how a run pulls a slab into cache.
//
// XNNPACK packs a fully connected operator's weights into memory it asks its allocator for. The
// delegate installs an allocator (install_xnnpack_allocator, called before any operator is made)
// that, while a PackedRegionScope is alive on the calling thread, places XNNPACK's large aligned
// allocations (packed weights) in that scope's PackedRegion: one mapping per cache entry, 2 MiB
// aligned and advised for transparent huge pages, so the slabs of one weight sit in a few huge pages
// instead of thousands of 4 KiB ones. Everything else goes to malloc as before. The region records
// each slab's block, so a run can read a slab into cache (touch) before XNNPACK's kernel uses it.
//
//   PackedRegion region(expected_bytes, expected_blocks);
//   {
//     PackedRegionScope scope(&region);           // on the thread that creates the operator
//     xnn_create_fully_connected_nc_f32(..., &op);
//     block = scope.last_block(); size = scope.last_size();
//   }
//   touch(block, size);                           // before a run over many rows
//
// Measured (reference model's 12 weights as 256 KiB slabs, T=32, 1 thread, CPU time, a busy 2-core
// machine): huge pages 0.95x of 4 KiB pages; touching each slab first 0.93x on top (the kernel's
// own first pass over a cold slab streams at about half the bandwidth of a plain read); at T=1 a
// touch costs 2x (one pass either way), so runs touch only from kTouchMinRows rows on.
//
// Errors: none reported. A region that cannot be mapped, or is full, leaves allocations to malloc
// (no huge pages, no recorded block: nothing is touched); a default allocator installed by
// whoever initialised XNNPACK first has the same effect.
// Thread-safety: a region may be allocated from by several threads at once (slabs pack on the
// pool); a scope belongs to its thread. The allocator functions are thread-safe.
// Ownership: a region owns its mapping and unmaps it on destruction; blocks in it are freed with it
// (XNNPACK's deallocation of them does nothing), so delete the operators first.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_MEMORY_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_MEMORY_H_

#include <xnnpack.h>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace edgeshare {
namespace xnnpack {

// Rows from which a run touches a slab before XNNPACK's kernel runs over it: more than one row
// tile of the x86 f32 kernels (7 rows), so the kernel reads the slab several times from cache.
constexpr size_t kTouchMinRows = 8;

class PackedRegion {
 public:
  // Room for `capacity` bytes in `expected_blocks` blocks (mapped on the first allocation; a block
  // past the capacity goes to malloc). Once that many blocks are placed, the unused tail of the
  // mapping is given back, so an over-estimate costs no memory.
  PackedRegion(size_t capacity, size_t expected_blocks);
  ~PackedRegion();
  PackedRegion(const PackedRegion&) = delete;
  PackedRegion& operator=(const PackedRegion&) = delete;

  // `size` bytes aligned to `alignment` (a power of 2), or null when the region is full or cannot
  // be mapped.
  void* allocate(size_t size, size_t alignment);

 private:
  void map_locked();
  void trim_locked();

  std::mutex mutex_;
  const size_t capacity_;
  const size_t expected_blocks_;
  char* base_ = nullptr;    // 2 MiB aligned
  size_t mapped_ = 0;       // bytes mapped from base_
  size_t used_ = 0;
  size_t blocks_ = 0;
  bool map_failed_ = false;
};

// Routes this thread's large aligned XNNPACK allocations to `region` while alive; remembers the
// last such block.
class PackedRegionScope {
 public:
  explicit PackedRegionScope(PackedRegion* region);
  ~PackedRegionScope();
  PackedRegionScope(const PackedRegionScope&) = delete;
  PackedRegionScope& operator=(const PackedRegionScope&) = delete;

  // The last block placed in the region on this thread while the scope was alive (null if none).
  const void* last_block() const { return last_block_; }
  size_t last_size() const { return last_size_; }

 private:
  friend struct PackedAllocator;
  PackedRegion* region_;
  PackedRegionScope* previous_;
  const void* last_block_ = nullptr;
  size_t last_size_ = 0;
};

// xnn_initialize with the packed-memory allocator (the first allocator XNNPACK is given wins).
xnn_status initialize_xnnpack();

// Reads [data, data + size) into this core's caches (data 64-byte aligned). Does nothing for null.
void touch(const void* data, size_t size);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_MEMORY_H_
