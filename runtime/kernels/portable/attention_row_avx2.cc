// The attention row with AVX2 and FMA: eight lanes per step, half-precision keys and values
// converted with F16C; heads of 64 without a softcap in registers. Built with -mavx2 -mfma -mf16c
// (this file only).

#include <immintrin.h>

#include <cmath>
#include <limits>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/attention_row_impl.h"

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
    for (; d + 8 <= n; d += 8)
      _mm256_storeu_ps(acc + d, _mm256_mul_ps(vc, _mm256_loadu_ps(acc + d)));
    for (; d < n; ++d) acc[d] *= c;
  }
};

// e^x for -87.33654 <= x <= 0 (the scores less their maximum; below, about 1e-38 instead of 0,
// which no softmax weight notices): x = n ln2 + r with |r| <= ln2 / 2, Cephes' expf polynomial for
// e^r, times 2^n built in the exponent field (n is -126..0, a normal float). The AVX-512 row's
// exp16 on eight lanes.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
  x = _mm256_min_ps(x, _mm256_setzero_ps());
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// Lane j of the result is the sum of v[j]'s eight lanes.
inline __m256 hsum8(const __m256* v) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// The row for heads of 64 elements and no softcap, as the AVX-512 row's registers kernel: the
// accumulated values stay in eight registers, eight keys' dot products share one reduction, and
// eight exponentials are one polynomial instead of eight calls to expf. The query is read from
// memory (L1) by each product: with AVX2's sixteen registers it would push the sums out.
template <typename KV>
void attention_row_64(size_t count, const float* q, const KV* keys, const KV* values, float scale,
                      float* out) {
  constexpr size_t kDim = 64;
  constexpr size_t kBlock = internal::kAttentionKeyBlock;
  static_assert(kBlock % 8 == 0, "key blocks are whole groups of eight");
  __m256 acc[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
  alignas(32) float scores[kBlock];
  alignas(32) float probabilities[kBlock];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = count - base < kBlock ? count - base : kBlock;
    for (size_t group = 0; group < n; group += 8) {
      const size_t keys_here = n - group < 8 ? n - group : 8;
      __m256 sums[8];
#pragma GCC unroll 8
      for (size_t j = 0; j < 8; ++j) {
        if (j >= keys_here) {
          sums[j] = _mm256_setzero_ps();
          continue;
        }
        const KV* k = keys + (base + group + j) * kDim;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16 * c), load8(k + 16 * c), a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16 * c + 8), load8(k + 16 * c + 8), a1);
        }
        sums[j] = _mm256_add_ps(a0, a1);
      }
      _mm256_store_ps(scores + group, _mm256_mul_ps(hsum8(sums), _mm256_set1_ps(scale)));
    }
    float block_max = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < n; ++j) block_max = scores[j] > block_max ? scores[j] : block_max;
    if (block_max > running_max) {
      // exp(-inf) is 0: the first block zeroes nothing that matters (acc and sum are 0).
      const float correction = std::exp(running_max - block_max);
      running_sum *= correction;
      const __m256 vc = _mm256_set1_ps(correction);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_mul_ps(vc, acc[c]);
      running_max = block_max;
    }
    const __m256 vmax = _mm256_set1_ps(running_max);
    for (size_t group = 0; group < n; group += 8) {
      _mm256_store_ps(probabilities + group,
                      exp8(_mm256_sub_ps(_mm256_load_ps(scores + group), vmax)));
    }
    for (size_t j = 0; j < n; ++j) {
      const float p = probabilities[j];
      running_sum += p;
      const __m256 vp = _mm256_set1_ps(p);
      const KV* v = values + (base + j) * kDim;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(vp, load8(v + 8 * c), acc[c]);
    }
  }
  const __m256 inv = _mm256_set1_ps(1.0f / running_sum);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(acc[c], inv));
}

template <typename KV>
void attention_row_avx2(size_t count, size_t head_dim, const float* q, const KV* keys,
                        const KV* values, float scale, float softcap, float* out) {
  if (softcap == 0.0f && head_dim == 64) {
    attention_row_64(count, q, keys, values, scale, out);
  } else {
    internal::attention_row<Avx2Ops>(count, head_dim, q, keys, values, scale, softcap, out);
  }
}

}  // namespace

void attention_row_f32_avx2(size_t count, size_t head_dim, const float* q, const float* keys,
                            const float* values, float scale, float softcap, float* out) {
  attention_row_avx2(count, head_dim, q, keys, values, scale, softcap, out);
}

void attention_row_f16_avx2(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                            const uint16_t* values, float scale, float softcap, float* out) {
  attention_row_avx2(count, head_dim, q, keys, values, scale, softcap, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
