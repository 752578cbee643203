// The int4 fully connected: Four rows by two tiles at a time, AVX-512 VNNI.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_4x32_avx512vnni(const void* packed, size_t k, size_t n, size_t group,
                                   size_t rows, const int8_t* q, size_t q_stride,
                                   const float* x_scales, const int32_t* x_sums, float* y,
                                   size_t y_stride) {
  qc4w_run<QC4Avx512Vnni, 4, 2>(packed, k, n, group, rows, q, q_stride, x_scales, x_sums, y,
                                y_stride, /*prefetch=*/false);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
