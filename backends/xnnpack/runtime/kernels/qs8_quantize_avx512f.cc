// Symmetric int8 quantization of activations in blocks of kActBlock inputs, AVX-512F: the scalar
// reference's operations, a block in two vectors of 16 (the lanes' maxima are exact, so their
// order does not matter), a partial last block through masked loads (its padding quantizes to
// 0). Zero-masking forms with every lane set stand for the plain intrinsics, whose GCC 12
// definitions trip -Wuninitialized.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_scalar_ops.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

namespace {

// The inputs [first, first + 16) of a row of k that exist.
__mmask16 lanes_below(size_t first, size_t k) {
  if (first >= k) return 0;
  return k - first >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << (k - first)) - 1);
}

// The sum of the 16 int32 lanes of v.
int32_t sum_lanes(__m512i v) {
  const __m256i v8 = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, v, 0),
                                      _mm512_maskz_extracti64x4_epi64(0xFF, v, 1));
  __m128i v4 = _mm_add_epi32(_mm256_castsi256_si128(v8), _mm256_extracti128_si256(v8, 1));
  v4 = _mm_add_epi32(v4, _mm_shuffle_epi32(v4, _MM_SHUFFLE(1, 0, 3, 2)));
  v4 = _mm_add_epi32(v4, _mm_shuffle_epi32(v4, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(v4);
}

}  // namespace

void qs8_quantize_avx512f(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                          size_t q_stride, float* scales, int32_t* sums) {
  const size_t blocks = act_blocks(k);
  const __m512 lo = _mm512_set1_ps(-127.0f);
  const __m512 hi = _mm512_set1_ps(127.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    for (size_t b = 0; b < blocks; ++b) {
      const size_t first = b * kActBlock;
      const __m512 v0 = _mm512_maskz_loadu_ps(lanes_below(first, k), xr + first);
      const __m512 v1 = _mm512_maskz_loadu_ps(lanes_below(first + 16, k), xr + first + 16);
      const __m512 m = _mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(v0), _mm512_abs_ps(v1));
      const __m512i mi = _mm512_castps_si512(m);
      const __m256 m8 =
          _mm256_max_ps(_mm256_castsi256_ps(_mm512_maskz_extracti64x4_epi64(0xFF, mi, 0)),
                        _mm256_castsi256_ps(_mm512_maskz_extracti64x4_epi64(0xFF, mi, 1)));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      float inv;
      scales[r * blocks + b] = qs8_block_scale(_mm_cvtss_f32(m4), &inv);
      const __m512 vinv = _mm512_set1_ps(inv);
      int8_t* qb = qr + first;
      const __m512i i0 =
          _mm512_maskz_cvtps_epi32(0xFFFF, clamp_avx512(_mm512_mul_ps(v0, vinv), lo, hi));
      const __m512i i1 =
          _mm512_maskz_cvtps_epi32(0xFFFF, clamp_avx512(_mm512_mul_ps(v1, vinv), lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_maskz_cvtepi32_epi8(0xFFFF, i0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_maskz_cvtepi32_epi8(0xFFFF, i1));
      // The sum from the registers: read back, the two 16-byte stores cannot forward to one
      // 32-byte load, and the load waited for them to reach the cache.
      sums[r * blocks + b] = sum_lanes(_mm512_add_epi32(i0, i1));
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
