// The conversions with F16C (part of the AVX2 set's x86-64-v3): eight elements per instruction,
// VCVTPS2PH rounding to nearest even; the last n % 8 go through half.h, which gives the same bits.
// Built with -mavx2 -mfma -mf16c (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/portable/convert_half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

void float_to_half_f16c(size_t n, const float* x, uint16_t* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = kernels::float_to_half(x[i]);
}

void half_to_float_f16c(size_t n, const uint16_t* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) y[i] = kernels::half_to_float(x[i]);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
