// The int8 integer dot over one row, scalar reference: the GEMM reference at one row.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemv_scalar(const void* packed, size_t k, size_t n, const int8_t* q, int32_t* acc) {
  qs8_qc8w_gemm_scalar(packed, k, n, /*rows=*/1, q, /*q_stride=*/qc8_padded_k(k), acc,
                       /*acc_stride=*/n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
