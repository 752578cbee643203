// The qc4w row dequantization with AVX2: sixteen elements (eight bytes) per step, the nibbles
// spread to bytes in element order, sign-extended and widened to float. Built with -mavx2 (this
// file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/portable/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

void dequantize_qc4w_row_avx2(size_t width, size_t group, const uint8_t* packed,
                              const uint16_t* scales, float* out) {
  const __m128i low = _mm_set1_epi8(0x0F);
  // (n ^ 8) - 8 maps a nibble 0..15 to its two's-complement value -8..7.
  const __m128i eight = _mm_set1_epi8(8);
  for (size_t g = 0; g < width; g += group) {
    const __m256 s = _mm256_set1_ps(half_to_float(scales[g / group]));
    size_t j = g;
    for (; j + 16 <= g + group; j += 16) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j / 2));
      const __m128i lo = _mm_and_si128(b, low);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
      const __m128i q = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
      const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
      const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
      _mm256_storeu_ps(out + j, _mm256_mul_ps(f0, s));
      _mm256_storeu_ps(out + j + 8, _mm256_mul_ps(f1, s));
    }
    // A group that is not a multiple of 16 (the operator admits any even group).
    if (j < g + group) {
      const size_t rest = g + group - j;
      dequantize_qc4w_row_scalar(rest, rest, packed + j / 2, scales + g / group, out + j);
    }
  }
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
