// The inner kernel of greedy sampling: the index of the largest of n float scores (a row of
// logits), the first such index when several are equal.
//
// Every set gives what the scalar reference gives, for any input: scores that are NaN are never
// chosen, except that a NaN first score is the answer (the reference's loop compares each score
// with the best so far, and nothing compares greater than a NaN); -0 and +0 are equal. So the
// token a greedy sampler picks does not depend on the CPU. One implementation per instruction set
// (argmax_<isa>.cc, each built with only its own instruction set enabled): the vector sets find the
// largest value in one pass, many lanes at a time, then its first index in a second pass that stops
// there, instead of the reference's one dependent compare per score. The config picks the best set
// the CPU runs once per process; tests call every set the CPU can run.
//
//   const size_t token = argmax_kernels().f32(vocab_size, logits);
//
// No allocation; reentrant; n must be at least 1.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_ARGMAX_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_ARGMAX_H_

#include <cstddef>

#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

// x: n >= 1 floats -> the index of the first largest.
using ArgmaxF32 = size_t (*)(size_t n, const float* x);

struct ArgmaxKernels {
  ArgmaxF32 f32;
};

size_t argmax_f32_scalar(size_t n, const float* x);
#if defined(__x86_64__)
size_t argmax_f32_avx2(size_t n, const float* x);
size_t argmax_f32_avx512(size_t n, const float* x);
#elif defined(__aarch64__)
size_t argmax_f32_neon(size_t n, const float* x);
#endif

// Every set this CPU runs, the reference (scalar) first (kernel_sets.h).
const kernels::KernelSets<ArgmaxKernels>& argmax_sets();

// The set the process runs: argmax_sets().best().
const ArgmaxKernels& argmax_kernels();

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_ARGMAX_H_
