// The qc4w row dequantization with NEON (aarch64's baseline): sixteen elements (eight bytes) per
// step, the nibbles interleaved to bytes in element order (ZIP1), sign-extended (shift left 4,
// arithmetic shift right 4), widened to int32 and converted (exact), times the group's scale.

#include <arm_neon.h>

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct NeonBlock {
  static constexpr size_t kElements = 16;
  static void run(const uint8_t* packed, float scale, float* out) {
    const uint8x8_t b = vld1_u8(packed);
    const uint8x8_t lo = vand_u8(b, vdup_n_u8(0x0F));
    const uint8x8_t hi = vshr_n_u8(b, 4);
    // Element 2j is byte j's low nibble, 2j + 1 its high one.
    const uint8x16_t nibbles = vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi));
    const int8x16_t q = vshrq_n_s8(vreinterpretq_s8_u8(vshlq_n_u8(nibbles, 4)), 4);
    const int16x8_t q0 = vmovl_s8(vget_low_s8(q));
    const int16x8_t q1 = vmovl_high_s8(q);
    const float32x4_t s = vdupq_n_f32(scale);
    vst1q_f32(out, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q0))), s));
    vst1q_f32(out + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q0)), s));
    vst1q_f32(out + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q1))), s));
    vst1q_f32(out + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q1)), s));
  }
};

}  // namespace

void dequantize_qc4w_row_neon(size_t width, size_t group, const uint8_t* packed,
                              const uint16_t* scales, float* out) {
  internal::dequantize_qc4w_row_groups<NeonBlock>(width, group, packed, scales, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
