// gemm_nt with AVX2 + FMA (F16C widens half weights): eight outputs (panel) or input channels
// (dot) per vector, tails masked. Built with -mavx2 -mfma -mf16c (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Avx2Ops {
  using V = __m256;
  static constexpr size_t kWidth = 8;
  static constexpr size_t kRegisters = 16;
  // Lane l is set when l < count (count <= 8).
  static __m256i mask(size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_tail(const float* p, size_t count) { return _mm256_maskload_ps(p, mask(count)); }
  static void store_tail(float* p, V v, size_t count) { _mm256_maskstore_ps(p, mask(count), v); }
  static V add(V x, V y) { return _mm256_add_ps(x, y); }
  static V mul(V x, V y) { return _mm256_mul_ps(x, y); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V x, V y, V acc) { return _mm256_fmadd_ps(x, y, acc); }
  static V loadb(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V loadb(const int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static float reduce(V v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
};

}  // namespace

void gemm_nt_f32_avx2(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  gemm_nt<Avx2Ops>(m, n, k, a, b, c);
}

void gemm_nt_f16_avx2(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  gemm_nt<Avx2Ops>(m, n, k, a, b, c);
}

void gemm_nt_q8_avx2(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                      const float* scales, float* c) {
  gemm_nt_q8<Avx2Ops>(m, n, k, a, b, scales, c);
}

void gemm_nn_f32_avx2(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  gemm_nn<Avx2Ops>(m, n, k, a, b, c);
}

void gemm_nn_f16_avx2(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  gemm_nn<Avx2Ops>(m, n, k, a, b, c);
}

void gemm_nn_q8_avx2(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                     const float* scales, float* c) {
  gemm_nn_q8<Avx2Ops>(m, n, k, a, b, scales, c);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
