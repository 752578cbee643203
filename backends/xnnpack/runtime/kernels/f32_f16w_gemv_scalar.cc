// f32 x f16w GEMV, scalar reference: the GEMM reference at one row.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_f16w_gemv_scalar(const void* packed, size_t k, size_t n, const float* x, float* y) {
  f32_f16w_gemm_scalar(packed, k, n, /*rows=*/1, x, /*x_stride=*/k, y, /*y_stride=*/n,
                       /*prefetch=*/nullptr, /*prefetch_bytes=*/0);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
