#include <gtest/gtest.h>

#include <algorithm>
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

// float -> float16 bits for test values that float16 holds exactly (normal, 10-bit mantissa).
uint16_t exact_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint32_t sign = (bits >> 16) & 0x8000;
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFF) - 127 + 15;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) |
                               ((bits >> 13) & 0x3FF));
}

// A canonical int4 weight (values in [-8, 7]), its float16 scales and bias, packed.
struct Weight {
  Weight(size_t k_in, size_t n_in, size_t group_in, bool with_bias, uint32_t seed)
      : k(k_in), n(n_in), group(group_in), values(n * k), canonical(n * k / 2, 0) {
    for (int8_t& v : values) v = static_cast<int8_t>(static_cast<int>(step(&seed) % 16) - 8);
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < k; ++i) {
        const uint8_t nibble = static_cast<uint8_t>(values[j * k + i]) & 0x0F;
        canonical[j * k / 2 + i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? nibble : nibble << 4);
      }
    }
    for (size_t i = 0; i < n * (k / group); ++i) {
      // Multiples of 1/1024 in (0, 0.25]: exact in float16.
      const float s = static_cast<float>(step(&seed) % 256 + 1) / 1024.0f;
      scale_floats.push_back(s);
      scales.push_back(exact_half(s));
    }
    bias.assign(n, 0.0f);
    if (with_bias) {
      for (float& b : bias) b = static_cast<float>(step(&seed) % 2001) / 1000.0f - 1.0f;
    }
    packed.resize(qc4_packed_bytes(k, n, group));
    qc4w_pack(canonical.data(), scales.data(), with_bias ? bias.data() : nullptr, k, n, group,
              packed.data());
  }
  size_t k, n, group;
  std::vector<int8_t> values;
  std::vector<uint8_t> canonical;
  std::vector<uint16_t> scales;
  std::vector<float> scale_floats, bias;
  std::vector<uint8_t> packed;
};

std::vector<int8_t> activations(size_t count, uint32_t seed) {
  std::vector<int8_t> v(count);
  for (int8_t& b : v) b = static_cast<int8_t>(static_cast<int>(step(&seed) % 255) - 127);
  return v;
}

// Rows of activations quantized by the scalar reference: q (k a row), each block's scale and sum.
struct Rows {
  Rows(size_t k, size_t rows, uint32_t seed)
      : q(rows * k), scales(rows * k / kActBlock), sums(rows * k / kActBlock) {
    std::vector<float> x(rows * k);
    for (float& v : x) v = static_cast<float>(step(&seed) % 2001) / 100.0f - 10.0f;
    // An outlier per row: per-block scales keep it from flattening the other blocks.
    for (size_t r = 0; r < rows; ++r) x[r * k + (r * 37) % k] *= 30.0f;
    qs8_quantize_scalar(x.data(), k, rows, k, q.data(), k, scales.data(), sums.data());
  }
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// The computation of kernels.h from the canonical values, the packing aside.
std::vector<float> naive(const Weight& w, const Rows& x, size_t rows) {
  const size_t groups = w.k / w.group, blocks = w.k / kActBlock;
  std::vector<float> y(rows * w.n);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < w.n; ++j) {
      float acc = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        int32_t sum = 0;
        for (size_t i = b * kActBlock; i < (b + 1) * kActBlock; ++i) {
          sum += static_cast<int32_t>(x.q[r * w.k + i]) * w.values[j * w.k + i];
        }
        const size_t g = b * kActBlock / w.group;
        acc = std::fma(static_cast<float>(sum),
                       x.scales[r * blocks + b] * w.scale_floats[j * groups + g], acc);
      }
      y[r * w.n + j] = acc + w.bias[j];
    }
  }
  return y;
}

std::vector<Isa> runnable_paths() {
  std::vector<Isa> paths;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512f, Isa::kAvx512Vnni,
                  Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm}) {
    if (cpu_runs(isa)) paths.push_back(isa);
  }
  return paths;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(QS8QC4W, ScalarReferenceIsTheNaiveComputationOverTheCanonicalLayout) {
  // An even and an odd number of groups: the packing pairs groups, the last pair with one.
  for (size_t group : {32, 64, 128}) {
    for (size_t k : {size_t{256}, 3 * group}) {
      const Weight w(k, 37, group, /*with_bias=*/true, 11);
      const size_t rows = 5;
      const Rows x(w.k, rows, 3);
      std::vector<float> y(rows * w.n, 1.0f);
      qs8_qc4w_gemm_scalar(w.packed.data(), w.k, w.n, group, rows, x.q.data(), w.k,
                           x.scales.data(), x.sums.data(), y.data(), w.n);
      EXPECT_TRUE(bitwise_equal(y, naive(w, x, rows))) << "group " << group << " k " << k;
    }
  }
}

TEST(QS8QC4W, IntegerBlockSumsAreExact) {
  // Unit scales, no bias, x_scale 1: y is the exact integer dot (below 2^24, so exact in float).
  const size_t k = 128, n = 20, group = 32;
  Weight w(k, n, group, /*with_bias=*/false, 5);
  w.scales.assign(n * k / group, 0x3C00);  // 1.0
  qc4w_pack(w.canonical.data(), w.scales.data(), nullptr, k, n, group, w.packed.data());
  const std::vector<int8_t> q = activations(2 * k, 9);
  std::vector<int32_t> sums(2 * k / kActBlock, 0);
  for (size_t i = 0; i < q.size(); ++i) sums[i / kActBlock] += q[i];
  const std::vector<float> xs(2 * k / kActBlock, 1.0f);
  for (Isa isa : runnable_paths()) {
    const QC4Kernels set = qc4_kernel_sets().up_to(isa).kernels;
    std::vector<float> y(2 * n);
    set.gemm(w.packed.data(), k, n, group, 2, q.data(), k, xs.data(), sums.data(), y.data(), n);
    for (size_t r = 0; r < 2; ++r) {
      for (size_t j = 0; j < n; ++j) {
        int64_t dot = 0;
        for (size_t i = 0; i < k; ++i) dot += int64_t{q[r * k + i]} * w.values[j * k + i];
        EXPECT_EQ(y[r * n + j], static_cast<float>(dot))
            << to_string(isa) << " r" << r << " j" << j;
      }
    }
  }
}

TEST(QS8QC4W, ExtremeValuesAccumulateExactly) {
  // Every weight at -8 or 7 and every activation at +-127, unit scales: each block's dot is up to
  // 32 x 8 x 127 in magnitude and the result the exact integer sum (below 2^24).
  const size_t k = 1024, n = 20, group = 128, rows = 5;
  Weight w(k, n, group, /*with_bias=*/false, 7);
  std::fill(w.canonical.begin(), w.canonical.end(), uint8_t{0});
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < k; ++i) {
      w.values[j * k + i] = (i + j) % 3 == 0 ? 7 : -8;
      const uint8_t nibble = static_cast<uint8_t>(w.values[j * k + i]) & 0x0F;
      w.canonical[j * k / 2 + i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? nibble : nibble << 4);
    }
  }
  w.scales.assign(n * k / group, 0x3C00);  // 1.0
  qc4w_pack(w.canonical.data(), w.scales.data(), nullptr, k, n, group, w.packed.data());
  std::vector<int8_t> q(rows * k);
  for (size_t i = 0; i < q.size(); ++i) q[i] = i % 5 == 0 ? 127 : -127;
  std::vector<int32_t> sums(rows * k / kActBlock, 0);
  for (size_t i = 0; i < q.size(); ++i) sums[i / kActBlock] += q[i];
  const std::vector<float> xs(rows * k / kActBlock, 1.0f);
  for (Isa isa : runnable_paths()) {
    const QC4Kernels set = qc4_kernel_sets().up_to(isa).kernels;
    std::vector<float> y(rows * n);
    set.gemm(w.packed.data(), k, n, group, rows, q.data(), k, xs.data(), sums.data(), y.data(), n);
    std::vector<float> one(n);
    set.gemv(w.packed.data(), k, n, group, q.data(), xs.data(), sums.data(), one.data());
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < n; ++j) {
        int64_t dot = 0;
        for (size_t i = 0; i < k; ++i) dot += int64_t{q[r * k + i]} * w.values[j * k + i];
        EXPECT_EQ(y[r * n + j], static_cast<float>(dot))
            << to_string(isa) << " r" << r << " j" << j;
        if (r == 0) {
          EXPECT_EQ(one[j], static_cast<float>(dot)) << to_string(isa) << " gemv j" << j;
        }
      }
    }
  }
}

TEST(QS8QC4W, EveryPathTheCpuRunsGivesTheReferenceBits) {
  // Odd channel counts (a partial last tile), every group size, an even and an odd number of
  // groups (a last pair of groups with one), with and without bias, row counts around the row
  // blocks.
  for (size_t group : {32, 64, 128}) {
    for (size_t n : {1, 16, 33, 85}) {
      for (bool with_bias : {true, false}) {
        for (size_t k : {size_t{2 * 128}, 3 * group}) {
          const Weight w(k, n, group, with_bias, static_cast<uint32_t>(n * group + k));
          for (size_t rows : {1, 2, 3, 4, 5, 8, 9, 13, 16}) {
            const Rows x(w.k, rows, static_cast<uint32_t>(rows));
            std::vector<float> want(rows * n);
            qs8_qc4w_gemm_scalar(w.packed.data(), w.k, n, group, rows, x.q.data(), w.k,
                                 x.scales.data(), x.sums.data(), want.data(), n);
            for (Isa isa : runnable_paths()) {
              const QC4Kernels set = qc4_kernel_sets().up_to(isa).kernels;
              std::vector<float> got(rows * n, -1.0f);
              set.gemm(w.packed.data(), w.k, n, group, rows, x.q.data(), w.k, x.scales.data(),
                       x.sums.data(), got.data(), n);
              EXPECT_TRUE(bitwise_equal(got, want))
                  << "gemm " << to_string(isa) << " group " << group << " n " << n << " k "
                  << k << " rows " << rows;
              std::vector<float> one(n, -1.0f);
              set.gemv(w.packed.data(), w.k, n, group, x.q.data(), x.scales.data(), x.sums.data(),
                       one.data());
              EXPECT_TRUE(bitwise_equal(one, std::vector<float>(want.begin(), want.begin() + n)))
                  << "gemv " << to_string(isa) << " group " << group << " n " << n << " k "
                  << k;
            }
            // The four-row tile alone (the eight-row one runs it for the rows past its eights;
            // the kernel bench runs it as the eight-row tile's peer).
#if defined(__x86_64__)
            if (cpu_runs(Isa::kAvx512Vnni)) {
              std::vector<float> got(rows * n, -1.0f);
              qs8_qc4w_gemm_4x32_avx512vnni(w.packed.data(), w.k, n, group, rows, x.q.data(),
                                            w.k, x.scales.data(), x.sums.data(), got.data(), n);
              EXPECT_TRUE(bitwise_equal(got, want))
                  << "gemm 4x32 group " << group << " n " << n << " k " << k << " rows " << rows;
              // The AVX-VNNI block in AVX-512 VL's encoding: the AVX-VNNI set's arithmetic, also
              // where AVX-VNNI itself is missing.
              std::vector<float> evex(rows * n, -1.0f);
              qs8_qc4w_gemm_8x16_vnni256_evex(w.packed.data(), w.k, n, group, rows, x.q.data(),
                                              w.k, x.scales.data(), x.sums.data(), evex.data(), n);
              EXPECT_TRUE(bitwise_equal(evex, want))
                  << "gemm vnni256 evex group " << group << " n " << n << " k " << k << " rows "
                  << rows;
              std::vector<float> one(n, -1.0f);
              qs8_qc4w_gemv_2x16_vnni256_evex(w.packed.data(), w.k, n, group, x.q.data(),
                                              x.scales.data(), x.sums.data(), one.data());
              EXPECT_TRUE(bitwise_equal(one, std::vector<float>(want.begin(), want.begin() + n)))
                  << "gemv vnni256 evex group " << group << " n " << n << " k " << k;
            }
#endif
          }
        }
      }
    }
  }
}

TEST(QS8QC4W, LesserPathsAreForcedAndTheProcessSetPassesItsProbe) {
  EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kScalar).kernels.gemv, &qs8_qc4w_gemv_scalar);
#if defined(__x86_64__)
  if (cpu_runs(Isa::kAvx2)) {
    EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kAvx2).kernels.gemv, &qs8_qc4w_gemv_2x16_avx2);
    // AVX-512 F without VNNI has no int4 set of its own: the best lesser one runs.
    EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kAvx512f).kernels.gemv,
              cpu_runs(Isa::kAvxVnni) ? &qs8_qc4w_gemv_2x16_avxvnni : &qs8_qc4w_gemv_2x16_avx2);
  }
  if (cpu_runs(Isa::kAvxVnni)) {
    EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kAvxVnni).kernels.gemm, &qs8_qc4w_gemm_8x16_avxvnni);
  }
  if (cpu_runs(Isa::kAvx512Vnni)) {
    EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kAvx512Vnni).kernels.gemm,
              &qs8_qc4w_gemm_8x32_avx512vnni);
  }
#elif defined(__aarch64__)
  EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kNeon).kernels.gemm, &qs8_qc4w_gemm_2x16_neon);
  if (cpu_runs(Isa::kNeonDot)) {
    EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kNeonDot).kernels.gemm, &qs8_qc4w_gemm_4x16_neondot);
  }
  if (cpu_runs(Isa::kNeonI8mm)) {
    EXPECT_EQ(qc4_kernel_sets().up_to(Isa::kNeonI8mm).kernels.gemm,
              &qs8_qc4w_gemm_4x16_neoni8mm);
  }
#endif
  const KernelSets<QC4Kernels>& sets = qc4_kernel_sets();
  EXPECT_EQ(sets.best_isa(), sets.up_to(runtime::kernels::isa_cap()).isa);
  EXPECT_TRUE(qc4_matches_reference(sets.best()));
}

TEST(QS8QC4W, FullyConnectedQuantizesEachRowOnItsOwn) {
  const Weight w(128, 40, 32, /*with_bias=*/true, 21);
  const size_t rows = 6;
  std::vector<float> x(rows * w.k);
  uint32_t seed = 99;
  for (float& v : x) v = static_cast<float>(step(&seed) % 2001) / 100.0f - 10.0f;
  std::vector<int8_t> q(rows * w.k);
  std::vector<float> scales(rows * w.k / kActBlock);
  std::vector<int32_t> sums(rows * w.k / kActBlock);
  const QS8Scratch scratch{q.data(), scales.data(), sums.data(), rows};
  std::vector<float> all(rows * w.n), one(w.n);
  ASSERT_TRUE(qs8_qc4w_fully_connected(qs8_kernel_sets().best(), qc4_kernel_sets().best(), w.packed.data(),
                                       w.packed.size(), w.k, w.n, 32, rows, x.data(), w.k,
                                       all.data(), w.n, scratch)
                  .ok());
  ASSERT_TRUE(qs8_qc4w_fully_connected(qs8_kernel_sets().best(), qc4_kernel_sets().best(), w.packed.data(),
                                       w.packed.size(), w.k, w.n, 32, 1, x.data() + 3 * w.k, w.k,
                                       one.data(), w.n, scratch)
                  .ok());
  EXPECT_EQ(0, std::memcmp(one.data(), all.data() + 3 * w.n, w.n * sizeof(float)));
}

TEST(QS8QC4W, BrokenPreconditionsAreErrorsNamingThem) {
  const Weight w(128, 20, 32, /*with_bias=*/false, 1);
  auto message = [](const runtime::Status& s) { return std::string(s.ok() ? "" : s.message()); };
  EXPECT_NE(message(check_qc4_kernel_args(128, 20, 48, w.packed.data(), w.packed.size()))
                .find("group size 48"),
            std::string::npos);
  EXPECT_NE(message(check_qc4_kernel_args(96, 20, 64, w.packed.data(), w.packed.size()))
                .find("not a multiple of the group size 64"),
            std::string::npos);
  EXPECT_NE(message(check_qc4_kernel_args(128, 20, 32, w.packed.data(), 100)).find("100 bytes"),
            std::string::npos);
  EXPECT_TRUE(check_qc4_kernel_args(128, 20, 32, w.packed.data(), w.packed.size()).ok());
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
