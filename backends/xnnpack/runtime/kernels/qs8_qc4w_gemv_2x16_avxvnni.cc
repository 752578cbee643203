// The int4 fully connected: two tiles (two weight streams) at a time, AVX-VNNI.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemv_2x16_avxvnni(const void* packed, size_t k, size_t n, size_t group,
                                const int8_t* q, const float* x_scales, const int32_t* x_sums,
                                float* y) {
  qc4w_run<QC4AvxVnni, 1, 2>(packed, k, n, group, /*rows=*/1, q, k, x_scales, x_sums, y, n,
                             /*prefetch=*/true);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
