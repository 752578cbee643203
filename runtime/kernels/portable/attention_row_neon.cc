// The attention row with NEON (aarch64's baseline): four lanes per step, two FMLA chains in the
// dot, half-precision keys and values widened with FCVTL (exact). Like the x86 sets it sums in
// another order than the reference, so it matches it within float rounding, not bit for bit.

#include <arm_neon.h>

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/attention_row_impl.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

inline float32x4_t load4(const float* p) { return vld1q_f32(p); }
inline float32x4_t load4(const uint16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
inline float load1(float x) { return x; }
inline float load1(uint16_t x) { return kernels::half_to_float(x); }

struct NeonOps {
  template <typename KV>
  static float dot(const float* q, const KV* k, size_t n) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
    size_t d = 0;
    for (; d + 8 <= n; d += 8) {
      a0 = vfmaq_f32(a0, vld1q_f32(q + d), load4(k + d));
      a1 = vfmaq_f32(a1, vld1q_f32(q + d + 4), load4(k + d + 4));
    }
    for (; d + 4 <= n; d += 4) a0 = vfmaq_f32(a0, vld1q_f32(q + d), load4(k + d));
    float sum = vaddvq_f32(vaddq_f32(a0, a1));
    for (; d < n; ++d) sum += q[d] * load1(k[d]);
    return sum;
  }
  template <typename KV>
  static void axpy(float* acc, float p, const KV* v, size_t n) {
    const float32x4_t vp = vdupq_n_f32(p);
    size_t d = 0;
    for (; d + 4 <= n; d += 4) vst1q_f32(acc + d, vfmaq_f32(vld1q_f32(acc + d), vp, load4(v + d)));
    for (; d < n; ++d) acc[d] += p * load1(v[d]);
  }
  static void scale(float* acc, float c, size_t n) {
    const float32x4_t vc = vdupq_n_f32(c);
    size_t d = 0;
    for (; d + 4 <= n; d += 4) vst1q_f32(acc + d, vmulq_f32(vc, vld1q_f32(acc + d)));
    for (; d < n; ++d) acc[d] *= c;
  }
};

}  // namespace

void attention_row_f32_neon(size_t count, size_t head_dim, const float* q, const float* keys,
                            const float* values, float scale, float softcap, float* out) {
  internal::attention_row<NeonOps>(count, head_dim, q, keys, values, scale, softcap, out);
}

void attention_row_f16_neon(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                            const uint16_t* values, float scale, float softcap, float* out) {
  internal::attention_row<NeonOps>(count, head_dim, q, keys, values, scale, softcap, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
