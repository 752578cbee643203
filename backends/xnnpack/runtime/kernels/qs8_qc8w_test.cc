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

// The buffers of a run of up to `rows` rows over a weight of k inputs.
struct Buffers {
  Buffers(size_t k, size_t rows_in)
      : rows(rows_in),
        q(rows * qc8_padded_k(k)),
        scales(rows * act_blocks(k)),
        sums(rows * act_blocks(k)) {}
  QS8Scratch scratch() { return QS8Scratch{q.data(), scales.data(), sums.data(), rows}; }
  size_t rows;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// Rows of random floats quantized by the scalar reference (q_stride apart).
struct Rows {
  Rows(size_t k_in, size_t rows_in, size_t q_stride_in, uint32_t seed)
      : k(k_in), rows(rows_in), q_stride(q_stride_in), x(floats(rows * k, seed, 5.0f)),
        q(rows * q_stride, 0), scales(rows * act_blocks(k)), sums(rows * act_blocks(k)) {
    // An outlier per row: per-block scales keep it from flattening the other blocks.
    for (size_t r = 0; r < rows; ++r) x[r * k + (r * 7) % k] *= 40.0f;
    qs8_quantize_scalar(x.data(), k, rows, k, q.data(), q_stride, scales.data(), sums.data());
  }
  size_t k, rows, q_stride;
  std::vector<float> x;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// kernels.h's computation from the row-major weight, not the packing: per block of kActBlock
// inputs the exact dot, acc = fma(float(dot), x_scale_b, acc) in block order, then
// fma(acc, w_scale, bias).
std::vector<float> block_reference(const Weight& weight, const int8_t* q, size_t q_stride,
                                   const float* x_scales, size_t rows) {
  const size_t blocks = act_blocks(weight.k);
  std::vector<float> y(rows * weight.n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < weight.n; ++j) {
      float acc = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        int32_t dot = 0;
        for (size_t i = b * kActBlock; i < (b + 1) * kActBlock && i < weight.k; ++i) {
          dot += q[r * q_stride + i] * weight.w[j * weight.k + i];
        }
        acc = std::fma(static_cast<float>(dot), x_scales[r * blocks + b], acc);
      }
      y[r * weight.n + j] = std::fma(acc, weight.scales[j], weight.bias[j]);
    }
  }
  return y;
}

bool bitwise_equal(const float* a, const float* b, size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

// Each path this CPU can run, forced by its instruction set. Where AVX-VNNI is missing but AVX-512
// VNNI is not, the AVX-VNNI blocks run in AVX-512 VL's encoding of the same instructions.
class QS8Test : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (cpu_runs(GetParam())) {
      ASSERT_EQ(qs8_kernel_sets().up_to(GetParam()).isa, GetParam());
      set_ = qs8_kernel_sets().up_to(GetParam()).kernels;
#if defined(__x86_64__)
    } else if (GetParam() == Isa::kAvxVnni && cpu_runs(Isa::kAvx512Vnni)) {
      set_ = qs8_kernel_sets().up_to(Isa::kAvx2).kernels;
      set_.gemv = &qs8_qc8w_gemv_4x16_vnni256_evex;
      set_.gemm = &qs8_qc8w_gemm_4x16_vnni256_evex;
      evex_twin_ = true;
#endif
    } else {
      GTEST_SKIP() << to_string(GetParam()) << ": not on this CPU";
    }
  }
  QS8Kernels set_;
  bool evex_twin_ = false;
};

INSTANTIATE_TEST_SUITE_P(Paths, QS8Test,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni,
                                           Isa::kAvx512f, Isa::kAvx512Vnni, Isa::kNeon,
                                           Isa::kNeonDot, Isa::kNeonI8mm),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(to_string(info.param));
                         });

TEST_P(QS8Test, the_forced_set_passes_the_probe) { EXPECT_TRUE(qs8_matches_reference(set_)); }

TEST_P(QS8Test, quantized_rows_scales_and_sums_equal_the_scalar_reference) {
  for (size_t k : {1u, 3u, 4u, 15u, 16u, 17u, 31u, 32u, 33u, 64u, 100u, 1001u}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    constexpr size_t rows = 5;
    const size_t stride = k + 3, kp = qc8_padded_k(k), blocks = act_blocks(k);
    std::vector<float> x = floats(rows * stride, static_cast<uint32_t>(k), 30.0f);
    for (size_t i = 0; i < k; ++i) x[2 * stride + i] = 0.0f;  // An all-zero row.
    x[3 * stride] = 1e30f;                                    // A huge value beside tiny ones.
    std::vector<int8_t> want(rows * kp, 5), got(rows * kp, 9);
    std::vector<float> want_scales(rows * blocks), got_scales(rows * blocks);
    std::vector<int32_t> want_sums(rows * blocks), got_sums(rows * blocks, 7);
    qs8_quantize_scalar(x.data(), k, rows, stride, want.data(), kp, want_scales.data(),
                        want_sums.data());
    set_.quantize(x.data(), k, rows, stride, got.data(), kp, got_scales.data(), got_sums.data());
    EXPECT_EQ(want, got);
    EXPECT_TRUE(bitwise_equal(want_scales.data(), got_scales.data(), rows * blocks));
    EXPECT_EQ(want_sums, got_sums);
    for (size_t b = 0; b < blocks; ++b) {
      EXPECT_EQ(got_scales[2 * blocks + b], 0.0f);
      int32_t sum = 0;
      for (size_t i = 0; i < kActBlock; ++i) sum += got[b * kActBlock + i];
      EXPECT_EQ(got_sums[b], sum);
    }
    for (size_t i = k; i < kp; ++i) EXPECT_EQ(got[i], 0) << "padding";
  }
}

// Symmetric, max |x| of each block of 32 to 127, round to nearest even. Block 0 (max 2):
// 1 -> 63.5 -> 64, 0.5 -> 31.75 -> 32, -2 -> -127, 0.25 -> 15.875 -> 16. Block 1 (max 0.5, on its
// own scale): 0.25 -> 63.5 -> 64, -0.5 -> -127. Block 2: all zero, scale 0.
TEST_P(QS8Test, quantizes_by_each_block_maximum_rounding_to_nearest_even) {
  std::vector<float> x(3 * kActBlock, 0.0f);
  x[0] = 1.0f, x[1] = -2.0f, x[2] = 0.5f, x[3] = 0.25f;
  x[32] = 0.25f, x[33] = -0.5f;
  std::vector<int8_t> q(qc8_padded_k(x.size()));
  float scales[3] = {};
  int32_t sums[3] = {};
  set_.quantize(x.data(), x.size(), 1, x.size(), q.data(), q.size(), scales, sums);
  EXPECT_EQ(scales[0], 2.0f / 127.0f);
  EXPECT_EQ(scales[1], 0.5f / 127.0f);
  EXPECT_EQ(scales[2], 0.0f);
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.begin() + 5),
            (std::vector<int8_t>{64, -127, 32, 16, 0}));
  EXPECT_EQ(q[32], 64);
  EXPECT_EQ(q[33], -127);
  EXPECT_EQ(sums[0], 64 - 127 + 32 + 16);
  EXPECT_EQ(sums[1], 64 - 127);
  EXPECT_EQ(sums[2], 0);
}

// The floats, bit for bit: GEMV at one row, GEMM at rows around the blocks, k and n around the
// activation blocks and tiles of 16 channels, with and without bias (the packing differs only in
// its header); the GEMV gives the GEMM's first row.
TEST_P(QS8Test, outputs_equal_the_scalar_reference_bit_for_bit) {
  for (size_t k : {1u, 4u, 5u, 32u, 64u, 131u, 1000u}) {
    for (size_t n : {1u, 15u, 16u, 17u, 33u, 64u, 65u, 100u}) {
      const Weight weight(int8s(n * k, static_cast<uint32_t>(k * 31 + n)), k, n, n % 2 == 0);
      for (size_t rows : {1u, 2u, 4u, 5u, 7u, 8u, 9u, 17u}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n) +
                     " rows=" + std::to_string(rows));
        const Rows x(k, rows, qc8_padded_k(k) + 32, static_cast<uint32_t>(rows + k));
        const size_t y_stride = n + 3;
        std::vector<float> want(rows * y_stride, 42.0f), got(rows * y_stride, 42.0f);
        qs8_qc8w_gemm_scalar(weight.packed.data(), k, n, rows, x.q.data(), x.q_stride,
                             x.scales.data(), x.sums.data(), want.data(), y_stride);
        set_.gemm(weight.packed.data(), k, n, rows, x.q.data(), x.q_stride, x.scales.data(),
                  x.sums.data(), got.data(), y_stride);
        EXPECT_TRUE(bitwise_equal(want.data(), got.data(), want.size()));  // Past n: untouched.
        const std::vector<float> plain =
            block_reference(weight, x.q.data(), x.q_stride, x.scales.data(), rows);
        for (size_t r = 0; r < rows; ++r) {
          EXPECT_TRUE(bitwise_equal(want.data() + r * y_stride, plain.data() + r * n, n));
        }
        std::vector<float> one(n + 1, 42.0f);
        set_.gemv(weight.packed.data(), k, n, x.q.data(), x.scales.data(), x.sums.data(),
                  one.data());
        EXPECT_TRUE(bitwise_equal(one.data(), want.data(), n));
        EXPECT_EQ(one[n], 42.0f);
      }
    }
  }
}

// The largest products everywhere (127 x -127, -127 x -127): no 16-bit pair sum saturates and
// the unsigned-weight correction is exact.
TEST_P(QS8Test, extreme_values_accumulate_exactly) {
  constexpr size_t k = 4096, n = 48, rows = 3;
  const size_t blocks = act_blocks(k);
  std::vector<int8_t> w(n * k);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) w[j * k + i] = (j + i) % 3 == 0 ? 127 : -127;
  }
  Weight weight(w, k, n, false);
  std::vector<int8_t> q(rows * k);
  for (size_t i = 0; i < q.size(); ++i) q[i] = i % 5 == 0 ? 127 : -127;
  std::vector<float> x_scales(rows * blocks, 1.0f);
  std::vector<int32_t> sums(rows * blocks, 0);
  for (size_t i = 0; i < q.size(); ++i) sums[i / kActBlock] += q[i];
  const std::vector<float> want = block_reference(weight, q.data(), k, x_scales.data(), rows);
  std::vector<float> got(rows * n);
  set_.gemm(weight.packed.data(), k, n, rows, q.data(), k, x_scales.data(), sums.data(),
            got.data(), n);
  EXPECT_TRUE(bitwise_equal(want.data(), got.data(), want.size()));
  set_.gemv(weight.packed.data(), k, n, q.data(), x_scales.data(), sums.data(), got.data());
  EXPECT_TRUE(bitwise_equal(want.data(), got.data(), n));
}

// The whole run: every path's floats equal the scalar set's bit for bit, and kernels.h's
// computation from the row-major weight.
TEST_P(QS8Test, fully_connected_equals_the_scalar_set_bit_for_bit) {
  constexpr size_t k = 300, n = 70, max_rows = 9;
  const Weight weight(int8s(n * k, 5), k, n, true);
  const size_t kp = qc8_padded_k(k);
  Buffers buffers(k, max_rows);
  const QS8Scratch scratch = buffers.scratch();
  const QS8Kernels reference = qs8_kernel_sets().up_to(Isa::kScalar).kernels;
  for (size_t rows : {1u, 3u, 9u}) {
    SCOPED_TRACE("rows=" + std::to_string(rows));
    const std::vector<float> x = floats(rows * k, static_cast<uint32_t>(rows), 4.0f);
    std::vector<float> want(rows * n), got(rows * n);
    ASSERT_TRUE(qs8_qc8w_fully_connected(reference, weight.packed.data(), weight.packed.size(), k,
                                         n, rows, x.data(), k, want.data(), n, scratch)
                    .ok());
    const std::vector<float> plain =
        block_reference(weight, buffers.q.data(), kp, buffers.scales.data(), rows);
    EXPECT_TRUE(bitwise_equal(want.data(), plain.data(), want.size()));
    ASSERT_TRUE(qs8_qc8w_fully_connected(set_, weight.packed.data(), weight.packed.size(), k, n,
                                         rows, x.data(), k, got.data(), n, scratch)
                    .ok());
    EXPECT_TRUE(bitwise_equal(want.data(), got.data(), want.size()));
  }
}

// Against float math on the dequantized weight: each input moves by at most half its block's
// scale when quantized, so each output by at most sum_i x_scale_b(i) / 2 * |w_scale * w[j][i]|.
TEST(QS8KernelsTest, results_stay_within_the_activation_rounding_of_float_math) {
  constexpr size_t k = 512, n = 40, rows = 4;
  const Weight weight(int8s(n * k, 11), k, n, true);
  Buffers buffers(k, rows);
  const QS8Scratch scratch = buffers.scratch();
  const std::vector<float>& scales = buffers.scales;
  std::vector<float> x = floats(rows * k, 12, 3.0f);
  x[5] = 80.0f;  // An outlier: only its own block's scale grows.
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
        bound += std::fabs(w) * scales[r * act_blocks(k) + i / kActBlock] / 2;
      }
      bound += 1e-4 * (std::fabs(want) + 1);
      EXPECT_NEAR(y[r * n + j], want, bound) << "row " << r << " channel " << j;
    }
  }
}

// Rows quantized once, then two column slabs (the first a whole number of tiles): the same
// floats as one run over the whole weight.
TEST(QS8KernelsTest, column_slabs_over_rows_quantized_once_equal_one_run) {
  constexpr size_t k = 200, n = 100, rows = 5, first = 48;
  const Weight weight(int8s(n * k, 21), k, n, true);
  Buffers buffers(k, rows);
  const QS8Scratch scratch = buffers.scratch();
  const std::vector<float> x = floats(rows * k, 22, 2.0f);
  std::vector<float> whole(rows * n), slabs(rows * n, 42.0f);
  const QS8Kernels& set = qs8_kernel_sets().best();
  ASSERT_TRUE(qs8_qc8w_fully_connected(set, weight.packed.data(), weight.packed.size(), k, n, rows,
                                       x.data(), k, whole.data(), n, scratch)
                  .ok());
  ASSERT_TRUE(qs8_quantize_rows(set, k, rows, x.data(), k, scratch).ok());
  ASSERT_TRUE(qs8_qc8w_run_quantized(set, weight.packed.data(), qc8_packed_bytes(k, first), k,
                                     first, rows, scratch, slabs.data(), n)
                  .ok());
  const uint8_t* second = weight.packed.data() + first / kQC8Tile * qc8_tile_bytes(k);
  ASSERT_TRUE(qs8_qc8w_run_quantized(set, second, qc8_packed_bytes(k, n - first), k, n - first,
                                     rows, scratch, slabs.data() + first, n)
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
  Buffers buffers(k, 2);
  const QS8Scratch scratch = buffers.scratch();
  std::vector<float> x(3 * k, 1.0f), y(3 * n, 42.0f);
  const QS8Kernels& set = qs8_kernel_sets().best();
  auto message = [](const runtime::Status& s) { return std::string(s.message()); };
  const runtime::Status too_many = qs8_qc8w_fully_connected(
      set, weight.packed.data(), weight.packed.size(), k, n, 3, x.data(), k, y.data(), n, scratch);
  EXPECT_EQ(too_many.code(), runtime::Error::InvalidArgument);
  EXPECT_NE(message(too_many).find("3 rows, the scratch holds 2"), std::string::npos);
  const runtime::Status short_packing = qs8_qc8w_fully_connected(
      set, weight.packed.data(), 100, k, n, 1, x.data(), k, y.data(), n, scratch);
  EXPECT_NE(message(short_packing).find("is 100 bytes"), std::string::npos);
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
