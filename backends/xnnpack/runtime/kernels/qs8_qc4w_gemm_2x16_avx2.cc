// The int4 fully connected: Two rows by one tile at a time, AVX2. Every pass prefetches: the first
// streams the slab from memory as a GEMV does (the only pass of a decode step of one or two
// sequences), and the later ones find it in L2, where a prefetch costs little.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_2x16_avx2(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                             const int8_t* q, size_t q_stride, const float* x_scales,
                             const int32_t* x_sums, float* y, size_t y_stride) {
  qc4w_run<QC4Avx2, 2, 1>(packed, k, n, group, rows, q, q_stride, x_scales, x_sums, y, y_stride,
                          /*prefetch=*/true);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
