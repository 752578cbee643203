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

// The GEMM against XNNPACK's run of the same packed weight at `rows` rows, into an output wider
// than the weight's columns (a slab's place in a wider row), prefetching an unrelated buffer.
void expect_gemm_bitwise_xnnpack(F32GemmFn gemm, size_t k, size_t n, size_t rows,
                                 std::vector<float> x, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<float> w = values(n * k, static_cast<uint32_t>(k * 31 + n));
  const std::vector<float> bias = values(n, static_cast<uint32_t>(n * 7));
  const size_t stride = n + 5;
  XnnpackF32 xnnpack(w, bias.data(), k, n, stride);
  ASSERT_NE(xnnpack.block, nullptr);
  std::vector<float> want(rows * stride, 42.0f), got(rows * stride, 42.0f);
  const std::vector<float> other = values(64 << 10, 3);
  ASSERT_TRUE(xnnpack.run(rows, x.data(), want.data()));
  gemm(xnnpack.block, k, n, rows, x.data(), k, got.data(), stride, other.data(),
       other.size() * sizeof(float));
  // Every output bitwise, and the columns past n of each row untouched (42).
  EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0);
}

// Each GEMM path this CPU can run (the scalar reference included), forced by its instruction set.
class F32GemmTest : public ::testing::TestWithParam<Isa> {
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

INSTANTIATE_TEST_SUITE_P(Paths, F32GemmTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512f),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST_P(F32GemmTest, probe_accepts_it) {
  if (!xnnpack_packs_kernels_f32_layout()) GTEST_SKIP() << kOtherLayout;
  EXPECT_TRUE(f32_gemm_matches_xnnpack(kernel_.gemm));
}

// Row counts around the 6- and 8-row blocks, tile counts around the 2-tile blocks, a partial last
// tile.
TEST_P(F32GemmTest, equals_xnnpack_bit_for_bit_over_row_and_tile_counts) {
  if (!xnnpack_packs_kernels_f32_layout()) GTEST_SKIP() << kOtherLayout;
  for (size_t k : {64u, 131u, 1024u}) {
    for (size_t n : {64u, 65u, 80u, 200u}) {
      for (size_t rows : {2u, 3u, 5u, 6u, 7u, 8u, 9u, 12u, 13u, 16u, 31u, 32u, 33u}) {
        expect_gemm_bitwise_xnnpack(
            kernel_.gemm, k, n, rows, values(rows * k, static_cast<uint32_t>(rows + k)),
            "k=" + std::to_string(k) + " n=" + std::to_string(n) + " rows=" + std::to_string(rows));
      }
    }
  }
}

TEST_P(F32GemmTest, non_finite_inputs_equal_xnnpack) {
  if (!xnnpack_packs_kernels_f32_layout()) GTEST_SKIP() << kOtherLayout;
  std::vector<float> x = values(11 * 131, 5);
  x[3] = std::numeric_limits<float>::infinity();
  x[131 * 9 + 4] = std::nanf("");
  expect_gemm_bitwise_xnnpack(kernel_.gemm, 131, 70, 11, x, "+inf in row 0, NaN in row 9");
}

// Against the scalar reference on the layout packed here, with input rows further apart than k.
TEST_P(F32GemmTest, equals_the_scalar_reference_bit_for_bit) {
  for (size_t k : {1u, 5u, 64u, 131u}) {
    for (size_t n : {1u, 16u, 17u, 33u, 65u}) {
      for (size_t rows : {1u, 6u, 7u, 9u, 17u}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n) +
                     " rows=" + std::to_string(rows));
        const std::vector<float> packed = pack_f32(values(n * k, static_cast<uint32_t>(k * n)),
                                                   values(n, static_cast<uint32_t>(n)), k, n);
        const size_t x_stride = k + 3, y_stride = n + 2;
        const std::vector<float> x = values(rows * x_stride, static_cast<uint32_t>(rows + k));
        std::vector<float> want(rows * y_stride, 42.0f), got(rows * y_stride, 42.0f);
        f32_gemm_scalar(packed.data(), k, n, rows, x.data(), x_stride, want.data(), y_stride,
                        nullptr, 0);
        kernel_.gemm(packed.data(), k, n, rows, x.data(), x_stride, got.data(), y_stride,
                     packed.data(), packed.size() * sizeof(float));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

// The process's set: the widest GEMM this CPU runs, kept by the probe.
TEST(F32KernelsTest, gemm_chosen_wherever_a_vector_kernel_runs) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  const KernelSets<F32Kernels>::Candidate& best = f32_kernel_sets().up_to(runtime::kernels::isa_cap());
  if (!xnnpack_packs_kernels_f32_layout()) {
    EXPECT_EQ(f32_kernel_sets().best_isa(), Isa::kScalar);
    return;
  }
  EXPECT_EQ(f32_kernel_sets().best_isa(), best.isa);
  EXPECT_EQ(f32_kernel_sets().best().gemm, best.kernels.gemm);
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
