// IEEE half to float, exactly (every half is a float), as F16C's VCVTPH2PS widens it (a signaling
// NaN comes out quiet). Internal linkage: the files including it are compiled for different
// instruction sets (see x86_common.h).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F16_SCALAR_OPS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F16_SCALAR_OPS_H_

#include <cstdint>
#include <cstring>

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    // Infinity, or a NaN with its payload and the quiet bit set.
    bits = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else {
    // Zero or a subnormal: mantissa x 2^-24 is exact in a float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &magnitude, sizeof(bits));
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F16_SCALAR_OPS_H_
