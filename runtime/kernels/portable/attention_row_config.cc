// Which attention_row set runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

const KernelSets<AttentionRowKernels>& sets() {
  static const KernelSets<AttentionRowKernels> s({
    {{"scalar", attention_row_f32_scalar, attention_row_f16_scalar}, CpuNeeds::kNothing},
#if defined(__x86_64__)
        {{"avx2", attention_row_f32_avx2, attention_row_f16_avx2}, CpuNeeds::kAvx2FmaF16c},
        {{"avx512", attention_row_f32_avx512, attention_row_f16_avx512}, CpuNeeds::kAvx512f},
#endif
  });
  return s;
}

}  // namespace

const AttentionRowKernels* attention_row_kernel_sets(size_t* count) { return sets().all(count); }

const AttentionRowKernels& attention_row_kernels() { return sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
