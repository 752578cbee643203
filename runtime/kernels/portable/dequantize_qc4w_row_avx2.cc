// The qc4w row dequantization with AVX2: sixteen elements (eight bytes) per step, the nibbles
// spread to bytes in element order, sign-extended and widened to float. Built with -mavx2 (this
// file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Avx2Block {
  static constexpr size_t kElements = 16;
  static void run(const uint8_t* packed, float scale, float* out) {
    const __m128i low = _mm_set1_epi8(0x0F);
    // (n ^ 8) - 8 maps a nibble 0..15 to its two's-complement value -8..7.
    const __m128i eight = _mm_set1_epi8(8);
    const __m256 s = _mm256_set1_ps(scale);
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed));
    const __m128i lo = _mm_and_si128(b, low);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    const __m128i q = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
    _mm256_storeu_ps(out, _mm256_mul_ps(f0, s));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(f1, s));
  }
};

}  // namespace

void dequantize_qc4w_row_avx2(size_t width, size_t group, const uint8_t* packed,
                              const uint16_t* scales, float* out) {
  internal::dequantize_qc4w_row_groups<Avx2Block>(width, group, packed, scales, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
