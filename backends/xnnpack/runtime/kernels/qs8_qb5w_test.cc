#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

uint32_t step(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

// kernels.h's canonical bytes of signed 5-bit values [n, k]: per row and block of 32, the low
// nibbles of u = w + 16 two to a byte, then u's fifth bits as a little-endian 32-bit word.
std::vector<uint8_t> canonical(const std::vector<int8_t>& values, size_t k, size_t n) {
  std::vector<uint8_t> bytes(n * k * 5 / 8, 0);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) {
      const unsigned u = static_cast<unsigned>(values[j * k + i] + 16);
      uint8_t* block = bytes.data() + j * (k * 5 / 8) + i / 32 * 20;
      block[i % 32 / 2] |= static_cast<uint8_t>((u & 15) << (4 * (i % 2)));
      block[16 + i % 32 / 8] |= static_cast<uint8_t>((u >> 4) << (i % 8));
    }
  }
  return bytes;
}

// A 5-bit weight (values in [-16, 15]), its float16 block scales and bias, packed.
struct Weight {
  Weight(size_t k_in, size_t n_in, bool with_bias, uint32_t seed)
      : k(k_in), n(n_in), values(n * k), scales(n * (k / kActBlock)), bias(n, 0.0f) {
    for (int8_t& v : values) v = static_cast<int8_t>(static_cast<int>(step(&seed) % 32) - 16);
    // Finite positive halves between 2^-14 and 2, subnormal-free.
    for (uint16_t& s : scales) s = static_cast<uint16_t>(0x0400 + step(&seed) % 0x3C00);
    if (with_bias) {
      for (float& b : bias) b = static_cast<float>(step(&seed) % 2001) / 1000.0f - 1.0f;
    }
    pack(with_bias);
  }
  void pack(bool with_bias) {
    packed.assign(qb5_packed_bytes(k, n), 0xAB);
    const std::vector<uint8_t> bytes = canonical(values, k, n);
    qb5w_pack(bytes.data(), scales.data(), with_bias ? bias.data() : nullptr, k, n, packed.data());
  }
  size_t k, n;
  std::vector<int8_t> values;
  std::vector<uint16_t> scales;
  std::vector<float> bias;
  std::vector<uint8_t> packed;
};

// Rows of activations quantized by the scalar reference: q (k a row), each block's scale and sum.
struct Rows {
  Rows(size_t k, size_t rows, uint32_t seed)
      : x(rows * k), q(rows * k), scales(rows * k / kActBlock), sums(rows * k / kActBlock) {
    for (float& v : x) v = static_cast<float>(step(&seed) % 2001) / 100.0f - 10.0f;
    for (size_t r = 0; r < rows; ++r) x[r * k + (r * 37) % k] *= 30.0f;
    qs8_quantize_scalar(x.data(), k, rows, k, q.data(), k, scales.data(), sums.data());
  }
  std::vector<float> x;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// kernels.h's computation from the signed values, the packing aside.
std::vector<float> naive(const Weight& w, const Rows& x, size_t rows) {
  const size_t blocks = w.k / kActBlock;
  std::vector<float> y(rows * w.n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < w.n; ++j) {
      float acc = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        int32_t dot = 0;
        for (size_t i = b * kActBlock; i < (b + 1) * kActBlock; ++i) {
          dot += static_cast<int32_t>(x.q[r * w.k + i]) * w.values[j * w.k + i];
        }
        const float w_scale = runtime::kernels::half_to_float(w.scales[j * blocks + b]);
        acc = std::fma(static_cast<float>(dot), x.scales[r * blocks + b] * w_scale, acc);
      }
      y[r * w.n + j] = acc + w.bias[j];
    }
  }
  return y;
}

bool bitwise_equal(const float* a, const float* b, size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

// Each path this CPU can run, forced by its instruction set (the table's: AVX-VNNI and AVX-512 F
// run AVX2's).
class QB5Test : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_runs(GetParam())) GTEST_SKIP() << to_string(GetParam()) << ": not on this CPU";
    ASSERT_EQ(qb5_kernel_sets().up_to(GetParam()).isa, GetParam());
    set_ = qb5_kernel_sets().up_to(GetParam()).kernels;
  }
  QB5Kernels set_;
};

INSTANTIATE_TEST_SUITE_P(Paths, QB5Test,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni, Isa::kNeon,
                                           Isa::kNeonDot, Isa::kNeonI8mm),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(QB5W, scalar_reference_is_the_naive_computation_over_the_canonical_layout) {
  // An even and an odd number of blocks: the packing pairs blocks, the last pair with one.
  for (size_t k : {size_t{128}, size_t{160}}) {
    const Weight w(k, 37, /*with_bias=*/true, 11);
    const size_t rows = 5;
    const Rows x(w.k, rows, 3);
    std::vector<float> y(rows * w.n, 1.0f);
    qs8_qb5w_gemm_scalar(w.packed.data(), w.k, w.n, rows, x.q.data(), w.k, x.scales.data(),
                         x.sums.data(), y.data(), w.n);
    const std::vector<float> want = naive(w, x, rows);
    EXPECT_TRUE(bitwise_equal(y.data(), want.data(), y.size())) << "k " << k;
  }
}

TEST(QB5W, the_canonical_bytes_put_value_i_where_kernels_h_says) {
  // One nonzero value per row, at input i of row i % 32 ... checked through the reference: with
  // an activation of 1 at input i only, each output is its weight there times the scales.
  const size_t k = 64, n = 32;
  Weight w(k, n, /*with_bias=*/false, 1);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) w.values[j * k + i] = i == 2 * j + 1 ? -16 : (i == j ? 15 : 0);
  }
  w.scales.assign(n * 2, 0x3C00);  // 1.0
  w.pack(false);
  for (size_t i = 0; i < k; ++i) {
    std::vector<int8_t> q(k, 0);
    q[i] = 1;
    const std::vector<float> one(2, 1.0f);
    const std::vector<int32_t> sums{i < 32 ? 1 : 0, i < 32 ? 0 : 1};
    std::vector<float> y(n);
    qs8_qb5w_gemv_scalar(w.packed.data(), k, n, q.data(), one.data(), sums.data(), y.data());
    for (size_t j = 0; j < n; ++j) ASSERT_EQ(y[j], w.values[j * k + i]) << "i " << i << " j " << j;
  }
}

TEST_P(QB5Test, the_forced_set_passes_the_probe) { EXPECT_TRUE(qb5_matches_reference(set_)); }

TEST(QB5W, the_probe_refuses_a_set_that_differs_from_the_reference) {
  const QB5Kernels reference{&qs8_qb5w_gemv_scalar, &qs8_qb5w_gemm_scalar};
  ASSERT_TRUE(qb5_matches_reference(reference));
  QB5Kernels ulp = reference;  // a GEMV whose last output is one ulp off
  ulp.gemv = [](const void* packed, size_t k, size_t n, const int8_t* q, const float* x_scales,
                const int32_t* x_sums, float* y) {
    qs8_qb5w_gemv_scalar(packed, k, n, q, x_scales, x_sums, y);
    y[n - 1] = std::nextafter(y[n - 1], INFINITY);
  };
  EXPECT_FALSE(qb5_matches_reference(ulp));
  EXPECT_FALSE(qb5_matches_reference(QB5Kernels{}));
}

TEST_P(QB5Test, outputs_equal_the_scalar_reference_bit_for_bit) {
  // Partial last tiles, an even and an odd number of blocks, with and without bias, row counts
  // around every path's row blocks.
  for (size_t n : {1, 16, 33, 85}) {
    for (size_t k : {size_t{32}, size_t{96}, size_t{256}}) {
      for (bool with_bias : {true, false}) {
        const Weight w(k, n, with_bias, static_cast<uint32_t>(n * 7 + k));
        for (size_t rows : {1, 2, 3, 4, 5, 8, 9, 17}) {
          const Rows x(k, rows, static_cast<uint32_t>(rows + k));
          std::vector<float> want(rows * n), got(rows * n, -1.0f);
          qs8_qb5w_gemm_scalar(w.packed.data(), k, n, rows, x.q.data(), k, x.scales.data(),
                               x.sums.data(), want.data(), n);
          set_.gemm(w.packed.data(), k, n, rows, x.q.data(), k, x.scales.data(), x.sums.data(),
                    got.data(), n);
          EXPECT_TRUE(bitwise_equal(got.data(), want.data(), got.size()))
              << "gemm n " << n << " k " << k << " rows " << rows;
          std::vector<float> one(n, -1.0f);
          set_.gemv(w.packed.data(), k, n, x.q.data(), x.scales.data(), x.sums.data(), one.data());
          EXPECT_TRUE(bitwise_equal(one.data(), want.data(), n)) << "gemv n " << n << " k " << k;
        }
      }
    }
  }
}

TEST_P(QB5Test, extreme_values_accumulate_exactly) {
  // Every weight at -16 or 15 and every activation at +-127 with unit scales: the result is the
  // exact integer sum.
  const size_t k = 256, n = 20, rows = 3, blocks = k / kActBlock;
  Weight w(k, n, /*with_bias=*/false, 5);
  for (size_t i = 0; i < w.values.size(); ++i) w.values[i] = i % 3 == 0 ? -16 : 15;
  w.scales.assign(n * blocks, 0x3C00);  // 1.0
  w.pack(false);
  std::vector<int8_t> q(rows * k);
  for (size_t i = 0; i < q.size(); ++i) q[i] = i % 5 == 0 ? -127 : 127;
  std::vector<int32_t> sums(rows * blocks, 0);
  for (size_t i = 0; i < q.size(); ++i) sums[i / kActBlock] += q[i];
  const std::vector<float> unit(rows * blocks, 1.0f);
  std::vector<float> y(rows * n);
  set_.gemm(w.packed.data(), k, n, rows, q.data(), k, unit.data(), sums.data(), y.data(), n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      int64_t dot = 0;
      for (size_t i = 0; i < k; ++i) dot += int64_t{q[r * k + i]} * w.values[j * k + i];
      EXPECT_EQ(y[r * n + j], static_cast<float>(dot)) << "r" << r << " j" << j;
    }
  }
}

TEST(QB5W, results_stay_within_the_rounding_of_float_math) {
  // Against float math over the dequantized weights: only the activations' rounding differs.
  const size_t k = 256, n = 24, rows = 4, blocks = k / kActBlock;
  const Weight w(k, n, /*with_bias=*/true, 17);
  const Rows x(k, rows, 23);
  std::vector<float> y(rows * n);
  qs8_qb5w_gemm_scalar(w.packed.data(), k, n, rows, x.q.data(), k, x.scales.data(), x.sums.data(),
                       y.data(), n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      double exact = w.bias[j], bound = 0.0;
      for (size_t i = 0; i < k; ++i) {
        const double wf = w.values[j * k + i] *
                          double{runtime::kernels::half_to_float(w.scales[j * blocks + i / 32])};
        exact += wf * x.x[r * k + i];
        // Half a step of the block's activation scale per input.
        bound += std::fabs(wf) * 0.5 * x.scales[r * blocks + i / kActBlock];
      }
      EXPECT_NEAR(y[r * n + j], exact, bound * 1.01 + 1e-3) << "r" << r << " j" << j;
    }
  }
}

TEST(QB5W, the_process_runs_the_widest_set_the_cpu_has) {
  const KernelSets<QB5Kernels>& sets = qb5_kernel_sets();
  EXPECT_EQ(sets.best_isa(), sets.up_to(runtime::kernels::isa_cap()).isa);
  EXPECT_TRUE(qb5_matches_reference(sets.best()));
  EXPECT_EQ(sets.up_to(Isa::kScalar).kernels.gemv, &qs8_qb5w_gemv_scalar);
}

TEST(QB5W, broken_preconditions_are_errors_naming_them_and_write_nothing) {
  const Weight w(128, 20, /*with_bias=*/false, 1);
  auto message = [](const runtime::Status& s) { return std::string(s.ok() ? "" : s.message()); };
  EXPECT_NE(message(check_qb5_kernel_args(100, 20, w.packed.data(), w.packed.size()))
                .find("not a multiple of the block of 32"),
            std::string::npos);
  EXPECT_NE(message(check_qb5_kernel_args(128, 20, w.packed.data(), 100)).find("100 bytes"),
            std::string::npos);
  EXPECT_NE(message(check_qb5_kernel_args(128, 20, nullptr, w.packed.size())).find("no packing"),
            std::string::npos);
  EXPECT_TRUE(check_qb5_kernel_args(128, 20, w.packed.data(), w.packed.size()).ok());
  std::vector<int8_t> q(2 * 128);
  std::vector<float> scales(2 * 4);
  std::vector<int32_t> sums(2 * 4);
  const QS8Scratch scratch{q.data(), scales.data(), sums.data(), 1};
  std::vector<float> y(2 * 20, 7.0f);
  EXPECT_FALSE(qs8_qb5w_run_quantized(qb5_kernel_sets().best(), w.packed.data(), w.packed.size(),
                                      128, 20, 2, scratch, y.data(), 20)
                   .ok());
  EXPECT_FALSE(qs8_qb5w_run_quantized(qb5_kernel_sets().best(), w.packed.data(), w.packed.size(),
                                      128, 20, 1, scratch, y.data(), 19)
                   .ok());
  for (float v : y) ASSERT_EQ(v, 7.0f);
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
