// Which argmax runs: the best set this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/kernel_sets.h"
#include "edgeshare/runtime/kernels/portable/argmax.h"

namespace edgeshare {
namespace runtime {
namespace portable {

using kernels::Isa;
using kernels::KernelSets;

const KernelSets<ArgmaxKernels>& argmax_sets() {
  static const KernelSets<ArgmaxKernels> s({
    {{argmax_f32_scalar}, Isa::kScalar},
#if defined(__x86_64__)
        {{argmax_f32_avx2}, Isa::kAvx2},
        {{argmax_f32_avx512}, Isa::kAvx512f},
#elif defined(__aarch64__)
        {{argmax_f32_neon}, Isa::kNeon},
#endif
  });
  return s;
}

const ArgmaxKernels& argmax_kernels() { return argmax_sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
