// The int4 fully connected over one row, scalar reference: the GEMM reference's one-row case.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemv_scalar(const void* packed, size_t k, size_t n, size_t group, const int8_t* q,
                          const float* x_scales, const int32_t* x_sums, float* y) {
  qs8_qc4w_gemm_scalar(packed, k, n, group, 1, q, k, x_scales, x_sums, y, n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
