// The root-mean-square norm, NEON: kernels.h's 16 lanes are four vectors of four, and a last
// partial block goes through a zero-padded copy (zeros add nothing to a sum of squares).

#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_rmsnorm_neon(size_t rows, size_t channels, const float* x, const float* w, float eps,
                      float* y) {
  const size_t full = channels / 16 * 16, rest = channels - full;
  for (size_t r = 0; r < rows; ++r, x += channels, y += channels) {
    float32x4_t l0 = vdupq_n_f32(0.0f), l1 = l0, l2 = l0, l3 = l0;
    auto add_block = [&](const float* p) {
      const float32x4_t a = vld1q_f32(p), b = vld1q_f32(p + 4);
      const float32x4_t c = vld1q_f32(p + 8), d = vld1q_f32(p + 12);
      l0 = vfmaq_f32(l0, a, a);
      l1 = vfmaq_f32(l1, b, b);
      l2 = vfmaq_f32(l2, c, c);
      l3 = vfmaq_f32(l3, d, d);
    };
    for (size_t c = 0; c < full; c += 16) add_block(x + c);
    if (rest != 0) {
      float block[16] = {};
      std::memcpy(block, x + full, rest * sizeof(float));
      add_block(block);
    }
    // The halves' folds in kernels.h's order: lanes 0-7 and 8-15, then 0-3 and 4-7, then pairs.
    const float32x4_t s4 = vaddq_f32(vaddq_f32(l0, l2), vaddq_f32(l1, l3));
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    const float total = vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
    const float scale = 1.0f / std::sqrt(total / static_cast<float>(channels) + eps);
    const float32x4_t s = vdupq_n_f32(scale);
    size_t c = 0;
    for (; c + 4 <= channels; c += 4) {
      vst1q_f32(y + c, vmulq_f32(vld1q_f32(w + c), vmulq_f32(vld1q_f32(x + c), s)));
    }
    for (; c < channels; ++c) y[c] = w[c] * (x[c] * scale);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
