// The qc4w row dequantization with AVX-512F: thirty-two elements (sixteen bytes) per step, the
// nibbles spread to bytes in element order, sign-extended and widened to float. Built with
// -mavx512f (this file only).

#include <immintrin.h>

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Avx512Block {
  // 16 int8 to float by the zero-masking forms with every lane set: the same instructions as
  // _mm512_cvtepi8_epi32 and _mm512_cvtepi32_ps, whose undefined pass-through operand GCC 12
  // reports as uninitialized wherever they are inlined.
  static __m512 widen(__m128i q) {
    return _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, q));
  }
  static constexpr size_t kElements = 32;
  static void run(const uint8_t* packed, float scale, float* out) {
    const __m128i low = _mm_set1_epi8(0x0F);
    // (n ^ 8) - 8 maps a nibble 0..15 to its two's-complement value -8..7.
    const __m128i eight = _mm_set1_epi8(8);
    const __m512 s = _mm512_set1_ps(scale);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
    const __m128i lo = _mm_and_si128(b, low);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    const __m128i q0 = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
    const __m128i q1 = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);
    _mm512_storeu_ps(out, _mm512_mul_ps(widen(q0), s));
    _mm512_storeu_ps(out + 16, _mm512_mul_ps(widen(q1), s));
  }
};

}  // namespace

void dequantize_qc4w_row_avx512(size_t width, size_t group, const uint8_t* packed,
                                const uint16_t* scales, float* out) {
  internal::dequantize_qc4w_row_groups<Avx512Block>(width, group, packed, scales, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
