#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

uint32_t step(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

std::vector<float> floats(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  for (float& f : v) f = static_cast<float>(step(&seed)) / 16777216.0f * 2.0f - 1.0f;
  return v;
}

// Finite halves of magnitude below 2^(max_exponent - 15), both signs, subnormals included.
std::vector<uint16_t> halves(size_t count, uint32_t seed, uint32_t max_exponent) {
  std::vector<uint16_t> v(count);
  for (uint16_t& h : v) {
    h = static_cast<uint16_t>(step(&seed) % (max_exponent << 10)) |
        static_cast<uint16_t>((step(&seed) & 1u) << 15);
  }
  return v;
}

// A half's value from its fields, in double: independent of the kernels' widening.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa != 0 ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// A weight [n, k] with its bias, packed.
struct Weight {
  Weight(size_t k_in, size_t n_in, bool with_bias, uint32_t seed)
      : k(k_in), n(n_in), w(halves(n * k, seed, 17)), bias(halves(n, seed + 1, 16)) {
    packed.resize(f16w_packed_bytes(k, n));
    f16w_pack(w.data(), with_bias ? bias.data() : nullptr, k, n, packed.data());
    if (!with_bias) bias.assign(n, 0);
  }
  size_t k, n;
  std::vector<uint16_t> w, bias;
  std::vector<uint8_t> packed;
};

// What the kernels define: the bias, then one fused multiply-add per input in input order, from
// the row-major weight (not the packing).
std::vector<float> plain(const Weight& weight, const std::vector<float>& x, size_t rows,
                         size_t x_stride) {
  std::vector<float> y(rows * weight.n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < weight.n; ++j) {
      float acc = static_cast<float>(half_value(weight.bias[j]));
      for (size_t i = 0; i < weight.k; ++i) {
        acc = std::fma(static_cast<float>(half_value(weight.w[j * weight.k + i])),
                       x[r * x_stride + i], acc);
      }
      y[r * weight.n + j] = acc;
    }
  }
  return y;
}

bool same_bits(const float* a, const float* b, size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

TEST(F16WReference, scalar_reference_is_bias_then_one_fma_per_input_over_exact_halves) {
  for (bool with_bias : {true, false}) {
    const Weight weight(37, 21, with_bias, 3);
    constexpr size_t rows = 3, x_stride = 40;
    const std::vector<float> x = floats(rows * x_stride, 9);
    std::vector<float> y(rows * weight.n, 7.0f);
    f32_f16w_gemm_scalar(weight.packed.data(), weight.k, weight.n, rows, x.data(), x_stride,
                         y.data(), weight.n, nullptr, 0);
    EXPECT_TRUE(same_bits(y.data(), plain(weight, x, rows, x_stride).data(), y.size()))
        << "bias " << with_bias;
  }
}

TEST(F16WReference, packing_is_tiles_of_float_bias_then_input_major_halves) {
  const Weight weight(3, 18, /*with_bias=*/true, 5);
  ASSERT_EQ(weight.packed.size(), 2 * (16 * 4 + 3 * 16 * 2));
  // Channel 17 is lane 1 of the second tile; lanes past n are zero.
  const uint8_t* tile = weight.packed.data() + f16w_tile_bytes(3);
  float bias;
  std::memcpy(&bias, tile + 4, 4);
  EXPECT_EQ(bias, static_cast<float>(half_value(weight.bias[17])));
  uint16_t h;
  std::memcpy(&h, tile + 64 + (2 * 16 + 1) * 2, 2);
  EXPECT_EQ(h, weight.w[17 * 3 + 2]);
  std::memcpy(&h, tile + 64 + (2 * 16 + 2) * 2, 2);
  EXPECT_EQ(h, 0);
}

// Each path this CPU can run, forced by its instruction set.
class F16WTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_runs(GetParam())) GTEST_SKIP() << "this CPU does not run " << to_string(GetParam());
    ASSERT_EQ(f16w_kernel_sets().up_to(GetParam()).isa, GetParam());
    set_ = f16w_kernel_sets().up_to(GetParam()).kernels;
  }
  F16WKernels set_;
};

TEST_P(F16WTest, gemv_equals_the_reference_bitwise_at_every_tile_remainder) {
  for (size_t k : {1u, 2u, 3u, 64u, 131u}) {
    for (size_t n : {1u, 15u, 16u, 17u, 33u, 53u, 64u, 85u, 130u}) {
      const Weight weight(k, n, /*with_bias=*/n % 2 == 1, static_cast<uint32_t>(k * 1000 + n));
      const std::vector<float> x = floats(k, static_cast<uint32_t>(n));
      std::vector<float> want(n + 8, -3.0f), got(n + 8, -3.0f);
      f32_f16w_gemv_scalar(weight.packed.data(), k, n, x.data(), want.data());
      set_.gemv(weight.packed.data(), k, n, x.data(), got.data());
      // Nothing past n is written.
      EXPECT_TRUE(same_bits(want.data(), got.data(), n + 8)) << "k " << k << " n " << n;
    }
  }
}

TEST_P(F16WTest, gemm_equals_the_reference_bitwise_over_row_and_tile_blocks) {
  for (size_t k : {1u, 3u, 131u}) {
    for (size_t n : {1u, 16u, 17u, 53u, 85u}) {
      const Weight weight(k, n, /*with_bias=*/true, static_cast<uint32_t>(k + n));
      for (size_t rows : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 17u, 32u}) {
        // Strides past the row lengths: the gaps stay untouched.
        const size_t x_stride = k + 5, y_stride = n + 3;
        const std::vector<float> x = floats(rows * x_stride, static_cast<uint32_t>(rows));
        std::vector<float> want(rows * y_stride, -3.0f), got(rows * y_stride, -3.0f);
        f32_f16w_gemm_scalar(weight.packed.data(), k, n, rows, x.data(), x_stride, want.data(),
                             y_stride, nullptr, 0);
        // The prefetch names other memory: it must change nothing.
        set_.gemm(weight.packed.data(), k, n, rows, x.data(), x_stride, got.data(), y_stride,
                  weight.packed.data(), weight.packed.size());
        EXPECT_TRUE(same_bits(want.data(), got.data(), want.size()))
            << "k " << k << " n " << n << " rows " << rows;
      }
    }
  }
}

// Every half: with k = 1, x = 1 and a -0 bias each output is its weight widened (a NaN quiet).
TEST_P(F16WTest, every_half_widens_exactly) {
  constexpr size_t n = 65536;
  std::vector<uint16_t> w(n), bias(n, 0x8000);
  for (size_t j = 0; j < n; ++j) w[j] = static_cast<uint16_t>(j);
  std::vector<uint8_t> packed(f16w_packed_bytes(1, n));
  f16w_pack(w.data(), bias.data(), 1, n, packed.data());
  const float one = 1.0f;
  std::vector<float> gemv(n), gemm(2 * n);
  const float x[2] = {1.0f, 1.0f};
  set_.gemv(packed.data(), 1, n, &one, gemv.data());
  set_.gemm(packed.data(), 1, n, 2, x, 1, gemm.data(), n, nullptr, 0);
  for (size_t j = 0; j < n; ++j) {
    const double want = half_value(static_cast<uint16_t>(j));
    for (float got : {gemv[j], gemm[j], gemm[n + j]}) {
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << "half 0x" << std::hex << j;
      } else {
        ASSERT_EQ(static_cast<double>(got), want) << "half 0x" << std::hex << j;
        ASSERT_EQ(std::signbit(got), (j & 0x8000) != 0) << "half 0x" << std::hex << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, F16WTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512f,
                                           Isa::kNeon),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(F16WConfig, process_set_is_the_widest_path_and_matches_the_reference) {
  const F16WKernels& set = f16w_kernel_sets().best();
  ASSERT_NE(set.gemv, nullptr);
  ASSERT_NE(set.gemm, nullptr);
  EXPECT_TRUE(f16w_matches_reference(set));
  EXPECT_EQ(f16w_kernel_sets().best_isa(), f16w_kernel_sets().up_to(runtime::kernels::isa_cap()).isa);
  EXPECT_FALSE(f16w_matches_reference(F16WKernels{}));
}

TEST(F16WConfig, broken_preconditions_are_errors_naming_them) {
  std::vector<uint8_t> packed(f16w_packed_bytes(8, 3));
  EXPECT_TRUE(check_f16w_kernel_args(8, 3, packed.data(), packed.size()).ok());
  const runtime::Status empty = check_f16w_kernel_args(0, 3, packed.data(), packed.size());
  EXPECT_NE(std::string(empty.message()).find("no inputs or outputs"), std::string::npos);
  const runtime::Status null = check_f16w_kernel_args(8, 3, nullptr, packed.size());
  EXPECT_NE(std::string(null.message()).find("no packing"), std::string::npos);
  const runtime::Status size = check_f16w_kernel_args(8, 3, packed.data(), packed.size() - 2);
  EXPECT_NE(std::string(size.message()).find("the kernels read"), std::string::npos);
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
