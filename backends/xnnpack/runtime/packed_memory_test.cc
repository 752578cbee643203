#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

#include <gtest/gtest.h>
#include <xnnpack.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace edgeshare {
namespace xnnpack {
namespace {

TEST(PackedMemoryTest, RegionBlocksAreAlignedDisjointAndBoundedByCapacity) {
  PackedRegion region(/*capacity=*/64 << 10, /*expected_blocks=*/3);
  char* a = static_cast<char*>(region.allocate(1000, 16));
  char* b = static_cast<char*>(region.allocate(1000, 128));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (size_t{2} << 20), 0u);  // huge-page aligned start
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 128, 0u);
  EXPECT_GE(b, a + 1000);
  EXPECT_EQ(region.allocate(100 << 10, 64), nullptr);  // past the capacity: left to malloc
  a[0] = 1;
  b[999] = 2;  // writable
}

TEST(PackedMemoryTest, NoBlockPastTheExpectedCount) {
  PackedRegion region(/*capacity=*/64 << 10, /*expected_blocks=*/1);
  char* a = static_cast<char*>(region.allocate(4096, 64));
  ASSERT_NE(a, nullptr);
  a[4095] = 1;  // still mapped after the tail was given back
  EXPECT_EQ(region.allocate(64, 64), nullptr);
}

// A fully connected operator made inside a scope packs into the region, computes what it computes
// with malloc'd weights, and is deleted before the region without freeing the block itself.
TEST(PackedMemoryTest, OperatorPacksIntoTheScopesRegionAndRuns) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  constexpr size_t kIn = 256, kOut = 64, kBatch = 9;
  std::vector<float> w(kIn * kOut), x(kBatch * kIn + 16), y(kBatch * kOut), want(kBatch * kOut);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (size_t i = 0; i < kBatch * kIn; ++i) x[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  for (size_t r = 0; r < kBatch; ++r) {
    for (size_t o = 0; o < kOut; ++o) {
      float sum = 0.0f;
      for (size_t k = 0; k < kIn; ++k) sum += x[r * kIn + k] * w[o * kIn + k];
      want[r * kOut + o] = sum;
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  PackedRegion region(/*capacity=*/kOut * (kIn + 1) * 4 + 4096, /*expected_blocks=*/1);
  xnn_operator_t op = nullptr;
  const void* block = nullptr;
  size_t block_size = 0;
  {
    PackedRegionScope scope(&region);
    ASSERT_EQ(xnn_create_fully_connected_nc_f32(kIn, kOut, kIn, kOut, w.data(), nullptr, -inf, inf,
                                                0, &op),
              xnn_status_success);
    block = scope.last_block();
    block_size = scope.last_size();
  }
  ASSERT_NE(block, nullptr);
  EXPECT_GE(block_size, kIn * kOut * sizeof(float));
  touch(block, block_size);
  ASSERT_EQ(xnn_setup_fully_connected_nc_f32(op, kBatch, x.data(), y.data(), nullptr),
            xnn_status_success);
  ASSERT_EQ(xnn_run_operator(op, nullptr), xnn_status_success);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-4f) << i;
  EXPECT_EQ(xnn_delete_operator(op), xnn_status_success);
}

TEST(PackedMemoryTest, OutsideAScopeNothingIsRecorded) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  std::vector<float> w(64 * 64, 0.5f);
  const float inf = std::numeric_limits<float>::infinity();
  xnn_operator_t op = nullptr;
  ASSERT_EQ(xnn_create_fully_connected_nc_f32(64, 64, 64, 64, w.data(), nullptr, -inf, inf, 0, &op),
            xnn_status_success);
  EXPECT_EQ(xnn_delete_operator(op), xnn_status_success);
  touch(nullptr, 100);  // nothing to read
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
