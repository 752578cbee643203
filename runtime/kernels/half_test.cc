#include "edgeshare/runtime/kernels/half.h"

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

namespace edgeshare {
namespace runtime {
namespace kernels {
namespace {

// The CPU's own conversions, the oracle of half.h: F16C on x86-64, FCVT (GCC's __fp16, which
// every aarch64 CPU converts in hardware) on aarch64.
#if defined(__x86_64__)
__attribute__((target("f16c"))) float cpu_half_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t cpu_float_to_half(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
bool cpu_converts() { return __builtin_cpu_supports("f16c"); }
#elif defined(__aarch64__)
float cpu_half_to_float(uint16_t h) {
  __fp16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}
uint16_t cpu_float_to_half(float f) {
  const __fp16 x = static_cast<__fp16>(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}
bool cpu_converts() { return true; }
#else
float cpu_half_to_float(uint16_t) { return 0.0f; }
uint16_t cpu_float_to_half(float) { return 0; }
bool cpu_converts() { return false; }
#endif

TEST(HalfTest, conversions_equal_the_cpus_instructions) {
  if (!cpu_converts()) GTEST_SKIP() << "no half conversions on this CPU to compare with";
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float want = cpu_half_to_float(static_cast<uint16_t>(h));
    const float got = half_to_float(static_cast<uint16_t>(h));
    // Bit for bit, NaNs too: a signalling NaN comes out quiet, as F16C makes it.
    ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << h;
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t b = bits(gen);
    // Half of the cases near the half range, where rounding and subnormals are decided.
    if (i % 2) b = (b & 0x81ffffffu) | ((0x60u + (b >> 25) % 0x30u) << 23);
    float f;
    std::memcpy(&f, &b, 4);
    const uint16_t want = cpu_float_to_half(f);
    const uint16_t got = float_to_half(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7c00u, 0x7c00u);
      ASSERT_NE(got & 0x3ffu, 0u);
    } else {
      ASSERT_EQ(got, want) << std::hex << b;
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare
