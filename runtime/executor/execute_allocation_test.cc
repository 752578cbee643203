// Method::execute() allocates nothing: every buffer, operator and argument list is made at load.
// This binary replaces the global operator new to count C++ allocations while execute() runs
// (XNNPACK's own C code is covered by its setup/run contract, not by this counter).

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) std::abort();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace edgeshare {
namespace runtime {
namespace {

TEST(ExecuteAllocationTest, ExecuteMakesNoAllocation) {
  auto foundation = DataFile::open(std::getenv("FOUNDATION_PTD"));
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  auto loader = MmapDataLoader::from(std::getenv("LORA_A_PTE"));
  ASSERT_TRUE(loader.ok());
  auto program = Program::load(&*loader);
  ASSERT_TRUE(program.ok());
  // Loading allocates (and so shows that the counter counts).
  g_counting = true;
  auto method = program->load_method("forward", &(*foundation)->map());
  g_counting = false;
  ASSERT_TRUE(method.ok()) << method.status().message();
  EXPECT_GT(g_allocations.load(), 0u);
  ASSERT_TRUE(method->execute().ok());  // warm-up, as a serving loop would

  g_allocations = 0;
  g_counting = true;
  Status status = method->execute();
  g_counting = false;
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(g_allocations.load(), 0u);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
