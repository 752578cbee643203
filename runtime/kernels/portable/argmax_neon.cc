// The argmax with NEON: the largest value 8 scores a step (two running maxima), then the first
// index equal to it, 4 at a time. Built for aarch64, where NEON is always there.

#include <arm_neon.h>

#include "edgeshare/runtime/kernels/portable/argmax.h"
#include "edgeshare/runtime/kernels/portable/argmax_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// The running maximum, or the score where it is greater: a NaN score compares false and is kept
// out.
inline float32x4_t keep_larger(float32x4_t score, float32x4_t running) {
  return vbslq_f32(vcgtq_f32(score, running), score, running);
}

}  // namespace

size_t argmax_f32_neon(size_t n, const float* x) {
  if (argmax_impl::first_is_nan(x)) return 0;
  float32x4_t m0 = vdupq_n_f32(x[0]), m1 = m0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    m0 = keep_larger(vld1q_f32(x + i), m0);
    m1 = keep_larger(vld1q_f32(x + i + 4), m1);
  }
  if (i + 4 <= n) {
    m0 = keep_larger(vld1q_f32(x + i), m0);
    i += 4;
  }
  const float largest = argmax_impl::largest_from(i, n, x, vmaxvq_f32(keep_larger(m1, m0)));
  const float32x4_t target = vdupq_n_f32(largest);
  for (i = 0; i + 4 <= n; i += 4) {
    if (vmaxvq_u32(vceqq_f32(vld1q_f32(x + i), target)) != 0) break;
  }
  return argmax_impl::first_equal_from(i, n, x, largest);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
