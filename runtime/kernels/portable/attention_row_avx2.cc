// The attention row with AVX2 and FMA: eight lanes per step, half-precision keys and values
// converted with F16C. Built with -mavx2 -mfma -mf16c (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/attention_row_impl.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float load1(float x) { return x; }
inline float load1(uint16_t x) { return kernels::half_to_float(x); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct Avx2Ops {
  template <typename KV>
  static float dot(const float* q, const KV* k, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t d = 0;
    for (; d + 16 <= n; d += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k + d), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8(k + d + 8), a1);
    }
    for (; d + 8 <= n; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k + d), a0);
    float sum = hsum(_mm256_add_ps(a0, a1));
    for (; d < n; ++d) sum += q[d] * load1(k[d]);
    return sum;
  }
  template <typename KV>
  static void axpy(float* acc, float p, const KV* v, size_t n) {
    const __m256 vp = _mm256_set1_ps(p);
    size_t d = 0;
    for (; d + 8 <= n; d += 8) {
      _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(vp, load8(v + d), _mm256_loadu_ps(acc + d)));
    }
    for (; d < n; ++d) acc[d] += p * load1(v[d]);
  }
  static void scale(float* acc, float c, size_t n) {
    const __m256 vc = _mm256_set1_ps(c);
    size_t d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(vc, _mm256_loadu_ps(acc + d)));
    for (; d < n; ++d) acc[d] *= c;
  }
};

}  // namespace

void attention_row_f32_avx2(size_t count, size_t head_dim, const float* q, const float* keys,
                            const float* values, float scale, float softcap, float* out) {
  internal::attention_row<Avx2Ops>(count, head_dim, q, keys, values, scale, softcap, out);
}

void attention_row_f16_avx2(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                            const uint16_t* values, float scale, float softcap, float* out) {
  internal::attention_row<Avx2Ops>(count, head_dim, q, keys, values, scale, softcap, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
