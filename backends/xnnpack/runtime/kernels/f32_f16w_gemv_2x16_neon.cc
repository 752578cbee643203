// f32 x f16w GEMV, NEON: two tiles at a time (two weight streams, 8 FMLA chains), then one.

#include "edgeshare/backends/xnnpack/runtime/kernels/f32_f16w_neon.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_f16w_gemv_2x16_neon(const void* packed, size_t k, size_t n, const float* x, float* y) {
  static const F16WNeonBlockFn kBlocks[1][2] = {{&f16w_block_neon<1, 1>, &f16w_block_neon<1, 2>}};
  f16w_run_neon(kBlocks, packed, k, n, /*rows=*/1, x, k, y, n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
