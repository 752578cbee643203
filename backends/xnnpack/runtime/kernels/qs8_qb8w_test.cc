#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_qc8w_vnni256_evex.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

uint32_t step(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

// A canonical int8 weight (values in [-127, 127]), its float16 block scales and bias, packed.
struct Weight {
  Weight(size_t k_in, size_t n_in, bool with_bias, uint32_t seed)
      : k(k_in), n(n_in), values(n * k), scales(n * (k / kActBlock)), bias(n, 0.0f) {
    for (int8_t& v : values) v = static_cast<int8_t>(static_cast<int>(step(&seed) % 255) - 127);
    // Finite positive halves between 2^-14 and 2, subnormal-free.
    for (uint16_t& s : scales) s = static_cast<uint16_t>(0x0400 + step(&seed) % 0x3C00);
    if (with_bias) {
      for (float& b : bias) b = static_cast<float>(step(&seed) % 2001) / 1000.0f - 1.0f;
    }
    packed.resize(qb8_packed_bytes(k, n));
    qb8w_pack(values.data(), scales.data(), with_bias ? bias.data() : nullptr, k, n, packed.data());
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

// kernels.h's computation from the canonical values, the packing aside.
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

// Each path this CPU can run, forced by its instruction set; where AVX-VNNI is missing but AVX-512
// VNNI is not, the AVX-VNNI blocks in AVX-512 VL's encoding.
class QB8Test : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (cpu_runs(GetParam())) {
      ASSERT_EQ(qb8_kernel_sets().up_to(GetParam()).isa, GetParam());
      set_ = qb8_kernel_sets().up_to(GetParam()).kernels;
#if defined(__x86_64__)
    } else if (GetParam() == Isa::kAvxVnni && cpu_runs(Isa::kAvx512Vnni)) {
      set_.gemv = &qs8_qb8w_gemv_4x16_vnni256_evex;
      set_.gemm = &qs8_qb8w_gemm_4x16_vnni256_evex;
#endif
    } else {
      GTEST_SKIP() << to_string(GetParam()) << ": not on this CPU";
    }
  }
  QB8Kernels set_;
};

INSTANTIATE_TEST_SUITE_P(Paths, QB8Test,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512f,
                                           Isa::kAvx512Vnni, Isa::kNeon, Isa::kNeonDot,
                                           Isa::kNeonI8mm),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(QB8W, scalar_reference_is_the_naive_computation_over_the_canonical_layout) {
  // An even and an odd number of blocks: the packing pairs blocks, the last pair with one.
  for (size_t k : {size_t{128}, size_t{160}}) {
    const Weight w(k, 37, /*with_bias=*/true, 11);
    const size_t rows = 5;
    const Rows x(w.k, rows, 3);
    std::vector<float> y(rows * w.n, 1.0f);
    qs8_qb8w_gemm_scalar(w.packed.data(), w.k, w.n, rows, x.q.data(), w.k, x.scales.data(),
                         x.sums.data(), y.data(), w.n);
    const std::vector<float> want = naive(w, x, rows);
    EXPECT_TRUE(bitwise_equal(y.data(), want.data(), y.size())) << "k " << k;
  }
}

TEST_P(QB8Test, the_forced_set_passes_the_probe) { EXPECT_TRUE(qb8_matches_reference(set_)); }

TEST(QB8W, the_probe_refuses_a_set_that_differs_from_the_reference) {
  const QB8Kernels reference{&qs8_qb8w_gemv_scalar, &qs8_qb8w_gemm_scalar};
  ASSERT_TRUE(qb8_matches_reference(reference));
  QB8Kernels silent = reference;  // a GEMV that writes nothing
  silent.gemv = [](const void*, size_t, size_t, const int8_t*, const float*, const int32_t*,
                   float*) {};
  EXPECT_FALSE(qb8_matches_reference(silent));
  QB8Kernels ulp = reference;  // a GEMM whose last output is one ulp off
  ulp.gemm = [](const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                size_t y_stride) {
    qs8_qb8w_gemm_scalar(packed, k, n, rows, q, q_stride, x_scales, x_sums, y, y_stride);
    float& last = y[(rows - 1) * y_stride + n - 1];
    last = std::nextafter(last, INFINITY);
  };
  EXPECT_FALSE(qb8_matches_reference(ulp));
  EXPECT_FALSE(qb8_matches_reference(QB8Kernels{}));
}

TEST_P(QB8Test, outputs_equal_the_scalar_reference_bit_for_bit) {
  // Partial last tiles, an even and an odd number of blocks, with and without bias, row counts
  // around every path's row blocks.
  for (size_t n : {1, 16, 33, 85}) {
    for (size_t k : {size_t{32}, size_t{96}, size_t{256}}) {
      for (bool with_bias : {true, false}) {
        const Weight w(k, n, with_bias, static_cast<uint32_t>(n * 7 + k));
        for (size_t rows : {1, 2, 3, 4, 5, 8, 9, 17}) {
          const Rows x(k, rows, static_cast<uint32_t>(rows + k));
          std::vector<float> want(rows * n), got(rows * n, -1.0f);
          qs8_qb8w_gemm_scalar(w.packed.data(), k, n, rows, x.q.data(), k, x.scales.data(),
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

TEST_P(QB8Test, extreme_values_accumulate_exactly) {
  // Every weight and activation at +-127 and unit scales: each block's dot is +-32 x 127^2, and
  // the result is the exact integer sum.
  const size_t k = 256, n = 20, rows = 3, blocks = k / kActBlock;
  Weight w(k, n, /*with_bias=*/false, 5);
  for (size_t i = 0; i < w.values.size(); ++i) w.values[i] = i % 3 == 0 ? -127 : 127;
  w.scales.assign(n * blocks, 0x3C00);  // 1.0
  qb8w_pack(w.values.data(), w.scales.data(), nullptr, k, n, w.packed.data());
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

TEST(QB8W, results_stay_within_the_rounding_of_float_math) {
  // Against float math over the dequantized weights: only the activations' rounding differs.
  const size_t k = 256, n = 24, rows = 4, blocks = k / kActBlock;
  const Weight w(k, n, /*with_bias=*/true, 17);
  const Rows x(k, rows, 23);
  std::vector<float> y(rows * n);
  qs8_qb8w_gemm_scalar(w.packed.data(), k, n, rows, x.q.data(), k, x.scales.data(), x.sums.data(),
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

TEST(QB8W, the_process_runs_the_widest_set_the_cpu_has) {
  const KernelSets<QB8Kernels>& sets = qb8_kernel_sets();
  EXPECT_EQ(sets.best_isa(), sets.up_to(runtime::kernels::isa_cap()).isa);
  EXPECT_TRUE(qb8_matches_reference(sets.best()));
  EXPECT_EQ(sets.up_to(Isa::kScalar).kernels.gemv, &qs8_qb8w_gemv_scalar);
}

TEST(QB8W, broken_preconditions_are_errors_naming_them_and_write_nothing) {
  const Weight w(128, 20, /*with_bias=*/false, 1);
  auto message = [](const runtime::Status& s) { return std::string(s.ok() ? "" : s.message()); };
  EXPECT_NE(message(check_qb8_kernel_args(100, 20, w.packed.data(), w.packed.size()))
                .find("not a multiple of the block of 32"),
            std::string::npos);
  EXPECT_NE(message(check_qb8_kernel_args(128, 20, w.packed.data(), 100)).find("100 bytes"),
            std::string::npos);
  EXPECT_NE(message(check_qb8_kernel_args(128, 20, nullptr, w.packed.size())).find("no packing"),
            std::string::npos);
  EXPECT_TRUE(check_qb8_kernel_args(128, 20, w.packed.data(), w.packed.size()).ok());
  std::vector<int8_t> q(2 * 128);
  std::vector<float> scales(2 * 4);
  std::vector<int32_t> sums(2 * 4);
  const QS8Scratch scratch{q.data(), scales.data(), sums.data(), 1};
  std::vector<float> y(2 * 20, 7.0f);
  EXPECT_FALSE(qs8_qb8w_run_quantized(qb8_kernel_sets().best(), w.packed.data(), w.packed.size(),
                                      128, 20, 2, scratch, y.data(), 20)
                   .ok());
  EXPECT_FALSE(qs8_qb8w_run_quantized(qb8_kernel_sets().best(), w.packed.data(), w.packed.size(),
                                      128, 20, 1, scratch, y.data(), 19)
                   .ok());
  for (float v : y) ASSERT_EQ(v, 7.0f);
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
