// The root-mean-square norm's sets: the scalar reference against the formula in double, and every
// set this CPU runs against the reference bit for bit.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

std::vector<float> floats(size_t count, uint32_t seed, float scale) {
  std::vector<float> v(count);
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = (static_cast<float>(seed >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
  }
  return v;
}

const size_t kChannels[] = {1, 3, 15, 16, 17, 31, 32, 33, 64, 100, 576, 1000, 2048};

TEST(RmsNorm, reference_is_the_formula) {
  for (size_t channels : kChannels) {
    SCOPED_TRACE(channels);
    const size_t rows = 5;
    const float eps = 1e-6f;
    const std::vector<float> x = floats(rows * channels, 7, 3.0f);
    const std::vector<float> w = floats(channels, 11, 2.0f);
    std::vector<float> y(rows * channels);
    f32_rmsnorm_scalar(rows, channels, x.data(), w.data(), eps, y.data());
    for (size_t r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (size_t c = 0; c < channels; ++c)
        sum += double{x[r * channels + c]} * x[r * channels + c];
      const double scale = 1.0 / std::sqrt(sum / channels + eps);
      for (size_t c = 0; c < channels; ++c) {
        const double want = w[c] * (x[r * channels + c] * scale);
        EXPECT_NEAR(y[r * channels + c], want, 1e-5 * (std::fabs(want) + 1e-3));
      }
    }
  }
}

TEST(RmsNorm, a_zero_row_gives_zeros_and_eps_keeps_it_finite) {
  const std::vector<float> x(32, 0.0f), w(32, 1.5f);
  std::vector<float> y(32, 7.0f);
  f32_rmsnorm_scalar(1, 32, x.data(), w.data(), 1e-5f, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(RmsNorm, every_set_gives_the_references_bits) {
  size_t count = 0;
  const auto* sets = rmsnorm_kernel_sets().all(&count);
  ASSERT_GE(count, 1u);
  for (size_t i = 0; i < count; ++i) {
    SCOPED_TRACE(static_cast<int>(sets[i].isa));
    EXPECT_TRUE(rmsnorm_matches_reference(sets[i].kernels));
    for (size_t channels : kChannels) {
      SCOPED_TRACE(channels);
      for (size_t rows : {1u, 2u, 8u}) {
        const std::vector<float> x = floats(rows * channels, 3 + rows, 50.0f);
        const std::vector<float> w = floats(channels, 5, 1.0f);
        std::vector<float> want(rows * channels), got(rows * channels, -1.0f);
        f32_rmsnorm_scalar(rows, channels, x.data(), w.data(), 1e-5f, want.data());
        sets[i].kernels.rows(rows, channels, x.data(), w.data(), 1e-5f, got.data());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

TEST(RmsNorm, the_process_runs_the_widest_set_within_the_cap) {
  EXPECT_EQ(rmsnorm_kernel_sets().best_isa(),
            rmsnorm_kernel_sets().up_to(runtime::kernels::isa_cap()).isa);
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
