// The 5-bit fully connected with block scales over one row, scalar reference: the GEMM's one row.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb5w_gemv_scalar(const void* packed, size_t k, size_t n, const int8_t* q,
                          const float* x_scales, const int32_t* x_sums, float* y) {
  qs8_qb5w_gemm_scalar(packed, k, n, /*rows=*/1, q, /*q_stride=*/qc8_padded_k(k), x_scales, x_sums,
                       y, /*y_stride=*/n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
