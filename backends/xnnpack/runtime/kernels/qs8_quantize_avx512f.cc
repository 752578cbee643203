// Per-row symmetric int8 quantization of activations, AVX-512F: the scalar reference's operations,
// 16 inputs at a time (the lanes' maxima are exact, so their order does not matter). Zero-masking
// forms with every lane set stand for the plain intrinsics, whose GCC 12 definitions trip
// -Wuninitialized.

#include <immintrin.h>

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_quantize_avx512f(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                          size_t q_stride, float* scales) {
  const size_t kp = qc8_padded_k(k);
  const size_t tail = k % 16;
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << tail) - 1);
  const __m512 lo = _mm512_set1_ps(-127.0f);
  const __m512 hi = _mm512_set1_ps(127.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    __m512 m = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= k; i += 16) {
      m = _mm512_maskz_max_ps(0xFFFF, m, _mm512_abs_ps(_mm512_loadu_ps(xr + i)));
    }
    if (tail != 0) {
      m = _mm512_maskz_max_ps(0xFFFF, m, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask, xr + i)));
    }
    // Lane by lane (exact, so in any order); GCC 12's _mm512_reduce_max_ps trips -Wuninitialized.
    float lanes[16];
    _mm512_storeu_ps(lanes, m);
    float amax = 0.0f;
    for (float lane : lanes) amax = lane > amax ? lane : amax;
    scales[r] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (i = 0; i + 16 <= k; i += 16) {
      const __m512 v = clamp_avx512(_mm512_mul_ps(_mm512_loadu_ps(xr + i), inv), lo, hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + i),
                       _mm512_maskz_cvtepi32_epi8(0xFFFF, _mm512_maskz_cvtps_epi32(0xFFFF, v)));
    }
    if (tail != 0) {
      const __m512 v =
          clamp_avx512(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail_mask, xr + i), inv), lo, hi);
      _mm512_mask_cvtepi32_storeu_epi8(qr + i, tail_mask, _mm512_maskz_cvtps_epi32(0xFFFF, v));
    }
    std::memset(qr + k, 0, kp - k);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
