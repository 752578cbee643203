// The attention row with AVX-512F: sixteen lanes per step, half-precision keys and values
// converted on load, the tail of a row masked. Built with -mavx512f (this file only).

#include <immintrin.h>

#include <cmath>
#include <limits>

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

// e^x within an ulp of expf for x <= 0 (the scores less their maximum): x = n ln2 + r with
// |r| <= ln2 / 2, Cephes' expf polynomial for e^r, scaled by 2^n. Below -87.3 it gives about
// 1e-38 instead of 0, which no softmax weight notices.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.37626f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// The transposed form of hsum over sixteen vectors: lane j of the result is hsum(v[j]), the same
// additions in the same pairs (lanes i and i^8, then i^4, i^2, i^1), so the same bits.
inline __m512 hsum16(const __m512* v) {
  __m512 c[8], e[4], g[2];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    const __m512 a = v[2 * m], b = v[2 * m + 1];
    c[m] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xffff, a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_maskz_shuffle_f32x4(0xffff, a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int n = 0; n < 4; ++n) {
    const __m512 a = c[2 * n], b = c[2 * n + 1];
    e[n] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xffff, a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_maskz_shuffle_f32x4(0xffff, a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 2
  for (int p = 0; p < 2; ++p) {
    const __m512 a = e[2 * p], b = e[2 * p + 1];
    g[p] = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xffff, a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_maskz_shuffle_ps(0xffff, a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 r =
      _mm512_add_ps(_mm512_maskz_shuffle_ps(0xffff, g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_maskz_shuffle_ps(0xffff, g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane 4b + t holds key b + 4t.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_maskz_permutexvar_ps(0xffff, order, r);
}

// The row for heads of 32 * kPairs elements and no softcap: the query and the accumulated values
// stay in registers, sixteen keys' dot products share one reduction (with Avx512Ops::dot's
// additions, so the same scores), and sixteen exponentials are one polynomial (exp16, within an
// ulp of expf) instead of sixteen calls: the scalar expf was most of a decode row's time.
template <size_t kPairs, typename KV>
void attention_row_registers(size_t count, const float* q, const KV* keys, const KV* values,
                             float scale, float* out) {
  constexpr size_t kDim = 32 * kPairs;
  constexpr size_t kBlock = internal::kAttentionKeyBlock;
  static_assert(kBlock % 16 == 0, "key blocks are whole groups of sixteen");
  __m512 qv[2 * kPairs], acc[2 * kPairs];
#pragma GCC unroll 8
  for (size_t c = 0; c < 2 * kPairs; ++c) {
    qv[c] = _mm512_loadu_ps(q + 16 * c);
    acc[c] = _mm512_setzero_ps();
  }
  alignas(64) float scores[kBlock];
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = count - base < kBlock ? count - base : kBlock;
    for (size_t group = 0; group < n; group += 16) {
      const size_t keys_here = n - group < 16 ? n - group : 16;
      __m512 sums[16];
#pragma GCC unroll 16
      for (size_t j = 0; j < 16; ++j) {
        if (j >= keys_here) {
          sums[j] = _mm512_setzero_ps();
          continue;
        }
        const KV* k = keys + (base + group + j) * kDim;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (size_t c = 0; c < kPairs; ++c) {
          a0 = _mm512_fmadd_ps(qv[2 * c], load16(k + 32 * c), a0);
          a1 = _mm512_fmadd_ps(qv[2 * c + 1], load16(k + 32 * c + 16), a1);
        }
        sums[j] = _mm512_add_ps(a0, a1);
      }
      _mm512_store_ps(scores + group, _mm512_mul_ps(hsum16(sums), _mm512_set1_ps(scale)));
    }
    float block_max = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < n; ++j) block_max = scores[j] > block_max ? scores[j] : block_max;
    if (block_max > running_max) {
      const float correction = std::exp(running_max - block_max);
      running_sum *= correction;
      const __m512 vc = _mm512_set1_ps(correction);
#pragma GCC unroll 8
      for (size_t c = 0; c < 2 * kPairs; ++c) acc[c] = _mm512_mul_ps(vc, acc[c]);
      running_max = block_max;
    }
    alignas(64) float probabilities[kBlock];
    const __m512 vmax = _mm512_set1_ps(running_max);
    for (size_t group = 0; group < n; group += 16) {
      _mm512_store_ps(probabilities + group,
                      exp16(_mm512_sub_ps(_mm512_load_ps(scores + group), vmax)));
    }
    for (size_t j = 0; j < n; ++j) {
      const float p = probabilities[j];
      running_sum += p;
      const __m512 vp = _mm512_set1_ps(p);
      const KV* v = values + (base + j) * kDim;
#pragma GCC unroll 8
      for (size_t c = 0; c < 2 * kPairs; ++c)
        acc[c] = _mm512_fmadd_ps(vp, load16(v + 16 * c), acc[c]);
    }
  }
  const float inv = 1.0f / running_sum;
  alignas(64) float row[kDim];
#pragma GCC unroll 8
  for (size_t c = 0; c < 2 * kPairs; ++c) _mm512_store_ps(row + 16 * c, acc[c]);
  for (size_t d = 0; d < kDim; ++d) out[d] = row[d] * inv;
}

template <typename KV>
void attention_row_avx512(size_t count, size_t head_dim, const float* q, const KV* keys,
                          const KV* values, float scale, float softcap, float* out) {
  if (softcap == 0.0f && head_dim == 64) {
    attention_row_registers<2>(count, q, keys, values, scale, out);
  } else if (softcap == 0.0f && head_dim == 128) {
    attention_row_registers<4>(count, q, keys, values, scale, out);
  } else {
    internal::attention_row<Avx512Ops>(count, head_dim, q, keys, values, scale, softcap, out);
  }
}

}  // namespace

void attention_row_f32_avx512(size_t count, size_t head_dim, const float* q, const float* keys,
                              const float* values, float scale, float softcap, float* out) {
  attention_row_avx512(count, head_dim, q, keys, values, scale, softcap, out);
}

void attention_row_f16_avx512(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                              const uint16_t* values, float scale, float softcap, float* out) {
  attention_row_avx512(count, head_dim, q, keys, values, scale, softcap, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
