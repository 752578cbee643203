// float16 -> float32, exactly, for the scalar int4 kernel (the x86 kernels convert with F16C,
// which gives the same floats). Internal linkage, as qs8_scalar_ops.h.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QC4W_SCALAR_OPS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QC4W_SCALAR_OPS_H_

#include <cstdint>
#include <cstring>

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // infinity or NaN (quiet bit kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // A subnormal half is a normal float: shift the mantissa up to its leading one.
    exponent = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QC4W_SCALAR_OPS_H_
