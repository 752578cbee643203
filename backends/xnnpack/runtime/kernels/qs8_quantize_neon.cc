// Symmetric int8 quantization of activations in blocks of kActBlock inputs, NEON: the scalar
// reference's operations, a whole block in eight vectors of 4 (the lanes' maxima are exact, so
// their order does not matter), a last partial block as the reference does it. FMAXNM is fmax
// (a NaN loses), and the clamp is the reference's comparisons as selects, so a NaN product (a zero
// input times an infinite 127 / max of a subnormal block) becomes -127 here as there; FCVTNS
// rounds to nearest even as nearbyint does in the default rounding mode.

#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_scalar_ops.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_quantize_neon(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                       size_t q_stride, float* scales, int32_t* sums) {
  const size_t blocks = act_blocks(k);
  const float32x4_t lo = vdupq_n_f32(-127.0f);
  const float32x4_t hi = vdupq_n_f32(127.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    for (size_t b = 0; b < blocks; ++b) {
      const size_t first = b * kActBlock;
      const float* xb = xr + first;
      int8_t* qb = qr + first;
      float inv;
      if (first + kActBlock <= k) {
        float32x4_t v[8];
        for (int h = 0; h < 8; ++h) v[h] = vld1q_f32(xb + 4 * h);
        float32x4_t m = vabsq_f32(v[0]);
        for (int h = 1; h < 8; ++h) m = vmaxnmq_f32(m, vabsq_f32(v[h]));
        scales[r * blocks + b] = qs8_block_scale(vmaxnmvq_f32(m), &inv);
        const float32x4_t vinv = vdupq_n_f32(inv);
        int16x8_t halves[4];
        for (int h = 0; h < 4; ++h) {
          int32x4_t iv[2];
          for (int e = 0; e < 2; ++e) {
            float32x4_t p = vmulq_f32(v[2 * h + e], vinv);
            p = vbslq_f32(vcgtq_f32(p, lo), p, lo);
            p = vbslq_f32(vcltq_f32(p, hi), p, hi);
            iv[e] = vcvtnq_s32_f32(p);
          }
          halves[h] = vcombine_s16(vmovn_s32(iv[0]), vmovn_s32(iv[1]));
        }
        const int8x16_t q0 = vcombine_s8(vmovn_s16(halves[0]), vmovn_s16(halves[1]));
        const int8x16_t q1 = vcombine_s8(vmovn_s16(halves[2]), vmovn_s16(halves[3]));
        vst1q_s8(qb, q0);
        vst1q_s8(qb + 16, q1);
        // Each half's sum is at most 16 x 127 in magnitude: exact in SADDLV's 16 bits.
        sums[r * blocks + b] = int32_t{vaddlvq_s8(q0)} + int32_t{vaddlvq_s8(q1)};
      } else {
        float amax = 0.0f;
        for (size_t i = first; i < k; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
        scales[r * blocks + b] = qs8_block_scale(amax, &inv);
        for (size_t i = first; i < k; ++i) qr[i] = qs8_quantize_one(xr[i], inv);
        std::memset(qr + k, 0, first + kActBlock - k);
        sums[r * blocks + b] = qs8_block_sum(qb);
      }
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
