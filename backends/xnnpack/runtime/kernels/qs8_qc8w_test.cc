#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_fully_connected.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_qc8w_vnni256_evex.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

uint32_t step(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

std::vector<float> floats(size_t count, uint32_t seed, float range) {
  std::vector<float> v(count);
  for (float& f : v) f = (static_cast<float>(step(&seed)) / 16777216.0f * 2.0f - 1.0f) * range;
  return v;
}

std::vector<int8_t> int8s(size_t count, uint32_t seed) {
  std::vector<int8_t> v(count);
  for (int8_t& b : v) b = static_cast<int8_t>(static_cast<int>(step(&seed) % 255) - 127);
  return v;
}

// A weight, its scales and bias, packed.
struct Weight {
  Weight(std::vector<int8_t> w_in, size_t k_in, size_t n_in, bool with_bias)
      : w(std::move(w_in)),
        k(k_in),
        n(n_in),
        scales(floats(n, 7, 0.01f)),
        bias(floats(n, 8, 1.0f)) {
    for (float& s : scales) s = std::fabs(s) + 1e-4f;
    packed.resize(qc8_packed_bytes(k, n));
    qc8w_pack(w.data(), scales.data(), with_bias ? bias.data() : nullptr, k, n, packed.data());
    if (!with_bias) bias.assign(n, 0.0f);
  }
  std::vector<int8_t> w;
  size_t k, n;
  std::vector<float> scales, bias;
  std::vector<uint8_t> packed;
};

// The buffers of a run of up to `rows` rows over a weight of k inputs and n outputs.
struct Buffers {
  Buffers(size_t k, size_t n, size_t rows)
      : q(rows * qc8_padded_k(k)), scales(rows), acc(rows * n) {}
  QS8Scratch scratch() { return QS8Scratch{q.data(), scales.data(), acc.data(), scales.size()}; }
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> acc;
};

// sum_i q[i] * w[j][i] from the row-major weight, not the packing.
std::vector<int32_t> plain_dot(const Weight& weight, const std::vector<int8_t>& q, size_t rows,
                               size_t q_stride) {
  std::vector<int32_t> acc(rows * weight.n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < weight.n; ++j) {
      int32_t sum = 0;
      for (size_t i = 0; i < weight.k; ++i) sum += q[r * q_stride + i] * weight.w[j * weight.k + i];
      acc[r * weight.n + j] = sum;
    }
  }
  return acc;
}

// Each path this CPU can run, forced by its instruction set. Where AVX-VNNI is missing but AVX-512
// VNNI is not, the AVX-VNNI blocks run in AVX-512 VL's encoding of the same instructions.
class QS8Test : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (cpu_runs(GetParam())) {
      ASSERT_EQ(qs8_kernel_sets().up_to(GetParam()).isa, GetParam());
      set_ = qs8_kernel_sets().up_to(GetParam()).kernels;
    } else if (GetParam() == Isa::kAvxVnni && cpu_runs(Isa::kAvx512Vnni)) {
      set_ = qs8_kernel_sets().up_to(Isa::kAvx2).kernels;
      set_.gemv = &qs8_qc8w_gemv_4x16_vnni256_evex;
      set_.gemm = &qs8_qc8w_gemm_4x16_vnni256_evex;
      evex_twin_ = true;
    } else {
      GTEST_SKIP() << to_string(GetParam()) << ": not on this CPU";
    }
  }
  QS8Kernels set_;
  bool evex_twin_ = false;
};

INSTANTIATE_TEST_SUITE_P(Paths, QS8Test,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni,
                                           Isa::kAvx512f, Isa::kAvx512Vnni),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST_P(QS8Test, the_forced_set_passes_the_probe) { EXPECT_TRUE(qs8_matches_reference(set_)); }

TEST_P(QS8Test, quantized_rows_and_scales_equal_the_scalar_reference) {
  for (size_t k : {1u, 3u, 4u, 15u, 16u, 17u, 100u, 1001u}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    constexpr size_t rows = 5;
    const size_t stride = k + 3, kp = qc8_padded_k(k);
    std::vector<float> x = floats(rows * stride, static_cast<uint32_t>(k), 30.0f);
    for (size_t i = 0; i < k; ++i) x[2 * stride + i] = 0.0f;  // An all-zero row.
    x[3 * stride] = 1e30f;                                    // A huge value beside tiny ones.
    std::vector<int8_t> want(rows * kp, 5), got(rows * kp, 9);
    std::vector<float> want_scales(rows), got_scales(rows);
    qs8_quantize_scalar(x.data(), k, rows, stride, want.data(), kp, want_scales.data());
    set_.quantize(x.data(), k, rows, stride, got.data(), kp, got_scales.data());
    EXPECT_EQ(want, got);
    EXPECT_EQ(std::memcmp(want_scales.data(), got_scales.data(), rows * sizeof(float)), 0);
    EXPECT_EQ(got_scales[2], 0.0f);
    for (size_t i = k; i < kp; ++i) EXPECT_EQ(got[i], 0) << "padding";
  }
}

// Symmetric, max |x| to 127, round to nearest even: 1 -> 63.5 -> 64, 0.5 -> 31.75 -> 32,
// -2 -> -127, 0.25 -> 15.875 -> 16, and 1.5 * 127 / 3 = 63.5 -> 64 again.
TEST_P(QS8Test, quantizes_by_the_row_maximum_rounding_to_nearest_even) {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 0.25f, 0.0f};
  std::vector<int8_t> q(qc8_padded_k(5));
  float scale = 0;
  set_.quantize(x.data(), 5, 1, 5, q.data(), q.size(), &scale);
  EXPECT_EQ(scale, 2.0f / 127.0f);
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.begin() + 5),
            (std::vector<int8_t>{64, -127, 32, 16, 0}));
}

// The int32 accumulators, exactly: GEMV at one row, GEMM at rows around the blocks, k and n
// around the groups of 4 inputs and tiles of 16 channels, with and without bias (the packing
// differs only in its header).
TEST_P(QS8Test, accumulators_equal_the_scalar_reference_exactly) {
  for (size_t k : {1u, 4u, 5u, 64u, 131u, 1000u}) {
    for (size_t n : {1u, 15u, 16u, 17u, 33u, 64u, 65u, 100u}) {
      const Weight weight(int8s(n * k, static_cast<uint32_t>(k * 31 + n)), k, n, n % 2 == 0);
      for (size_t rows : {1u, 2u, 4u, 5u, 7u, 8u, 9u, 17u}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n) +
                     " rows=" + std::to_string(rows));
        const size_t q_stride = qc8_padded_k(k) + 8;
        std::vector<int8_t> q = int8s(rows * q_stride, static_cast<uint32_t>(rows + k));
        for (size_t r = 0; r < rows; ++r) {
          for (size_t i = k; i < qc8_padded_k(k); ++i) q[r * q_stride + i] = 0;
        }
        const size_t acc_stride = n + 3;
        std::vector<int32_t> want(rows * acc_stride, 42), got(rows * acc_stride, 42);
        qs8_qc8w_gemm_scalar(weight.packed.data(), k, n, rows, q.data(), q_stride, want.data(),
                             acc_stride);
        set_.gemm(weight.packed.data(), k, n, rows, q.data(), q_stride, got.data(), acc_stride);
        EXPECT_EQ(want, got);  // Past n of each row too: untouched.
        if (rows == 1) {
          std::vector<int32_t> one(n + 1, 42);
          set_.gemv(weight.packed.data(), k, n, q.data(), one.data());
          EXPECT_EQ(std::memcmp(one.data(), want.data(), n * sizeof(int32_t)), 0);
          EXPECT_EQ(one[n], 42);
        }
      }
    }
  }
}

// The largest products everywhere (127 x -127, -127 x -127): no 16-bit pair sum saturates and
// the unsigned-activation correction is exact.
TEST_P(QS8Test, extreme_values_accumulate_exactly) {
  constexpr size_t k = 4096, n = 48, rows = 3;
  std::vector<int8_t> w(n * k);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) w[j * k + i] = (j + i) % 3 == 0 ? 127 : -127;
  }
  const Weight weight(w, k, n, false);
  std::vector<int8_t> q(rows * k);
  for (size_t i = 0; i < q.size(); ++i) q[i] = i % 5 == 0 ? 127 : -127;
  std::vector<int32_t> want = plain_dot(weight, q, rows, k), got(rows * n);
  set_.gemm(weight.packed.data(), k, n, rows, q.data(), k, got.data(), n);
  EXPECT_EQ(want, got);
  set_.gemv(weight.packed.data(), k, n, q.data(), got.data());
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + n, got.begin()));
}

// The whole run: every path's floats equal the scalar set's bit for bit, and equal
// (x_scale * w_scale) * sum(q * w) + bias computed here from the row-major weight.
TEST_P(QS8Test, fully_connected_equals_the_scalar_set_bit_for_bit) {
  constexpr size_t k = 300, n = 70, max_rows = 9;
  const Weight weight(int8s(n * k, 5), k, n, true);
  const size_t kp = qc8_padded_k(k);
  Buffers buffers(k, n, max_rows);
  const QS8Scratch scratch = buffers.scratch();
  const std::vector<int8_t>& q = buffers.q;
  const std::vector<float>& scales = buffers.scales;
  const QS8Kernels reference = qs8_kernel_sets().up_to(Isa::kScalar).kernels;
  for (size_t rows : {1u, 3u, 9u}) {
    SCOPED_TRACE("rows=" + std::to_string(rows));
    const std::vector<float> x = floats(rows * k, static_cast<uint32_t>(rows), 4.0f);
    std::vector<float> want(rows * n), got(rows * n);
    ASSERT_TRUE(qs8_qc8w_fully_connected(reference, weight.packed.data(), weight.packed.size(), k,
                                         n, rows, x.data(), k, want.data(), n, scratch)
                    .ok());
    const std::vector<int32_t> dot = plain_dot(weight, q, rows, kp);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < n; ++j) {
        const float s = scales[r] * weight.scales[j];
        EXPECT_EQ(want[r * n + j], s * static_cast<float>(dot[r * n + j]) + weight.bias[j]);
      }
    }
    ASSERT_TRUE(qs8_qc8w_fully_connected(set_, weight.packed.data(), weight.packed.size(), k, n,
                                         rows, x.data(), k, got.data(), n, scratch)
                    .ok());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  }
}

// Against float math on the dequantized weight: each input moves by at most half its row's
// scale when quantized, so each output by at most x_scale / 2 * sum_i |w_scale * w[j][i]|.
TEST(QS8KernelsTest, results_stay_within_the_activation_rounding_of_float_math) {
  constexpr size_t k = 512, n = 40, rows = 4;
  const Weight weight(int8s(n * k, 11), k, n, true);
  Buffers buffers(k, n, rows);
  const QS8Scratch scratch = buffers.scratch();
  const std::vector<float>& scales = buffers.scales;
  const std::vector<float> x = floats(rows * k, 12, 3.0f);
  std::vector<float> y(rows * n);
  ASSERT_TRUE(qs8_qc8w_fully_connected(qs8_kernel_sets().best(), weight.packed.data(), weight.packed.size(), k,
                                       n, rows, x.data(), k, y.data(), n, scratch)
                  .ok());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      double want = weight.bias[j], bound = 0;
      for (size_t i = 0; i < k; ++i) {
        const double w = double(weight.scales[j]) * weight.w[j * k + i];
        want += w * x[r * k + i];
        bound += std::fabs(w);
      }
      bound = bound * scales[r] / 2 + 1e-4 * (std::fabs(want) + 1);
      EXPECT_NEAR(y[r * n + j], want, bound) << "row " << r << " channel " << j;
    }
  }
}

// Rows quantized once, then two column slabs (the first a whole number of tiles) each with its
// own accumulators: the same floats as one run over the whole weight.
TEST(QS8KernelsTest, column_slabs_over_rows_quantized_once_equal_one_run) {
  constexpr size_t k = 200, n = 100, rows = 5, first = 48;
  const Weight weight(int8s(n * k, 21), k, n, true);
  Buffers buffers(k, n, rows);
  const QS8Scratch scratch = buffers.scratch();
  const std::vector<float> x = floats(rows * k, 22, 2.0f);
  std::vector<float> whole(rows * n), slabs(rows * n, 42.0f);
  const QS8Kernels& set = qs8_kernel_sets().best();
  ASSERT_TRUE(qs8_qc8w_fully_connected(set, weight.packed.data(), weight.packed.size(), k, n, rows,
                                       x.data(), k, whole.data(), n, scratch)
                  .ok());
  ASSERT_TRUE(qs8_quantize_rows(set, k, rows, x.data(), k, scratch).ok());
  std::vector<int32_t> acc_a(rows * first), acc_b(rows * (n - first));
  ASSERT_TRUE(qs8_qc8w_run_quantized(set, weight.packed.data(), qc8_packed_bytes(k, first), k,
                                     first, rows, scratch, acc_a.data(), slabs.data(), n)
                  .ok());
  const uint8_t* second = weight.packed.data() + first / kQC8Tile * qc8_tile_bytes(k);
  ASSERT_TRUE(qs8_qc8w_run_quantized(set, second, qc8_packed_bytes(k, n - first), k, n - first,
                                     rows, scratch, acc_b.data(), slabs.data() + first, n)
                  .ok());
  EXPECT_EQ(std::memcmp(whole.data(), slabs.data(), whole.size() * sizeof(float)), 0);
}

TEST(QS8KernelsTest, the_process_runs_the_widest_set_the_cpu_has) {
  const KernelSets<QS8Kernels>& sets = qs8_kernel_sets();
  EXPECT_EQ(sets.best_isa(), sets.up_to(runtime::kernels::isa_cap()).isa);
  EXPECT_NE(sets.best().quantize, nullptr);
}

TEST(QS8KernelsTest, broken_preconditions_are_errors_and_write_nothing) {
  constexpr size_t k = 8, n = 16;
  const Weight weight(int8s(n * k, 1), k, n, false);
  std::vector<int8_t> q(2 * k);
  std::vector<float> scales(2), x(3 * k, 1.0f), y(3 * n, 42.0f);
  std::vector<int32_t> acc(2 * n);
  const QS8Scratch scratch{q.data(), scales.data(), acc.data(), 2};
  const QS8Kernels& set = qs8_kernel_sets().best();
  auto message = [](const runtime::Status& s) { return std::string(s.message()); };
  const runtime::Status too_many = qs8_qc8w_fully_connected(
      set, weight.packed.data(), weight.packed.size(), k, n, 3, x.data(), k, y.data(), n, scratch);
  EXPECT_EQ(too_many.code(), runtime::Error::InvalidArgument);
  EXPECT_NE(message(too_many).find("3 rows, the scratch holds 2"), std::string::npos);
  const runtime::Status short_packing = qs8_qc8w_fully_connected(
      set, weight.packed.data(), 100, k, n, 1, x.data(), k, y.data(), n, scratch);
  EXPECT_NE(message(short_packing).find("is 100 bytes"), std::string::npos);
  const runtime::Status long_rows = check_qs8_kernel_args(size_t{1} << 20, n, weight.packed.data(),
                                                          qc8_packed_bytes(size_t{1} << 20, n));
  EXPECT_NE(message(long_rows).find("too many inputs"), std::string::npos);
  const runtime::Status stride =
      qs8_qc8w_fully_connected(set, weight.packed.data(), weight.packed.size(), k, n, 1, x.data(),
                               k - 1, y.data(), n, scratch);
  EXPECT_NE(message(stride).find("input stride 7"), std::string::npos);
  EXPECT_EQ(y, std::vector<float>(3 * n, 42.0f));
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
