// Which gemm_nt set runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

using kernels::Isa;
using kernels::KernelSets;

const KernelSets<GemmNtKernels>& gemm_nt_sets() {
  static const KernelSets<GemmNtKernels> s({
      {{gemm_nt_f32_scalar, gemm_nt_f16_scalar, gemm_nt_q8_scalar, gemm_nn_f32_scalar,
        gemm_nn_f16_scalar, gemm_nn_q8_scalar},
       Isa::kScalar},
#if defined(__x86_64__)
      {{gemm_nt_f32_avx2, gemm_nt_f16_avx2, gemm_nt_q8_avx2, gemm_nn_f32_avx2, gemm_nn_f16_avx2,
        gemm_nn_q8_avx2},
       Isa::kAvx2},
      {{gemm_nt_f32_avx512, gemm_nt_f16_avx512, gemm_nt_q8_avx512, gemm_nn_f32_avx512,
        gemm_nn_f16_avx512, gemm_nn_q8_avx512},
       Isa::kAvx512f},
#elif defined(__aarch64__)
      {{gemm_nt_f32_neon, gemm_nt_f16_neon, gemm_nt_q8_neon, gemm_nn_f32_neon, gemm_nn_f16_neon,
        gemm_nn_q8_neon},
       Isa::kNeon},
#endif
  });
  return s;
}

const GemmNtKernels& gemm_nt_kernels() { return gemm_nt_sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
