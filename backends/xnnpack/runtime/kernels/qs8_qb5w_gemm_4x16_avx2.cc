// The 5-bit fully connected with block scales over several rows, AVX2 with F16C: up to four rows
// by one tile.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb5w_gemm_4x16_avx2(const void* packed, size_t k, size_t n, size_t rows,
                             const int8_t* q, size_t q_stride, const float* x_scales,
                             const int32_t* x_sums, float* y, size_t y_stride) {
  qs8_gemm_256<Avx2Dot, QS8Scales::kPerBlockInt5>(packed, k, n, rows, q, q_stride, x_scales,
                                                  x_sums, y, y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
