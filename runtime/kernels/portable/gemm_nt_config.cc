// Which gemm_nt set runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/portable/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

const KernelSets<GemmNtKernels>& sets() {
  static const KernelSets<GemmNtKernels> s({
    {{"scalar", gemm_nt_f32_scalar}, CpuNeeds::kNothing},
#if defined(__x86_64__)
        {{"avx2", gemm_nt_f32_avx2}, CpuNeeds::kAvx2Fma},
        {{"avx512", gemm_nt_f32_avx512}, CpuNeeds::kAvx512f},
#endif
  });
  return s;
}

}  // namespace

const GemmNtKernels* gemm_nt_kernel_sets(size_t* count) { return sets().all(count); }

const GemmNtKernels& gemm_nt_kernels() { return sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
