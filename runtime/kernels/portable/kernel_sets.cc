// What this CPU has, asked of the compiler's CPU probe (cpuid and the OS's saved-state support).

#include "edgeshare/runtime/kernels/portable/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

bool cpu_has(CpuNeeds needs) {
  if (needs == CpuNeeds::kNothing) return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (needs) {
    case CpuNeeds::kNothing:
      return true;
    case CpuNeeds::kAvx2:
      return __builtin_cpu_supports("avx2");
    case CpuNeeds::kAvx2Fma:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuNeeds::kAvx2FmaF16c:
      return cpu_has(CpuNeeds::kAvx2Fma) && __builtin_cpu_supports("f16c");
    case CpuNeeds::kAvx512f:
      return __builtin_cpu_supports("avx512f");
  }
#endif
  return false;
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
