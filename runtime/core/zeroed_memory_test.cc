// ZeroedMemory: zeros, writable, and resident only where written, even right after the allocator
// freed a large block (where calloc hands back reused heap memory and writes all of it).

#include "edgeshare/runtime/core/zeroed_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace edgeshare {
namespace runtime {
namespace {

constexpr size_t kBytes = 32u << 20;

size_t resident_pages(const ZeroedMemory& memory) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = (memory.size() + page - 1) / page;
  std::vector<unsigned char> in_core(pages);
  EXPECT_EQ(::mincore(memory.data(), pages * page, in_core.data()), 0);
  size_t resident = 0;
  for (unsigned char bit : in_core) resident += bit & 1;
  return resident;
}

TEST(ZeroedMemoryTest, is_zeros_and_only_written_pages_are_resident) {
  // A large block written and freed first: the allocator may keep it for the next large request.
  void* earlier = std::malloc(kBytes);
  ASSERT_NE(earlier, nullptr);
  std::memset(earlier, 0xAB, kBytes);
  std::free(earlier);

  Result<ZeroedMemory> memory = ZeroedMemory::allocate(kBytes);
  ASSERT_TRUE(memory.ok()) << memory.status().message();
  ASSERT_EQ(memory->size(), kBytes);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory->data()) % page, 0u);
  EXPECT_EQ(resident_pages(*memory), 0u);

  auto* bytes = static_cast<uint8_t*>(memory->data());
  bytes[3 * page + 5] = 7;
  EXPECT_EQ(resident_pages(*memory), 1u);
  size_t nonzero = 0;
  for (size_t i = 0; i < kBytes; i += 4093) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  EXPECT_EQ(bytes[3 * page + 5], 7);
  EXPECT_EQ(bytes[kBytes - 1], 0);
}

TEST(ZeroedMemoryTest, moves_ownership_and_zero_bytes_is_empty) {
  Result<ZeroedMemory> empty = ZeroedMemory::allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(empty->size(), 0u);

  Result<ZeroedMemory> memory = ZeroedMemory::allocate(100);
  ASSERT_TRUE(memory.ok());
  void* data = memory->data();
  static_cast<uint8_t*>(data)[99] = 1;
  ZeroedMemory moved = std::move(*memory);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.size(), 100u);
  EXPECT_EQ(memory->data(), nullptr);
  moved = std::move(*empty);
  EXPECT_EQ(moved.data(), nullptr);
}

TEST(ZeroedMemoryTest, an_impossible_size_is_an_error) {
  Result<ZeroedMemory> memory = ZeroedMemory::allocate(SIZE_MAX - 1);
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), Error::MemoryAllocationFailed);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
