// The root-mean-square norm, AVX2 with FMA: kernels.h's 16 lanes are two vectors, lanes 0-7 and
// 8-15, and a last partial block goes through a zero-padded copy (zeros add nothing to a sum of
// squares).

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_rmsnorm_avx2(size_t rows, size_t channels, const float* x, const float* w, float eps,
                      float* y) {
  const size_t full = channels / 16 * 16, rest = channels - full;
  for (size_t r = 0; r < rows; ++r, x += channels, y += channels) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (size_t c = 0; c < full; c += 16) {
      const __m256 a = _mm256_loadu_ps(x + c), b = _mm256_loadu_ps(x + c + 8);
      lo = _mm256_fmadd_ps(a, a, lo);
      hi = _mm256_fmadd_ps(b, b, hi);
    }
    if (rest != 0) {
      alignas(32) float block[16] = {};
      std::memcpy(block, x + full, rest * sizeof(float));
      const __m256 a = _mm256_load_ps(block), b = _mm256_load_ps(block + 8);
      lo = _mm256_fmadd_ps(a, a, lo);
      hi = _mm256_fmadd_ps(b, b, hi);
    }
    // The halves' folds in kernels.h's order.
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const float total = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
    const float scale = 1.0f / std::sqrt(total / static_cast<float>(channels) + eps);
    const __m256 s = _mm256_set1_ps(scale);
    size_t c = 0;
    for (; c + 8 <= channels; c += 8) {
      _mm256_storeu_ps(
          y + c, _mm256_mul_ps(_mm256_loadu_ps(w + c), _mm256_mul_ps(_mm256_loadu_ps(x + c), s)));
    }
    for (; c < channels; ++c) y[c] = w[c] * (x[c] * scale);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
