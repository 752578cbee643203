// The 5-bit fully connected with block scales over one row, dot product (SDOT): two tiles at a time
// (two weight streams).

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_neon_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb5w_gemv_2x16_neondot(const void* packed, size_t k, size_t n, const int8_t* q,
                                const float* x_scales, const int32_t* x_sums, float* y) {
  using L = Qb5Layout;
  static const NeonBlockFn kBlocks[1][2] = {
      {&neon_gemv_lanes<L, SdotDot, 1>, &neon_gemv_lanes<L, SdotDot, 2>}};
  neon_run_blocks(kBlocks, packed, qb5_tile_bytes(k), 0, k, n, /*rows=*/1, q, qc8_padded_k(k),
                  x_scales, x_sums, y, n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
