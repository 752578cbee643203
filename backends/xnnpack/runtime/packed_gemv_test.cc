#include "edgeshare/backends/xnnpack/runtime/packed_gemv.h"

#include <gtest/gtest.h>
#include <xnnpack.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/packed_gemv_kernels.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

namespace edgeshare {
namespace xnnpack {
namespace {

std::vector<float> values(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = static_cast<float>(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  return v;
}

// XNNPACK packs [n, k] (and the bias, if any) into a region; its one-row run is the reference
// packed_gemv must equal bit for bit, reading the same packed bytes.
void expect_bitwise_xnnpack(internal::GemvKernel kernel, size_t k, size_t n, bool with_bias,
                            std::vector<float> x, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<float> w = values(n * k, static_cast<uint32_t>(k * 7919 + n));
  const std::vector<float> bias = values(n, static_cast<uint32_t>(n * 31));
  const float inf = std::numeric_limits<float>::infinity();
  PackedRegion region(packed_gemv_bytes(k, n) + 4096, /*expected_blocks=*/1);
  xnn_operator_t op = nullptr;
  const void* block = nullptr;
  size_t size = 0;
  {
    PackedRegionScope scope(&region);
    ASSERT_EQ(xnn_create_fully_connected_nc_f32(k, n, k, n, w.data(),
                                                with_bias ? bias.data() : nullptr, -inf, inf,
                                                /*flags=*/0, &op),
              xnn_status_success);
    block = scope.last_block();
    size = scope.last_size();
  }
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(size, packed_gemv_bytes(k, n));
  // One float past the end of y: the last partial tile must not write it.
  std::vector<float> want(n), got(n + 1, 42.0f);
  ASSERT_EQ(xnn_setup_fully_connected_nc_f32(op, 1, x.data(), want.data(), nullptr),
            xnn_status_success);
  ASSERT_EQ(xnn_run_operator(op, nullptr), xnn_status_success);
  kernel(static_cast<const float*>(block), k, n, x.data(), got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0);
  EXPECT_EQ(got[n], 42.0f);
  xnn_delete_operator(op);
}

// Each kernel this CPU can run, whichever packed_gemv picked.
struct Kernel {
  const char* name;
  internal::GemvKernel kernel;
  bool runs_here;
};

class PackedGemvTest : public ::testing::TestWithParam<Kernel> {
 protected:
  void SetUp() override {
    ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
    if (!GetParam().runs_here) GTEST_SKIP() << GetParam().name << ": not on this CPU";
  }
};

INSTANTIATE_TEST_SUITE_P(
    Kernels, PackedGemvTest,
    ::testing::Values(Kernel{"avx512", &internal::gemv_avx512,
                             static_cast<bool>(__builtin_cpu_supports("avx512f"))},
                      Kernel{"avx2", &internal::gemv_avx2,
                             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")}),
    [](const ::testing::TestParamInfo<Kernel>& info) { return std::string(info.param.name); });

TEST_P(PackedGemvTest, probe_accepts_it) {
  EXPECT_TRUE(internal::matches_xnnpack(GetParam().kernel));
}

// Whole groups of four tiles, the two and one tiles left over (32: a slab of two tiles), and a
// partial last tile in each; biases and none. Packings under 16 KiB stay with malloc, where the
// delegate never reads them itself (XNNPACK runs them), so they are not compared.
TEST_P(PackedGemvTest, equals_xnnpack_bit_for_bit_over_tile_counts_and_sizes) {
  for (size_t k : {64u, 131u, 300u, 1024u}) {
    for (size_t n : {7u, 16u, 20u, 32u, 40u, 64u, 65u, 80u, 90u, 127u, 200u, 1000u}) {
      if (packed_gemv_bytes(k, n) < (16u << 10)) continue;
      for (bool with_bias : {true, false}) {
        expect_bitwise_xnnpack(GetParam().kernel, k, n, with_bias,
                               values(k, static_cast<uint32_t>(k + n)),
                               "k=" + std::to_string(k) + " n=" + std::to_string(n) +
                                   (with_bias ? " bias" : " no bias"));
      }
    }
  }
}

// Infinities and NaNs come out as XNNPACK's clamp makes them.
TEST_P(PackedGemvTest, non_finite_inputs_equal_xnnpack) {
  std::vector<float> x = values(131, 5);
  x[3] = std::numeric_limits<float>::infinity();
  expect_bitwise_xnnpack(GetParam().kernel, 131, 70, true, x, "+inf input");
  x[3] = std::nanf("");
  expect_bitwise_xnnpack(GetParam().kernel, 131, 70, true, x, "NaN input");
}

// The public entry point: usable where a kernel runs, and then the picked kernel's results.
TEST(PackedGemvPickTest, usable_wherever_a_kernel_runs_and_equals_it) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  const internal::GemvKernel best = internal::best_kernel();
  EXPECT_EQ(packed_gemv_usable(), best != nullptr);
  if (best == nullptr) return;
  constexpr size_t k = 200, n = 90;
  const std::vector<float> w = values(n * k, 9), x = values(k, 10);
  PackedRegion region(packed_gemv_bytes(k, n) + 4096, /*expected_blocks=*/1);
  xnn_operator_t op = nullptr;
  const void* block = nullptr;
  {
    PackedRegionScope scope(&region);
    const float inf = std::numeric_limits<float>::infinity();
    ASSERT_EQ(xnn_create_fully_connected_nc_f32(k, n, k, n, w.data(), nullptr, -inf, inf, 0, &op),
              xnn_status_success);
    block = scope.last_block();
  }
  ASSERT_NE(block, nullptr);
  std::vector<float> want(n), got(n);
  best(static_cast<const float*>(block), k, n, x.data(), want.data());
  packed_gemv(block, k, n, x.data(), got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0);
  xnn_delete_operator(op);
}

// packed_gemm against XNNPACK's run of the same packed weight at `rows` rows, into an output wider
// than the weight's columns (a slab's place in a wider row), prefetching an unrelated buffer.
void expect_gemm_bitwise_xnnpack(size_t k, size_t n, size_t rows, std::vector<float> x,
                                 const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<float> w = values(n * k, static_cast<uint32_t>(k * 31 + n));
  const std::vector<float> bias = values(n, static_cast<uint32_t>(n * 7));
  const float inf = std::numeric_limits<float>::infinity();
  const size_t stride = n + 5;
  PackedRegion region(packed_gemv_bytes(k, n) + 4096, /*expected_blocks=*/1);
  xnn_operator_t op = nullptr;
  const void* block = nullptr;
  {
    PackedRegionScope scope(&region);
    ASSERT_EQ(xnn_create_fully_connected_nc_f32(k, n, k, stride, w.data(), bias.data(), -inf, inf,
                                                /*flags=*/0, &op),
              xnn_status_success);
    block = scope.last_block();
  }
  ASSERT_NE(block, nullptr);
  std::vector<float> want(rows * stride, 42.0f), got(rows * stride, 42.0f);
  const std::vector<float> other = values(64 << 10, 3);
  ASSERT_EQ(xnn_setup_fully_connected_nc_f32(op, rows, x.data(), want.data(), nullptr),
            xnn_status_success);
  ASSERT_EQ(xnn_run_operator(op, nullptr), xnn_status_success);
  packed_gemm(block, k, n, rows, x.data(), got.data(), stride, other.data(),
              other.size() * sizeof(float));
  // Every output bitwise, and the columns past n of each row untouched (42).
  EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0);
  xnn_delete_operator(op);
}

class PackedGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
    if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512: XNNPACK runs every row";
    ASSERT_TRUE(packed_gemm_usable());
  }
};

// Row counts around the 8-row blocks, tile counts around the 2-tile blocks, a partial last tile.
TEST_F(PackedGemmTest, equals_xnnpack_bit_for_bit_over_row_and_tile_counts) {
  for (size_t k : {64u, 131u, 1024u}) {
    for (size_t n : {64u, 65u, 80u, 200u}) {
      for (size_t rows : {2u, 3u, 7u, 8u, 9u, 16u, 31u, 32u, 33u}) {
        expect_gemm_bitwise_xnnpack(
            k, n, rows, values(rows * k, static_cast<uint32_t>(rows + k)),
            "k=" + std::to_string(k) + " n=" + std::to_string(n) + " rows=" + std::to_string(rows));
      }
    }
  }
}

TEST_F(PackedGemmTest, non_finite_inputs_equal_xnnpack) {
  std::vector<float> x = values(11 * 131, 5);
  x[3] = std::numeric_limits<float>::infinity();
  x[131 * 9 + 4] = std::nanf("");
  expect_gemm_bitwise_xnnpack(131, 70, 11, x, "+inf in row 0, NaN in row 9");
}

TEST(PackedGemvBytesTest, counts_whole_tiles_with_a_bias_row) {
  EXPECT_EQ(packed_gemv_bytes(1024, 64), 64u * 1025u * 4u);
  EXPECT_EQ(packed_gemv_bytes(10, 17), 32u * 11u * 4u);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
