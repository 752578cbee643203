// Per-row symmetric int8 quantization of activations, AVX2: the scalar reference's operations,
// 8 inputs at a time, the last few as the reference does them.

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_scalar_ops.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_quantize_avx2(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                       size_t q_stride, float* scales) {
  const size_t kp = qc8_padded_k(k);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f);
  const __m256 hi = _mm256_set1_ps(127.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    __m256 m = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= k; i += 8)
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xr + i)));
    float lanes[8];
    _mm256_storeu_ps(lanes, m);
    float amax = 0.0f;
    for (float lane : lanes) amax = std::fmax(amax, lane);
    for (; i < k; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
    scales[r] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= k; i += 8) {
      const __m256 v =
          _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv), lo), hi);
      const __m256i iv = _mm256_cvtps_epi32(v);
      const __m128i s16 =
          _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(qr + i), _mm_packs_epi16(s16, s16));
    }
    for (; i < k; ++i) qr[i] = qs8_quantize_one(xr[i], inv);
    std::memset(qr + k, 0, kp - k);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
