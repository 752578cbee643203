// The 5-bit fully connected with block scales over one row, AVX2 with F16C: four tiles at a time.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb5w_gemv_4x16_avx2(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y) {
  qs8_gemv_256<Avx2Dot, QS8Scales::kPerBlockInt5>(packed, k, n, q, x_scales, x_sums, y);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
