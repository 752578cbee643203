// Every argmax set the CPU runs against the scalar reference: the same index for random rows of
// every length up to a few vector widths and a vocabulary's, ties (the first wins), NaNs first,
// inside and everywhere, infinities, both zeros, and the largest score in every position of a row.

#include "edgeshare/runtime/kernels/portable/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Each set's answer on x, which the caller compares with the reference's.
void ExpectEverySetAgrees(const std::vector<float>& x, const char* what) {
  const size_t want = argmax_f32_scalar(x.size(), x.data());
  size_t count = 0;
  const auto* all = argmax_sets().all(&count);
  ASSERT_GE(count, 1u);
  for (size_t s = 0; s < count; ++s) {
    EXPECT_EQ(all[s].kernels.f32(x.size(), x.data()), want)
        << what << ", n=" << x.size() << ", set " << s << " of " << count;
  }
}

TEST(ArgmaxTest, reference_takes_the_first_largest_and_skips_nans_after_the_first) {
  EXPECT_EQ(argmax_f32_scalar(4, std::vector<float>{1, 3, 3, 2}.data()), 1u);
  EXPECT_EQ(argmax_f32_scalar(3, std::vector<float>{kNaN, 5, 6}.data()), 0u);
  EXPECT_EQ(argmax_f32_scalar(3, std::vector<float>{1, kNaN, 0}.data()), 0u);
  EXPECT_EQ(argmax_f32_scalar(3, std::vector<float>{-0.0f, 0.0f, -1}.data()), 0u);
  EXPECT_EQ(argmax_f32_scalar(1, std::vector<float>{-kInf}.data()), 0u);
}

TEST(ArgmaxTest, every_set_agrees_on_random_rows_of_every_length) {
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  for (size_t n = 1; n <= 200; ++n) {
    std::vector<float> x(n);
    for (float& v : x) v = logit(rng);
    ExpectEverySetAgrees(x, "random");
  }
  for (const size_t n : {size_t{32000}, size_t{49152}, size_t{151936}}) {
    std::vector<float> x(n);
    for (float& v : x) v = logit(rng);
    ExpectEverySetAgrees(x, "vocabulary");
  }
}

TEST(ArgmaxTest, every_set_finds_the_largest_in_every_position) {
  for (const size_t n : {size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{100}}) {
    for (size_t at = 0; at < n; ++at) {
      std::vector<float> x(n, -1.0f);
      x[at] = 2.0f;
      ExpectEverySetAgrees(x, "one largest");
      // A tie later than `at` never wins.
      if (at + 1 < n) {
        x[n - 1] = 2.0f;
        ExpectEverySetAgrees(x, "tie");
      }
    }
  }
}

TEST(ArgmaxTest, every_set_agrees_on_nans_infinities_and_zeros) {
  for (const size_t n : {size_t{1}, size_t{5}, size_t{16}, size_t{31}, size_t{64}, size_t{97}}) {
    std::vector<float> x(n, kNaN);
    ExpectEverySetAgrees(x, "all NaN");
    for (size_t at = 0; at < n; ++at) {
      std::vector<float> y(n, 1.0f);
      y[at] = kNaN;
      ExpectEverySetAgrees(y, "one NaN");
      y[at] = kInf;
      ExpectEverySetAgrees(y, "one +inf");
      std::vector<float> z(n, kNaN);
      z[at] = -kInf;
      ExpectEverySetAgrees(z, "-inf among NaNs");
      std::vector<float> w(n, -kInf);
      w[at] = at % 2 == 0 ? 0.0f : -0.0f;
      if (at + 1 < n) w[at + 1] = at % 2 == 0 ? -0.0f : 0.0f;
      ExpectEverySetAgrees(w, "both zeros");
    }
    ExpectEverySetAgrees(std::vector<float>(n, -kInf), "all -inf");
  }
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
