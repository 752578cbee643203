// The argmax with AVX-512F: the largest value 32 scores a step (two running maxima, so that the
// maxima's latency is not the loop's), then the first lane equal to it, 16 at a time. Built with
// -mavx512f (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/argmax.h"
#include "edgeshare/runtime/kernels/portable/argmax_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {

size_t argmax_f32_avx512(size_t n, const float* x) {
  if (argmax_impl::first_is_nan(x)) return 0;
  // MAXPS returns its second operand when either is a NaN: max(score, running) keeps running.
  __m512 m0 = _mm512_set1_ps(x[0]), m1 = m0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
  }
  if (i + 16 <= n) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    i += 16;
  }
  if (i < n) {
    // The tail's missing lanes read as x[0], which is already in the maxima.
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
    m1 = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(x[0]), tail, x + i), m1);
  }
  const float largest = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  const __m512 target = _mm512_set1_ps(largest);
  for (i = 0; i + 16 <= n; i += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), target, _CMP_EQ_OQ);
    if (hit != 0) return i + static_cast<size_t>(__builtin_ctz(hit));
  }
  return argmax_impl::first_equal_from(i, n, x, largest);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
