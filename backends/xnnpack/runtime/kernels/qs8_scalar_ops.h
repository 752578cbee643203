// The quantizer's per-element and per-block steps, shared by the scalar reference and the vector
// quantizers. Internal linkage: the files including it are compiled for different instruction
// sets (see x86_common.h).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_SCALAR_OPS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_SCALAR_OPS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

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

// A block's scale and the factor its values are multiplied by (0 for an all-zero block, whose
// values are then all 0), from the block's max |x|.
inline float qs8_block_scale(float amax, float* inv) {
  *inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  return amax / 127.0f;
}

// The sum of a block's kActBlock quantized values (exact in int32).
inline int32_t qs8_block_sum(const int8_t* q) {
  int32_t sum = 0;
  for (size_t i = 0; i < kActBlock; ++i) sum += q[i];
  return sum;
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_SCALAR_OPS_H_
