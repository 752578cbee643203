// f32 GEMV over XNNPACK's packing, scalar reference: the GEMM reference at one row.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_gemv_scalar(const float* packed, size_t k, size_t n, const float* x, float* y) {
  f32_gemm_scalar(packed, k, n, /*rows=*/1, x, /*x_stride=*/k, y, /*y_stride=*/n,
                  /*prefetch=*/nullptr, /*prefetch_bytes=*/0);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
