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
        // Four named vectors, not an array: GCC copied an array of them to the stack in 16-byte
        // halves and read each back whole, which no store can forward.
        const __m256 v0 = _mm256_loadu_ps(xb);
        const __m256 v1 = _mm256_loadu_ps(xb + 8);
        const __m256 v2 = _mm256_loadu_ps(xb + 16);
        const __m256 v3 = _mm256_loadu_ps(xb + 24);
        const __m256 m =
            _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                          _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        scales[r * blocks + b] = qs8_block_scale(_mm_cvtss_f32(m4), &inv);
        const __m256 vinv = _mm256_set1_ps(inv);
        const __m256i i0 =
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v0, vinv), lo), hi));
        const __m256i i1 =
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v1, vinv), lo), hi));
        const __m256i i2 =
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v2, vinv), lo), hi));
        const __m256i i3 =
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v3, vinv), lo), hi));
        // Packing interleaves the 128-bit lanes; the permute puts the 32 bytes back in order.
        const __m256i s16 = _mm256_packs_epi32(i0, i1);
        const __m256i s16b = _mm256_packs_epi32(i2, i3);
        const __m256i s8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(s16, s16b),
                                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), s8);
        // The sum from the registers the values were rounded in (each in [-127, 127]).
        const __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        sums[r * blocks + b] = _mm_cvtsi128_si32(s4);
      } else {
        float amax = 0.0f;
        for (size_t i = first; i < k; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
        scales[r * blocks + b] = qs8_block_scale(amax, &inv);
        for (size_t i = first; i < k; ++i) qr[i] = qs8_quantize_one(xr[i], inv);
        std::memset(qr + k, 0, first + kActBlock - k);
        sums[r * blocks + b] = qs8_block_sum(qb);
      }
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
