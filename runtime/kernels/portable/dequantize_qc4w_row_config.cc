// Which dequantize_qc4w_row kernel runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

using kernels::Isa;
using kernels::KernelSets;

const KernelSets<DequantizeQc4wRowKernel>& dequantize_qc4w_row_sets() {
  static const KernelSets<DequantizeQc4wRowKernel> s({
    {{dequantize_qc4w_row_scalar}, Isa::kScalar},
#if defined(__x86_64__)
        {{dequantize_qc4w_row_avx2}, Isa::kAvx2},
        {{dequantize_qc4w_row_avx512}, Isa::kAvx512f},
#elif defined(__aarch64__)
        {{dequantize_qc4w_row_neon}, Isa::kNeon},
#endif
  });
  return s;
}

const DequantizeQc4wRowKernel& dequantize_qc4w_row_kernel() { return dequantize_qc4w_row_sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
