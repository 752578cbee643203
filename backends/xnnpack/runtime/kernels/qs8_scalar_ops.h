// The quantizer's per-element step, shared by the scalar reference and the AVX2 quantizer's
// remainders. Internal linkage: the files including it are compiled for different instruction
// sets (see x86_common.h).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_SCALAR_OPS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_SCALAR_OPS_H_

#include <cmath>
#include <cstdint>

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// x * inv clamped to [-127, 127] with x86's max/min operand order (a NaN becomes -127), rounded
// to nearest even (the default rounding mode, as CVTPS2DQ rounds).
inline int8_t qs8_quantize_one(float x, float inv) {
  float v = x * inv;
  v = v > -127.0f ? v : -127.0f;
  v = v < 127.0f ? v : 127.0f;
  return static_cast<int8_t>(std::nearbyint(v));
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_SCALAR_OPS_H_
