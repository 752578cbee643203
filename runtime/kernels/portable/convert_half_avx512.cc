// The conversions with AVX-512F: sixteen elements per instruction, the tail masked (its lanes past
// n neither read nor written). Built with -mavx512f (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/convert_half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

inline __mmask16 tail_mask(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The zero-masking forms are the same instructions as _mm512_cvtph_ps, whose "undefined"
// pass-through operand GCC 12 reports as uninitialized.
inline __m512 widen(__m256i h) { return _mm512_maskz_cvtph_ps(0xffff, h); }

}  // namespace

void float_to_half_avx512(size_t n, const float* x, uint16_t* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), h);
  }
  if (i < n) {
    // AVX-512F has no masked 16-bit store: the tail's halves go through a small buffer.
    alignas(32) uint16_t tail[16];
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    _mm256_store_si256(reinterpret_cast<__m256i*>(tail),
                       _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    for (size_t j = 0; i + j < n; ++j) y[i + j] = tail[j];
  }
}

void half_to_float_avx512(size_t n, const uint16_t* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  }
  if (i < n) {
    alignas(32) uint16_t tail[16] = {};
    for (size_t j = 0; i + j < n; ++j) tail[j] = x[i + j];
    const __m512 v = widen(_mm256_load_si256(reinterpret_cast<const __m256i*>(tail)));
    _mm512_mask_storeu_ps(y + i, tail_mask(n - i), v);
  }
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
