#include <gtest/gtest.h>
#include <xnnpack.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/f32_test_util.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// Where XNNPACK packs f32 for another tile (f32_test_util.h), the vector sets cannot read its
// packing: the probe refuses them and the tests against XNNPACK's runs have nothing to compare.
constexpr const char* kOtherLayout =
    "XNNPACK packs f32 for another tile on this CPU; the delegate leaves f32 to it";

// XNNPACK packs [n, k] (and the bias, if any) into a region; its one-row run is the reference
// the kernel must equal bit for bit, reading the same packed bytes.
void expect_bitwise_xnnpack(F32GemvFn kernel, size_t k, size_t n, bool with_bias,
                            std::vector<float> x, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<float> w = values(n * k, static_cast<uint32_t>(k * 7919 + n));
  const std::vector<float> bias = values(n, static_cast<uint32_t>(n * 31));
  XnnpackF32 xnnpack(w, with_bias ? bias.data() : nullptr, k, n, n);
  ASSERT_NE(xnnpack.block, nullptr);
  EXPECT_EQ(xnnpack.size, f32_packed_bytes(k, n));
  // One float past the end of y: the last partial tile must not write it.
  std::vector<float> want(n), got(n + 1, 42.0f);
  ASSERT_TRUE(xnnpack.run(1, x.data(), want.data()));
  kernel(xnnpack.block, k, n, x.data(), got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0);
  EXPECT_EQ(got[n], 42.0f);
}

// Each path this CPU can run, whichever f32_kernel_sets() picked, forced by its instruction set.
class F32GemvTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
#if !defined(__x86_64__)
    // kernels.h's f32 layout is what XNNPACK packs for its x86 kernels; elsewhere it packs for its
    // own tiles, and the delegate leaves f32 to XNNPACK (no set here but the scalar one).
    ASSERT_EQ(f32_kernel_sets().best_isa(), Isa::kScalar);
    GTEST_SKIP() << "XNNPACK's f32 packing on this CPU is not kernels.h's x86 layout";
#endif
    if (!cpu_runs(GetParam())) GTEST_SKIP() << to_string(GetParam()) << ": not on this CPU";
    ASSERT_EQ(f32_kernel_sets().up_to(GetParam()).isa, GetParam());
    kernel_ = f32_kernel_sets().up_to(GetParam()).kernels;
  }
  F32Kernels kernel_;
};

INSTANTIATE_TEST_SUITE_P(Paths, F32GemvTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512f),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST_P(F32GemvTest, probe_accepts_it) {
  if (!xnnpack_packs_kernels_f32_layout()) GTEST_SKIP() << kOtherLayout;
  EXPECT_TRUE(f32_gemv_matches_xnnpack(kernel_.gemv));
}

// Whole groups of four tiles, the two and one tiles left over (32: a slab of two tiles), and a
// partial last tile in each; biases and none. Packings under 16 KiB stay with malloc, where the
// delegate never reads them itself (XNNPACK runs them), so they are not compared.
TEST_P(F32GemvTest, equals_xnnpack_bit_for_bit_over_tile_counts_and_sizes) {
  if (!xnnpack_packs_kernels_f32_layout()) GTEST_SKIP() << kOtherLayout;
  for (size_t k : {64u, 131u, 300u, 1024u}) {
    for (size_t n : {7u, 16u, 20u, 32u, 40u, 64u, 65u, 80u, 90u, 127u, 200u, 1000u}) {
      if (f32_packed_bytes(k, n) < (16u << 10)) continue;
      for (bool with_bias : {true, false}) {
        expect_bitwise_xnnpack(kernel_.gemv, k, n, with_bias,
                               values(k, static_cast<uint32_t>(k + n)),
                               "k=" + std::to_string(k) + " n=" + std::to_string(n) +
                                   (with_bias ? " bias" : " no bias"));
      }
    }
  }
}

// Infinities and NaNs come out as XNNPACK's clamp makes them.
TEST_P(F32GemvTest, non_finite_inputs_equal_xnnpack) {
  if (!xnnpack_packs_kernels_f32_layout()) GTEST_SKIP() << kOtherLayout;
  std::vector<float> x = values(131, 5);
  x[3] = std::numeric_limits<float>::infinity();
  expect_bitwise_xnnpack(kernel_.gemv, 131, 70, true, x, "+inf input");
  x[3] = std::nanf("");
  expect_bitwise_xnnpack(kernel_.gemv, 131, 70, true, x, "NaN input");
}

// Every path against the scalar reference on the layout packed here (small sizes too, and a
// NaN and an infinity among the inputs).
TEST_P(F32GemvTest, equals_the_scalar_reference_bit_for_bit) {
  for (size_t k : {1u, 3u, 64u, 131u}) {
    for (size_t n : {1u, 15u, 16u, 17u, 33u, 64u, 65u, 100u}) {
      SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n));
      const std::vector<float> packed = pack_f32(values(n * k, static_cast<uint32_t>(k * n)),
                                                 values(n, static_cast<uint32_t>(n)), k, n);
      std::vector<float> x = values(k, static_cast<uint32_t>(k + 3 * n));
      if (k > 2) {
        x[1] = std::numeric_limits<float>::infinity();
        x[2] = n % 2 == 0 ? std::nanf("") : -1.0f;
      }
      std::vector<float> want(n + 1, 42.0f), got(n + 1, 42.0f);
      f32_gemv_scalar(packed.data(), k, n, x.data(), want.data());
      kernel_.gemv(packed.data(), k, n, x.data(), got.data());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0);
    }
  }
}

// The process's set: a one-row kernel wherever one runs here, and then the widest one's results.
TEST(F32KernelsTest, gemv_chosen_wherever_a_vector_kernel_runs_and_equals_it) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  const KernelSets<F32Kernels>::Candidate& best = f32_kernel_sets().up_to(runtime::kernels::isa_cap());
  if (!xnnpack_packs_kernels_f32_layout()) {
    EXPECT_EQ(f32_kernel_sets().best_isa(), Isa::kScalar);
    return;
  }
  EXPECT_EQ(f32_kernel_sets().best_isa(), best.isa);
  if (f32_kernel_sets().best_isa() == Isa::kScalar) return;
  constexpr size_t k = 200, n = 90;
  const std::vector<float> w = values(n * k, 9), x = values(k, 10);
  XnnpackF32 xnnpack(w, nullptr, k, n, n);
  ASSERT_NE(xnnpack.block, nullptr);
  std::vector<float> want(n), got(n);
  best.kernels.gemv(xnnpack.block, k, n, x.data(), want.data());
  f32_kernel_sets().best().gemv(xnnpack.block, k, n, x.data(), got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0);
}

TEST(F32KernelsTest, packed_bytes_count_whole_tiles_with_a_bias_row) {
  EXPECT_EQ(f32_packed_bytes(1024, 64), 64u * 1025u * 4u);
  EXPECT_EQ(f32_packed_bytes(10, 17), 32u * 11u * 4u);
}

TEST(F32KernelsTest, broken_preconditions_are_errors_naming_them) {
  const std::vector<float> packed(f32_packed_bytes(8, 16) / sizeof(float));
  EXPECT_TRUE(check_f32_kernel_args(8, 16, packed.data(), f32_packed_bytes(8, 16)).ok());
  const runtime::Status empty = check_f32_kernel_args(0, 16, packed.data(), 0);
  EXPECT_EQ(empty.code(), runtime::Error::InvalidArgument);
  EXPECT_NE(std::string(empty.message()).find("no inputs or outputs"), std::string::npos);
  const runtime::Status unplaced = check_f32_kernel_args(8, 16, nullptr, f32_packed_bytes(8, 16));
  EXPECT_NE(std::string(unplaced.message()).find("not in memory"), std::string::npos);
  const runtime::Status size = check_f32_kernel_args(8, 16, packed.data(), 100);
  EXPECT_NE(std::string(size.message()).find("is 100 bytes"), std::string::npos);
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
