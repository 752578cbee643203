// The int4 fully connected: eight rows by one tile at a time, AVX2 (qc4w_gemm_8x16).

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_8x16_avx2(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                             const int8_t* q, size_t q_stride, const float* x_scales,
                             const int32_t* x_sums, float* y, size_t y_stride) {
  qc4w_gemm_8x16<QC4Avx2>(packed, k, n, group, rows, q, q_stride, x_scales, x_sums, y, y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
