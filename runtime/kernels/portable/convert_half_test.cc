// Every half-conversion set the CPU runs against the scalar reference (half.h), bit for bit: every
// half to float, floats at and between the halves' rounding points, specials, random bit patterns,
// and every length's tail.

#include "edgeshare/runtime/kernels/portable/convert_half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Floats that probe the rounding: each finite half, the midpoint to its neighbour (a tie) and the
// floats just either side of that midpoint; values past the largest half; zeros, infinities, NaNs
// (quiet and signalling, with payloads); subnormal halves; then random bit patterns.
std::vector<float> probes() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const float a = kernels::half_to_float(static_cast<uint16_t>(h | sign));
      const float b = kernels::half_to_float(static_cast<uint16_t>((h + 1) | sign));
      const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
      v.insert(v.end(), {a, mid, std::nextafter(mid, a), std::nextafter(mid, b)});
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  v.insert(v.end(), {65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, inf, -inf, 0.0f, -0.0f, 1e-30f,
                     from_bits(0x7fc00000u), from_bits(0x7f800001u), from_bits(0xffa12345u),
                     from_bits(0x7fbfffffu), std::numeric_limits<float>::denorm_min()});
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 16); ++i) v.push_back(from_bits(rng()));
  return v;
}

TEST(ConvertHalfTest, every_set_rounds_floats_to_half_as_the_reference) {
  size_t count = 0;
  const auto* all = convert_half_sets().all(&count);
  ASSERT_GE(count, 1u);
  EXPECT_EQ(all[0].isa, kernels::Isa::kScalar);
  EXPECT_EQ(convert_half_kernels().to_half, convert_half_sets().best().to_half);
  const std::vector<float> x = probes();
  std::vector<uint16_t> want(x.size());
  float_to_half_scalar(x.size(), x.data(), want.data());
  for (size_t k = 0; k < count; ++k) {
    std::vector<uint16_t> got(x.size() + 1, 0xabcd);
    all[k].kernels.to_half(x.size(), x.data(), got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        // A NaN's payload is not part of the contract: F16C keeps its top bits, half.h does not.
        ASSERT_TRUE((got[i] & 0x7c00u) == 0x7c00u && (got[i] & 0x3ffu) != 0u &&
                    (got[i] & 0x8000u) == (want[i] & 0x8000u))
            << to_string(all[k].isa) << ": float bits 0x" << std::hex << bits(x[i]) << " gave 0x"
            << got[i];
        continue;
      }
      ASSERT_EQ(got[i], want[i]) << to_string(all[k].isa) << ": float bits 0x" << std::hex
                                 << bits(x[i]);
    }
    EXPECT_EQ(got[x.size()], 0xabcd) << to_string(all[k].isa) << " wrote past its end";
  }
}

TEST(ConvertHalfTest, every_set_widens_every_half_as_the_reference) {
  size_t count = 0;
  const auto* all = convert_half_sets().all(&count);
  std::vector<uint16_t> h(1u << 16);
  for (uint32_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> want(h.size());
  half_to_float_scalar(h.size(), h.data(), want.data());
  for (size_t k = 0; k < count; ++k) {
    std::vector<float> got(h.size());
    all[k].kernels.to_float(h.size(), h.data(), got.data());
    for (size_t i = 0; i < h.size(); ++i) {
      ASSERT_EQ(bits(got[i]), bits(want[i]))
          << to_string(all[k].isa) << ": half 0x" << std::hex << i;
    }
  }
}

TEST(ConvertHalfTest, every_length_converts_its_elements_and_nothing_past_them) {
  size_t count = 0;
  const auto* all = convert_half_sets().all(&count);
  std::vector<float> x(40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 1.7f;
  for (size_t k = 0; k < count; ++k) {
    for (size_t n = 0; n <= 36; ++n) {
      for (size_t offset : {0u, 1u, 3u}) {
        std::vector<uint16_t> h(n + 4, 0xabcd), want(n);
        all[k].kernels.to_half(n, x.data() + offset, h.data());
        float_to_half_scalar(n, x.data() + offset, want.data());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(h[i], want[i]) << to_string(all[k].isa) << " n " << n;
        for (size_t i = n; i < h.size(); ++i)
          ASSERT_EQ(h[i], 0xabcd) << to_string(all[k].isa) << " n " << n;
        std::vector<float> back(n + 4, -3.0f);
        all[k].kernels.to_float(n, h.data(), back.data());
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(bits(back[i]), bits(kernels::half_to_float(want[i]))) << to_string(all[k].isa);
        }
        for (size_t i = n; i < back.size(); ++i) ASSERT_EQ(back[i], -3.0f) << to_string(all[k].isa);
      }
    }
  }
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
