// Which dequantize_qc4w_row kernel runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/portable/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

const KernelSets<DequantizeQc4wRowKernel>& sets() {
  static const KernelSets<DequantizeQc4wRowKernel> s({
    {{"scalar", dequantize_qc4w_row_scalar}, CpuNeeds::kNothing},
#if defined(__x86_64__)
        {{"avx2", dequantize_qc4w_row_avx2}, CpuNeeds::kAvx2},
        {{"avx512", dequantize_qc4w_row_avx512}, CpuNeeds::kAvx512f},
#endif
  });
  return s;
}

}  // namespace

const DequantizeQc4wRowKernel* dequantize_qc4w_row_kernels(size_t* count) {
  return sets().all(count);
}

const DequantizeQc4wRowKernel& dequantize_qc4w_row_kernel() { return sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
