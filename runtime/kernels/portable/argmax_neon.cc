// The argmax with NEON: the largest value 8 scores a step (two running maxima), then the first
// index equal to it, 4 at a time. Built for aarch64, where NEON is always there.

#include <arm_neon.h>

#include "edgeshare/runtime/kernels/portable/argmax.h"

namespace edgeshare {
namespace runtime {
namespace portable {

size_t argmax_f32_neon(size_t n, const float* x) {
  // A NaN first score is the reference's answer; any other NaN is never its answer: a
  // compare-and-select keeps the running maximum when the score is a NaN (the compare is false).
  if (x[0] != x[0]) return 0;
  float32x4_t m0 = vdupq_n_f32(x[0]), m1 = m0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
    m0 = vbslq_f32(vcgtq_f32(a, m0), a, m0);
    m1 = vbslq_f32(vcgtq_f32(b, m1), b, m1);
  }
  if (i + 4 <= n) {
    const float32x4_t a = vld1q_f32(x + i);
    m0 = vbslq_f32(vcgtq_f32(a, m0), a, m0);
    i += 4;
  }
  m0 = vbslq_f32(vcgtq_f32(m1, m0), m1, m0);
  float largest = vmaxvq_f32(m0);
  for (; i < n; ++i) {
    if (x[i] > largest) largest = x[i];
  }
  const float32x4_t target = vdupq_n_f32(largest);
  for (i = 0; i + 4 <= n; i += 4) {
    const uint32x4_t hit = vceqq_f32(vld1q_f32(x + i), target);
    if (vmaxvq_u32(hit) != 0) {
      for (size_t j = 0;; ++j) {
        if (x[i + j] == largest) return i + j;
      }
    }
  }
  for (; i < n; ++i) {
    if (x[i] == largest) return i;
  }
  return 0;
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
