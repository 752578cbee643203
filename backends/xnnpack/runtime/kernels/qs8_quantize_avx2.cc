// Symmetric int8 quantization of activations in blocks of kActBlock inputs, AVX2: the scalar
// reference's operations, a whole block in four vectors of 8 (the lanes' maxima are exact, so
// their order does not matter), a last partial block as the reference does it.

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_scalar_ops.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_quantize_avx2(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                       size_t q_stride, float* scales, int32_t* sums) {
  const size_t blocks = act_blocks(k);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f);
  const __m256 hi = _mm256_set1_ps(127.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    for (size_t b = 0; b < blocks; ++b) {
      const size_t first = b * kActBlock;
      const float* xb = xr + first;
      int8_t* qb = qr + first;
      float inv;
      if (first + kActBlock <= k) {
        __m256 v[4];
        for (int h = 0; h < 4; ++h) v[h] = _mm256_loadu_ps(xb + 8 * h);
        const __m256 m = _mm256_max_ps(
            _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
            _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        scales[r * blocks + b] = qs8_block_scale(_mm_cvtss_f32(m4), &inv);
        const __m256 vinv = _mm256_set1_ps(inv);
        __m256i iv[4];
        for (int h = 0; h < 4; ++h) {
          iv[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[h], vinv), lo), hi));
        }
        // Packing interleaves the 128-bit lanes; the permute puts the 32 bytes back in order.
        const __m256i s16 = _mm256_packs_epi32(iv[0], iv[1]);
        const __m256i s16b = _mm256_packs_epi32(iv[2], iv[3]);
        const __m256i s8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(s16, s16b),
                                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), s8);
      } else {
        float amax = 0.0f;
        for (size_t i = first; i < k; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
        scales[r * blocks + b] = qs8_block_scale(amax, &inv);
        for (size_t i = first; i < k; ++i) qr[i] = qs8_quantize_one(xr[i], inv);
        std::memset(qr + k, 0, first + kActBlock - k);
      }
      sums[r * blocks + b] = qs8_block_sum(qb);
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
