// The argmax with AVX2: the largest value 16 scores a step (two running maxima, so that the
// maxima's latency is not the loop's), then the first lane equal to it, 8 at a time. Built with
// -mavx2 -mfma -mf16c (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/argmax.h"
#include "edgeshare/runtime/kernels/portable/argmax_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {

size_t argmax_f32_avx2(size_t n, const float* x) {
  if (argmax_impl::first_is_nan(x)) return 0;
  // MAXPS returns its second operand when either is a NaN: max(score, running) keeps running.
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  if (i + 8 <= n) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    i += 8;
  }
  m0 = _mm256_max_ps(m0, m1);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  const float largest = argmax_impl::largest_from(i, n, x, _mm_cvtss_f32(m));
  const __m256 target = _mm256_set1_ps(largest);
  for (i = 0; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
    if (hit != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hit)));
  }
  return argmax_impl::first_equal_from(i, n, x, largest);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
