// Which half conversion runs: the best set this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/kernel_sets.h"
#include "edgeshare/runtime/kernels/portable/convert_half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

using kernels::Isa;
using kernels::KernelSets;

const KernelSets<ConvertHalfKernels>& convert_half_sets() {
  static const KernelSets<ConvertHalfKernels> s({
    {{float_to_half_scalar, half_to_float_scalar}, Isa::kScalar},
#if defined(__x86_64__)
        {{float_to_half_f16c, half_to_float_f16c}, Isa::kAvx2},
        {{float_to_half_avx512, half_to_float_avx512}, Isa::kAvx512f},
#elif defined(__aarch64__)
        {{float_to_half_neon, half_to_float_neon}, Isa::kNeon},
#endif
  });
  return s;
}

const ConvertHalfKernels& convert_half_kernels() { return convert_half_sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
