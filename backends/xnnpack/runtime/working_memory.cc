#include "edgeshare/backends/xnnpack/runtime/working_memory.h"

#include <utility>

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Status;

WorkingMemory& WorkingMemory::shared() {
  static WorkingMemory* memory = new WorkingMemory();
  return *memory;
}

Status WorkingMemory::reserve(size_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  released_.wait(lock, [this] { return !growing_; });  // Another reservation growing it.
  if (bytes <= bytes_) return Status();
  // No lease starts from here on (they come back empty); the one running, if any, ends before
  // the block is swapped. Mapped outside the lock: fresh pages, not written.
  growing_ = true;
  lock.unlock();
  runtime::Result<runtime::ZeroedMemory> grown = runtime::ZeroedMemory::allocate(bytes);
  lock.lock();
  released_.wait(lock, [this] { return !leased_; });
  if (grown.ok()) {
    block_ = std::move(*grown);
    bytes_ = bytes;
  }
  growing_ = false;
  released_.notify_all();
  ES_CHECK_OR_RETURN_ERROR(grown.ok(), Error::MemoryAllocationFailed,
                           "XNNPACK working memory: cannot allocate %zu bytes of intermediates",
                           bytes);
  return Status();
}

WorkingMemory::Lease::Lease(WorkingMemory* memory, size_t bytes) : memory_(memory) {
  if (bytes == 0) return;  // Nothing to lease: the block stays free for others.
  std::lock_guard<std::mutex> lock(memory_->mutex_);
  if (memory_->leased_ || memory_->growing_ || bytes > memory_->bytes_) {
    ++memory_->busy_;
    return;
  }
  memory_->leased_ = true;
  ++memory_->leases_;
  block_ = memory_->block_.data();
}

WorkingMemory::Lease::~Lease() {
  if (block_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(memory_->mutex_);
    memory_->leased_ = false;
  }
  memory_->released_.notify_all();
}

WorkingMemoryStats WorkingMemory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  WorkingMemoryStats stats;
  stats.block_bytes = bytes_;
  stats.leases = leases_;
  stats.busy = busy_;
  return stats;
}

}  // namespace xnnpack
}  // namespace edgeshare
