// The root-mean-square norm, AVX-512: the 16 lanes of kernels.h's sum are one vector's, and the
// last partial vector is read and written under a mask (zeros add nothing to a sum of squares).

#include <immintrin.h>

#include <cmath>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_rmsnorm_avx512f(size_t rows, size_t channels, const float* x, const float* w, float eps,
                         float* y) {
  const size_t full = channels / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (channels - full)) - 1);
  for (size_t r = 0; r < rows; ++r, x += channels, y += channels) {
    __m512 sum = _mm512_setzero_ps();
    for (size_t c = 0; c < full; c += 16) {
      const __m512 v = _mm512_loadu_ps(x + c);
      sum = _mm512_fmadd_ps(v, v, sum);
    }
    if (tail != 0) {
      const __m512 v = _mm512_maskz_loadu_ps(tail, x + full);
      sum = _mm512_fmadd_ps(v, v, sum);
    }
    // The halves' folds in kernels.h's order.
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(sum),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const float total = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
    const float scale = 1.0f / std::sqrt(total / static_cast<float>(channels) + eps);
    const __m512 s = _mm512_set1_ps(scale);
    for (size_t c = 0; c < full; c += 16) {
      _mm512_storeu_ps(
          y + c, _mm512_mul_ps(_mm512_loadu_ps(w + c), _mm512_mul_ps(_mm512_loadu_ps(x + c), s)));
    }
    if (tail != 0) {
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, w + full),
                                     _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + full), s));
      _mm512_mask_storeu_ps(y + full, tail, v);
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
