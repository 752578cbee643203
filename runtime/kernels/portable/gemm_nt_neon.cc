// gemm_nt with NEON (aarch64's baseline): four outputs (panel) or input channels (dot) per vector,
// FMLA, halves widened with FCVTL and int8 weights with SXTL and SCVTF; tails go through a
// zero-filled vector on the stack (NEON has no masked loads), so nothing past them is read.

#include <arm_neon.h>

#include <cstring>

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt_impl.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct NeonOps {
  using V = float32x4_t;
  static constexpr size_t kWidth = 4;
  static constexpr size_t kRegisters = 32;
  static V zero() { return vdupq_n_f32(0.0f); }
  static V load(const float* p) { return vld1q_f32(p); }
  static V load_tail(const float* p, size_t count) {
    float lanes[kWidth] = {};
    std::memcpy(lanes, p, count * sizeof(float));
    return vld1q_f32(lanes);
  }
  static void store_tail(float* p, V v, size_t count) {
    float lanes[kWidth];
    vst1q_f32(lanes, v);
    std::memcpy(p, lanes, count * sizeof(float));
  }
  static V add(V x, V y) { return vaddq_f32(x, y); }
  static V mul(V x, V y) { return vmulq_f32(x, y); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V fma(V x, V y, V acc) { return vfmaq_f32(acc, x, y); }
  static V loadb(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static V loadb(const int8_t* p) {
    int32_t four;
    std::memcpy(&four, p, sizeof(four));
    const int8x8_t bytes = vreinterpret_s8_s32(vdup_n_s32(four));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(bytes))));
  }
  static V set1(float x) { return vdupq_n_f32(x); }
  static float reduce(V v) { return vaddvq_f32(v); }
};

}  // namespace

void gemm_nt_f32_neon(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  gemm_nt<NeonOps>(m, n, k, a, b, c);
}

void gemm_nt_f16_neon(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  gemm_nt<NeonOps>(m, n, k, a, b, c);
}

void gemm_nt_q8_neon(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                     const float* scales, float* c) {
  gemm_nt_q8<NeonOps>(m, n, k, a, b, scales, c);
}

void gemm_nn_f32_neon(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  gemm_nn<NeonOps>(m, n, k, a, b, c);
}

void gemm_nn_f16_neon(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  gemm_nn<NeonOps>(m, n, k, a, b, c);
}

void gemm_nn_q8_neon(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                     const float* scales, float* c) {
  gemm_nn_q8<NeonOps>(m, n, k, a, b, scales, c);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
