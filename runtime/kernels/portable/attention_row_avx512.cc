// The attention row with AVX-512F: sixteen lanes per step, half-precision keys and values
// converted on load, the tail of a row masked. Built with -mavx512f (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/attention_row_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

inline __mmask16 tail_mask(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The zero-masking forms below are the same instructions as _mm512_cvtph_ps, the lane shuffle and
// the low lanes' cast, whose "undefined" pass-through operand GCC 12 reports as uninitialized.
inline __m512 half16(__m256i h) { return _mm512_maskz_cvtph_ps(0xffff, h); }

inline float hsum(__m512 v) {
  __m512 s = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xffff, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm512_add_ps(s, _mm512_maskz_shuffle_f32x4(0xffff, s, s, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 x = _mm512_maskz_extractf32x4_ps(0xF, s, 0);
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return half16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// The last `rest` (< 16) elements of a row, zeros after them. AVX-512F has no masked 16-bit load,
// so half elements go through a small zeroed buffer.
inline __m512 load16_tail(const float* p, size_t rest) {
  return _mm512_maskz_loadu_ps(tail_mask(rest), p);
}
inline __m512 load16_tail(const uint16_t* p, size_t rest) {
  alignas(32) uint16_t tail[16] = {};
  for (size_t i = 0; i < rest; ++i) tail[i] = p[i];
  return half16(_mm256_load_si256(reinterpret_cast<const __m256i*>(tail)));
}

struct Avx512Ops {
  template <typename KV>
  static float dot(const float* q, const KV* k, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    size_t d = 0;
    for (; d + 32 <= n; d += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16(k + d), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d + 16), load16(k + d + 16), a1);
    }
    for (; d + 16 <= n; d += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16(k + d), a0);
    if (d < n) {
      const __mmask16 m = tail_mask(n - d);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), load16_tail(k + d, n - d), a1);
    }
    return hsum(_mm512_add_ps(a0, a1));
  }
  template <typename KV>
  static void axpy(float* acc, float p, const KV* v, size_t n) {
    const __m512 vp = _mm512_set1_ps(p);
    size_t d = 0;
    for (; d + 16 <= n; d += 16) {
      _mm512_storeu_ps(acc + d, _mm512_fmadd_ps(vp, load16(v + d), _mm512_loadu_ps(acc + d)));
    }
    if (d < n) {
      const __mmask16 m = tail_mask(n - d);
      _mm512_mask_storeu_ps(
          acc + d, m,
          _mm512_fmadd_ps(vp, load16_tail(v + d, n - d), _mm512_maskz_loadu_ps(m, acc + d)));
    }
  }
  static void scale(float* acc, float c, size_t n) {
    const __m512 vc = _mm512_set1_ps(c);
    size_t d = 0;
    for (; d + 16 <= n; d += 16)
      _mm512_storeu_ps(acc + d, _mm512_mul_ps(vc, _mm512_loadu_ps(acc + d)));
    if (d < n) {
      const __mmask16 m = tail_mask(n - d);
      _mm512_mask_storeu_ps(acc + d, m, _mm512_mul_ps(vc, _mm512_maskz_loadu_ps(m, acc + d)));
    }
  }
};

}  // namespace

void attention_row_f32_avx512(size_t count, size_t head_dim, const float* q, const float* keys,
                              const float* values, float scale, float softcap, float* out) {
  internal::attention_row<Avx512Ops>(count, head_dim, q, keys, values, scale, softcap, out);
}

void attention_row_f16_avx512(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                              const uint16_t* values, float scale, float softcap, float* out) {
  internal::attention_row<Avx512Ops>(count, head_dim, q, keys, values, scale, softcap, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
