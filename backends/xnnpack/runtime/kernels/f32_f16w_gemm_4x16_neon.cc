// f32 x f16w GEMM, NEON: 4 rows by one tile at a time (16 accumulators), each widened weight
// vector serving the 4 rows. The prefetch hint is not used: aarch64 cores' prefetchers follow the
// tiles' sequential streams.

#include "edgeshare/backends/xnnpack/runtime/kernels/f32_f16w_neon.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_f16w_gemm_4x16_neon(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                             size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                             size_t prefetch_bytes) {
  (void)prefetch;
  (void)prefetch_bytes;
  static const F16WNeonBlockFn kBlocks[4][1] = {{&f16w_block_neon<1, 1>},
                                                {&f16w_block_neon<2, 1>},
                                                {&f16w_block_neon<3, 1>},
                                                {&f16w_block_neon<4, 1>}};
  f16w_run_neon(kBlocks, packed, k, n, rows, x, x_stride, y, y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
