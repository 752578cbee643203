// gemm_nt with AVX-512F: sixteen outputs (panel) or input channels (dot) per vector, tails masked.
// Built with -mavx512f (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Avx512Ops {
  using V = __m512;
  static constexpr size_t kWidth = 16;
  static __mmask16 mask(size_t count) { return static_cast<__mmask16>((1u << count) - 1u); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_tail(const float* p, size_t count) {
    return _mm512_maskz_loadu_ps(mask(count), p);
  }
  static void store_tail(float* p, V v, size_t count) {
    _mm512_mask_storeu_ps(p, mask(count), v);
  }
  static V add(V x, V y) { return _mm512_add_ps(x, y); }
  static V fma(V x, V y, V acc) { return _mm512_fmadd_ps(x, y, acc); }
  static V loadb(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V loadb(const int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V set1(float x) { return _mm512_set1_ps(x); }
  // Both halves by the zero-masking extract with every lane set: the same result as the plain
  // extract and the cast, but GCC 12 builds those two on a builtin given an undefined vector, which
  // -Wuninitialized flags wherever they are inlined.
  static float reduce(V v) {
    const __m512d d = _mm512_castps_pd(v);
    __m256 s = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0)),
                             _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1)));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
};

}  // namespace

void gemm_nt_f32_avx512(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  gemm_nt<Avx512Ops>(m, n, k, a, b, c);
}

void gemm_nt_f16_avx512(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  gemm_nt<Avx512Ops>(m, n, k, a, b, c);
}

void gemm_nt_q8_avx512(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                      const float* scales, float* c) {
  gemm_nt_q8<Avx512Ops>(m, n, k, a, b, scales, c);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
