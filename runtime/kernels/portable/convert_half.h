// The inner kernels of a half-precision KV cache's conversions (aten::_to_copy between Float and
// Half): a run of float32 values rounded to IEEE half as they are written to the cache, and back.
//
// Every set gives what half.h's scalar conversions give, bit for bit (round to nearest, ties to
// even; overflow to infinity), so the cache a program writes does not depend on the CPU. The one
// exception is a float NaN: every set gives a quiet half NaN of its sign, but only some keep the
// top bits of its payload (F16C does, half.h does not). One signature per direction, one
// implementation per instruction set (convert_half_<isa>.cc, each built with only its own
// instruction set enabled); the scalar one is the reference. The config picks the best set the CPU
// runs once per process; tests call every set the CPU can run.
//
//   const ConvertHalfKernels& k = convert_half_kernels();
//   k.to_half(n, floats, halves);
//   k.to_float(n, halves, floats);
//
// No allocation; reentrant; the buffers must not overlap.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_CONVERT_HALF_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_CONVERT_HALF_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

// x: n floats -> y: n IEEE half bits.
using FloatToHalf = void (*)(size_t n, const float* x, uint16_t* y);
// x: n IEEE half bits -> y: n floats.
using HalfToFloat = void (*)(size_t n, const uint16_t* x, float* y);

struct ConvertHalfKernels {
  FloatToHalf to_half;
  HalfToFloat to_float;
};

void float_to_half_scalar(size_t n, const float* x, uint16_t* y);
void half_to_float_scalar(size_t n, const uint16_t* x, float* y);
#if defined(__x86_64__)
void float_to_half_f16c(size_t n, const float* x, uint16_t* y);
void half_to_float_f16c(size_t n, const uint16_t* x, float* y);
void float_to_half_avx512(size_t n, const float* x, uint16_t* y);
void half_to_float_avx512(size_t n, const uint16_t* x, float* y);
#elif defined(__aarch64__)
void float_to_half_neon(size_t n, const float* x, uint16_t* y);
void half_to_float_neon(size_t n, const uint16_t* x, float* y);
#endif

// Every set this CPU runs, the reference (scalar) first (kernel_sets.h).
const kernels::KernelSets<ConvertHalfKernels>& convert_half_sets();

// The set the process runs: convert_half_sets().best().
const ConvertHalfKernels& convert_half_kernels();

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_CONVERT_HALF_H_
