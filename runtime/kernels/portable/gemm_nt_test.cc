// gemm_nt and gemm_nn: every instruction set this CPU runs (the lesser ones forced too) against the
// scalar reference, over LoRA's skinny shapes (rank 8-64 on either side), decode (1-3 rows) and
// prefill rows, and odd sizes that leave every tail partial; no write lands outside c.

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include <cmath>
#include <random>
#include <vector>

#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Shape {
  size_t m, n, k;
};

constexpr float kGuard = 12345.0f;

void ExpectMatchesReference(const GemmNtKernels& set, const char* what, const Shape& s) {
  std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 7 + s.k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(s.m * s.k), b(s.n * s.k);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  std::vector<float> want(s.m * s.n), got(s.m * s.n + 16, kGuard);
  gemm_nt_f32_scalar(s.m, s.n, s.k, a.data(), b.data(), want.data());
  set.f32(s.m, s.n, s.k, a.data(), b.data(), got.data());
  for (size_t i = 0; i < s.m; ++i) {
    for (size_t j = 0; j < s.n; ++j) {
      float bound = 0.0f;  // Another summation order: an error relative to sum |a| |b|.
      for (size_t p = 0; p < s.k; ++p) bound += std::fabs(a[i * s.k + p] * b[j * s.k + p]);
      ASSERT_NEAR(got[i * s.n + j], want[i * s.n + j], 1e-6f + 4e-7f * bound)
          << what << " m" << s.m << " n" << s.n << " k" << s.k << " at " << i << "," << j;
    }
  }
  for (size_t t = s.m * s.n; t < got.size(); ++t) {
    ASSERT_EQ(got[t], kGuard) << what << " wrote past c (m" << s.m << " n" << s.n << ")";
  }
}

// The half and int8 weights: the same products over the widened weights (int8: times each row's
// scale), against the scalar reference of that weight type.
void ExpectWeightTypesMatchReference(const GemmNtKernels& set, const char* what, const Shape& s) {
  std::mt19937 rng(static_cast<unsigned>(s.m * 17 + s.n * 3 + s.k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<float> a(s.m * s.k), scales(s.n);
  std::vector<uint16_t> h(s.n * s.k);
  std::vector<int8_t> b8(s.n * s.k);
  for (float& v : a) v = dist(rng);
  for (uint16_t& v : h) v = kernels::float_to_half(dist(rng));
  for (int8_t& v : b8) v = static_cast<int8_t>(q(rng));
  for (float& v : scales) v = 0.01f * (1.0f + dist(rng));
  std::vector<float> want(s.m * s.n), got(s.m * s.n + 16, kGuard);
  for (int kind = 0; kind < 2; ++kind) {
    std::fill(got.begin(), got.end(), kGuard);
    if (kind == 0) {
      gemm_nt_f16_scalar(s.m, s.n, s.k, a.data(), h.data(), want.data());
      set.f16(s.m, s.n, s.k, a.data(), h.data(), got.data());
    } else {
      gemm_nt_q8_scalar(s.m, s.n, s.k, a.data(), b8.data(), scales.data(), want.data());
      set.q8(s.m, s.n, s.k, a.data(), b8.data(), scales.data(), got.data());
    }
    for (size_t i = 0; i < s.m; ++i) {
      for (size_t j = 0; j < s.n; ++j) {
        float bound = 0.0f;  // Another summation order: an error relative to sum |a| |b|.
        for (size_t p = 0; p < s.k; ++p) {
          const float w = kind == 0 ? kernels::half_to_float(h[j * s.k + p])
                                    : static_cast<float>(b8[j * s.k + p]) * scales[j];
          bound += std::fabs(a[i * s.k + p] * w);
        }
        ASSERT_NEAR(got[i * s.n + j], want[i * s.n + j], 1e-6f + 4e-7f * bound)
            << what << (kind == 0 ? " f16" : " q8") << " m" << s.m << " n" << s.n << " k" << s.k
            << " at " << i << "," << j;
      }
    }
    for (size_t t = s.m * s.n; t < got.size(); ++t) {
      ASSERT_EQ(got[t], kGuard) << what << " wrote past c (m" << s.m << " n" << s.n << ")";
    }
  }
}

TEST(GemmNt, every_set_matches_the_reference_on_lora_shapes) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  ASSERT_GE(count, 1u);
  EXPECT_EQ(sets[0].isa, kernels::Isa::kScalar);
  EXPECT_EQ(gemm_nt_kernels().f32, gemm_nt_sets().best().f32);
  const Shape shapes[] = {
      // x . A^T (rank on n) and h . B^T (rank on k), decode and prefill rows.
      {1, 16, 1024}, {1, 1024, 16}, {2, 8, 576}, {3, 576, 8}, {4, 64, 1024}, {7, 1024, 64},
      {64, 16, 2816}, {64, 2816, 16}, {33, 32, 576}, {33, 576, 32},
      // Odd sizes: partial vectors everywhere, a k over one panel chunk.
      {5, 37, 13}, {1, 1, 1}, {9, 3, 700}, {6, 17, 257}, {2, 5, 0}, {5, 5, 0}, {0, 4, 4},
  };
  for (size_t i = 0; i < count; ++i) {
    for (const Shape& s : shapes) {
      ExpectMatchesReference(sets[i].kernels, to_string(sets[i].isa), s);
      ExpectWeightTypesMatchReference(sets[i].kernels, to_string(sets[i].isa), s);
    }
  }
}

// The row-splitting contract of gemm_nt.h: pieces of at least kGemmNtSplitRows rows give the bits
// of one call over all of them, in every set.
TEST(GemmNt, rows_cut_into_pieces_of_the_split_size_give_the_same_bits) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  const Shape shapes[] = {{40, 576, 16}, {40, 16, 576}, {13, 37, 13}, {9, 64, 32}, {3, 576, 16}};
  for (size_t i = 0; i < count; ++i) {
    const GemmNtKernels& set = sets[i].kernels;
    for (const Shape& s : shapes) {
      std::mt19937 rng(static_cast<unsigned>(s.m + s.n + s.k));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> a(s.m * s.k), b(s.n * s.k);
      std::vector<uint16_t> h(s.n * s.k);
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      for (uint16_t& v : h) v = kernels::float_to_half(dist(rng));
      std::vector<float> whole(s.m * s.n), cut(s.m * s.n), whole16(s.m * s.n), cut16(s.m * s.n);
      set.f32(s.m, s.n, s.k, a.data(), b.data(), whole.data());
      set.f16(s.m, s.n, s.k, a.data(), h.data(), whole16.data());
      // Pieces of the split size, the last one longer: never one below it unless m is.
      size_t begin = 0;
      while (begin < s.m) {
        const size_t left = s.m - begin;
        const size_t rows = left < 2 * kGemmNtSplitRows ? left : kGemmNtSplitRows;
        set.f32(rows, s.n, s.k, a.data() + begin * s.k, b.data(), cut.data() + begin * s.n);
        set.f16(rows, s.n, s.k, a.data() + begin * s.k, h.data(), cut16.data() + begin * s.n);
        begin += rows;
      }
      EXPECT_EQ(std::memcmp(whole.data(), cut.data(), whole.size() * sizeof(float)), 0)
          << to_string(sets[i].isa) << " f32 m" << s.m << " n" << s.n << " k" << s.k;
      EXPECT_EQ(std::memcmp(whole16.data(), cut16.data(), whole16.size() * sizeof(float)), 0)
          << to_string(sets[i].isa) << " f16 m" << s.m << " n" << s.n << " k" << s.k;
    }
  }
}

// Outputs are independent too: n at once (blocks of four sharing their horizontal sums) give the
// bits of one output at a time, in every set.
TEST(GemmNt, outputs_at_once_give_the_bits_of_one_at_a_time) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  const Shape shapes[] = {{1, 576, 16}, {2, 192, 16}, {3, 37, 13}, {1, 16, 576}, {5, 9, 100}};
  for (size_t i = 0; i < count; ++i) {
    const GemmNtKernels& set = sets[i].kernels;
    for (const Shape& s : shapes) {
      std::mt19937 rng(static_cast<unsigned>(3 * s.m + s.n + s.k));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> a(s.m * s.k), b(s.n * s.k);
      std::vector<uint16_t> h(s.n * s.k);
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      for (uint16_t& v : h) v = kernels::float_to_half(dist(rng));
      std::vector<float> all(s.m * s.n), all16(s.m * s.n), one(s.m), one16(s.m);
      set.f32(s.m, s.n, s.k, a.data(), b.data(), all.data());
      set.f16(s.m, s.n, s.k, a.data(), h.data(), all16.data());
      for (size_t j = 0; j < s.n; ++j) {
        set.f32(s.m, 1, s.k, a.data(), b.data() + j * s.k, one.data());
        set.f16(s.m, 1, s.k, a.data(), h.data() + j * s.k, one16.data());
        for (size_t r = 0; r < s.m; ++r) {
          ASSERT_EQ(std::memcmp(&all[r * s.n + j], &one[r], sizeof(float)), 0)
              << to_string(sets[i].isa) << " f32 m" << s.m << " n" << s.n << " k" << s.k << " at "
              << r << "," << j;
          ASSERT_EQ(std::memcmp(&all16[r * s.n + j], &one16[r], sizeof(float)), 0)
              << to_string(sets[i].isa) << " f16 m" << s.m << " n" << s.n << " k" << s.k << " at "
              << r << "," << j;
        }
      }
    }
  }
}

TEST(GemmNt, k_zero_writes_zeros) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  for (size_t i = 0; i < count; ++i) {
    std::vector<float> c(6, kGuard);
    sets[i].kernels.f32(2, 3, 0, nullptr, nullptr, c.data());
    for (float v : c) EXPECT_EQ(v, 0.0f) << to_string(sets[i].isa);
  }
}

// gemm_nn, b [k, n]: every weight type against its reference, every set; then the contract that
// lets lora_bgmv cut rows anywhere: each output's bits are those of a call for its row and column
// alone.
TEST(GemmNn, every_set_matches_the_reference_over_a_transposed_weight) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  const Shape shapes[] = {
      // h . B over B [rank, out]: decode and prefill rows, the SmolLM2 and bench widths.
      {1, 576, 16},
      {1, 192, 16},
      {2, 1536, 16},
      {3, 576, 8},
      {4, 1024, 64},
      {8, 576, 16},
      {64, 2816, 16},
      {33, 576, 32},
      // Odd sizes: partial vectors and blocks everywhere.
      {5, 37, 13},
      {1, 1, 1},
      {9, 3, 70},
      {6, 17, 5},
      {1, 130, 3},
      {2, 5, 0},
      {0, 4, 4},
  };
  for (size_t i = 0; i < count; ++i) {
    const GemmNtKernels& set = sets[i].kernels;
    const char* what = to_string(sets[i].isa);
    for (const Shape& s : shapes) {
      std::mt19937 rng(static_cast<unsigned>(s.m * 29 + s.n * 5 + s.k));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::uniform_int_distribution<int> q(-127, 127);
      std::vector<float> a(s.m * s.k), b(s.k * s.n), scales(s.n);
      std::vector<uint16_t> h(s.k * s.n);
      std::vector<int8_t> b8(s.k * s.n);
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      for (uint16_t& v : h) v = kernels::float_to_half(dist(rng));
      for (int8_t& v : b8) v = static_cast<int8_t>(q(rng));
      for (float& v : scales) v = 0.01f * (1.0f + dist(rng));
      for (int kind = 0; kind < 3; ++kind) {
        std::vector<float> want(s.m * s.n), got(s.m * s.n + 16, kGuard);
        if (kind == 0) {
          gemm_nn_f32_scalar(s.m, s.n, s.k, a.data(), b.data(), want.data());
          set.nn_f32(s.m, s.n, s.k, a.data(), b.data(), got.data());
        } else if (kind == 1) {
          gemm_nn_f16_scalar(s.m, s.n, s.k, a.data(), h.data(), want.data());
          set.nn_f16(s.m, s.n, s.k, a.data(), h.data(), got.data());
        } else {
          gemm_nn_q8_scalar(s.m, s.n, s.k, a.data(), b8.data(), scales.data(), want.data());
          set.nn_q8(s.m, s.n, s.k, a.data(), b8.data(), scales.data(), got.data());
        }
        for (size_t r = 0; r < s.m; ++r) {
          for (size_t j = 0; j < s.n; ++j) {
            float bound = 0.0f;  // Another rounding (FMA): an error relative to sum |a| |b|.
            for (size_t p = 0; p < s.k; ++p) {
              const float w = kind == 0   ? b[p * s.n + j]
                              : kind == 1 ? kernels::half_to_float(h[p * s.n + j])
                                          : static_cast<float>(b8[p * s.n + j]) * scales[j];
              bound += std::fabs(a[r * s.k + p] * w);
            }
            ASSERT_NEAR(got[r * s.n + j], want[r * s.n + j], 1e-6f + 4e-7f * bound)
                << what << " kind " << kind << " m" << s.m << " n" << s.n << " k" << s.k << " at "
                << r << "," << j;
          }
        }
        for (size_t t = s.m * s.n; t < got.size(); ++t) {
          ASSERT_EQ(got[t], kGuard) << what << " wrote past c (m" << s.m << " n" << s.n << ")";
        }
      }
    }
  }
}

TEST(GemmNn, each_output_has_the_bits_of_its_row_and_column_alone) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  const Shape shapes[] = {{9, 576, 16}, {5, 150, 7}, {1, 1536, 16}};
  for (size_t i = 0; i < count; ++i) {
    const GemmNtKernels& set = sets[i].kernels;
    for (const Shape& s : shapes) {
      std::mt19937 rng(static_cast<unsigned>(7 * s.m + s.n + s.k));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> a(s.m * s.k);
      std::vector<uint16_t> h(s.k * s.n);
      for (float& v : a) v = dist(rng);
      for (uint16_t& v : h) v = kernels::float_to_half(dist(rng));
      std::vector<float> all(s.m * s.n);
      set.nn_f16(s.m, s.n, s.k, a.data(), h.data(), all.data());
      std::vector<uint16_t> column(s.k);
      for (size_t j = 0; j < s.n; ++j) {
        for (size_t p = 0; p < s.k; ++p) column[p] = h[p * s.n + j];
        for (size_t r = 0; r < s.m; ++r) {
          float one = 0.0f;
          set.nn_f16(1, 1, s.k, a.data() + r * s.k, column.data(), &one);
          ASSERT_EQ(std::memcmp(&all[r * s.n + j], &one, sizeof(float)), 0)
              << to_string(sets[i].isa) << " m" << s.m << " n" << s.n << " k" << s.k << " at " << r
              << "," << j;
        }
      }
    }
  }
}

TEST(GemmNn, k_zero_writes_zeros) {
  size_t count = 0;
  const auto* sets = gemm_nt_sets().all(&count);
  for (size_t i = 0; i < count; ++i) {
    std::vector<float> c(6, kGuard);
    sets[i].kernels.nn_f32(2, 3, 0, nullptr, nullptr, c.data());
    for (float v : c) EXPECT_EQ(v, 0.0f) << to_string(sets[i].isa);
  }
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
