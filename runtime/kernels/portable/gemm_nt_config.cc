// Which gemm_nt set runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Sets {
  GemmNtKernels sets[3];
  size_t count = 0;
};

Sets detect() {
  Sets s;
  s.sets[s.count++] = {"scalar", gemm_nt_f32_scalar};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    s.sets[s.count++] = {"avx2", gemm_nt_f32_avx2};
  }
  if (__builtin_cpu_supports("avx512f")) {
    s.sets[s.count++] = {"avx512", gemm_nt_f32_avx512};
  }
#endif
  return s;
}

const Sets& sets() {
  static const Sets s = detect();
  return s;
}

}  // namespace

const GemmNtKernels* gemm_nt_kernel_sets(size_t* count) {
  *count = sets().count;
  return sets().sets;
}

const GemmNtKernels& gemm_nt_kernels() { return sets().sets[sets().count - 1]; }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
