// The conversions with NEON (aarch64's baseline): four elements per instruction (FCVTN, FCVTL),
// rounding as the FPCR says, which Linux leaves at nearest even with NaNs propagated; the last
// n % 4 go through half.h, which gives the same bits.

#include <arm_neon.h>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/portable/convert_half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

void float_to_half_neon(size_t n, const float* x, uint16_t* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) y[i] = kernels::float_to_half(x[i]);
}

void half_to_float_neon(size_t n, const uint16_t* x, float* y) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
  for (; i < n; ++i) y[i] = kernels::half_to_float(x[i]);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
