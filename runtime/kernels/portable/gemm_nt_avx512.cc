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
  static constexpr size_t kRegisters = 32;
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
  static V mul(V x, V y) { return _mm512_mul_ps(x, y); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
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
  // reduce's additions for four vectors at once. reduce adds lanes i and i + 8, then i and i + 4,
  // then i and i + 2, then 0 and 1: here the 128-bit blocks of two vectors are paired by one
  // shuffle each (blocks 0+2 and 1+3 of each), then blocks 0+1 of all four, then the lanes within
  // each block, so every sum is the same additions of the same values as reduce's.
  static void reduce4(const V* v, float* out) {
    const V ab = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44),   // a0 a1 b0 b1
                               _mm512_shuffle_f32x4(v[0], v[1], 0xEE));  // a2 a3 b2 b3
    const V cd = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44),
                               _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
    // Blocks: a, b, c, d, each the four-lane partial sum reduce reaches after its second step.
    V x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88),   // ab0 ab2 cd0 cd2
                        _mm512_shuffle_f32x4(ab, cd, 0xDD));  // ab1 ab3 cd1 cd3
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xEE));         // lanes 0, 1: x0 + x2, x1 + x3
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x55));         // lane 0: (x0 + x2) + (x1 + x3)
    const __m512i firsts = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, x)));
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

void gemm_nn_f32_avx512(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  gemm_nn<Avx512Ops>(m, n, k, a, b, c);
}

void gemm_nn_f16_avx512(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  gemm_nn<Avx512Ops>(m, n, k, a, b, c);
}

void gemm_nn_q8_avx512(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                       const float* scales, float* c) {
  gemm_nn_q8<Avx512Ops>(m, n, k, a, b, scales, c);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
