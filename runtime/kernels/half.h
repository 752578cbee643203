// IEEE 754 half precision <-> float32, the one conversion every kernel's scalar code uses (the
// portable kernels' half KV cache, the delegate's f16 weights and int4 scales). Both give what
// F16C's VCVTPH2PS / VCVTPS2PH give, so a scalar reference and a vector kernel agree bit for bit:
// every half is a float exactly (a signalling NaN comes out quiet, its payload kept), and float ->
// half rounds to nearest, ties to even, as torch's .to(torch.float16) does (overflow to infinity,
// NaN stays NaN).
//
// Internal linkage: files compiled for different instruction sets include this, and an inline
// function the linker could merge might come from a file built with AVX-512 enabled.

#ifndef EDGESHARE_RUNTIME_KERNELS_HALF_H_
#define EDGESHARE_RUNTIME_KERNELS_HALF_H_

#include <cstdint>
#include <cstring>

namespace edgeshare {
namespace runtime {
namespace kernels {
namespace {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    // Infinity, or a NaN with its payload and the quiet bit set.
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // A subnormal half is a normal float: shift the mantissa up to its leading one.
    uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // infinity or NaN (a NaN keeps a mantissa bit)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Subnormal or zero half: round abs / 2^-24 to an integer, ties to even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // the half is mantissa * 2^(exponent - 126) units
    uint32_t value = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  // Normal half: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t value = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (value & 1u))) ++value;
  return static_cast<uint16_t>(sign | value);
}

}  // namespace
}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_HALF_H_
