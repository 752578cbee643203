// WorkingMemory: one block of intermediates shared by every XnnExecutor of the process, leased for
// the length of an execute().
//
// A compiled graph's arena (intermediates and operator scratch) holds nothing from one execute to
// the next, so the executors of one method, of every method and of every program need only one
// arena between them while they run one after the other: each reserves its arena's size at
// create, the block grows to the largest, and execute() leases it. An execute that finds the block
// leased (another thread is running) runs in its executor's own arena instead, which was made
// at create and is never touched otherwise (ZeroedMemory: it costs address space, not memory).
//
//   WorkingMemory& memory = WorkingMemory::shared();
//   ES_RETURN_IF_ERROR(memory.reserve(arena_bytes));      // at create; may allocate
//   WorkingMemory::Lease lease(&memory, arena_bytes);     // at execute; never allocates
//   float* base = lease.block() != nullptr ? static_cast<float*>(lease.block()) : own_arena;
//
// Errors: reserve() returns MemoryAllocationFailed when the larger block cannot be allocated (the
// block is as before). A lease never fails: it may come back empty.
// Thread-safety: every member is thread-safe. reserve() waits for a lease in progress to end;
// while it waits or grows the block, leases come back empty rather than wait.
// Ownership: the block belongs to the WorkingMemory; a lease's block is valid until the lease is
// destroyed. shared() lives as long as the process and never shrinks its block: the pages runs
// touched stay with the process after the executors are gone.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WORKING_MEMORY_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WORKING_MEMORY_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/zeroed_memory.h"

namespace edgeshare {
namespace xnnpack {

struct WorkingMemoryStats {
  size_t block_bytes = 0;  // The shared block's size: the largest reservation.
  size_t leases = 0;       // Executes that ran in the shared block.
  size_t busy = 0;         // Executes that found it leased or growing and ran in their own arena.
};

class WorkingMemory {
 public:
  // The process's block, used by every XnnExecutor.
  static WorkingMemory& shared();

  WorkingMemory() = default;
  WorkingMemory(const WorkingMemory&) = delete;
  WorkingMemory& operator=(const WorkingMemory&) = delete;

  // Makes the block at least `bytes` long (zeroed when it grows). Errors: MemoryAllocationFailed.
  runtime::Status reserve(size_t bytes);

  // The block for one execute over `bytes`, or empty when another lease holds it, it is growing,
  // or it is smaller (a reservation that failed).
  class Lease {
   public:
    Lease(WorkingMemory* memory, size_t bytes);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    void* block() const { return block_; }

   private:
    WorkingMemory* memory_;
    void* block_ = nullptr;
  };

  WorkingMemoryStats stats() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable released_;
  runtime::ZeroedMemory block_;
  size_t bytes_ = 0;
  bool leased_ = false;
  bool growing_ = false;
  size_t leases_ = 0;
  size_t busy_ = 0;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_WORKING_MEMORY_H_
