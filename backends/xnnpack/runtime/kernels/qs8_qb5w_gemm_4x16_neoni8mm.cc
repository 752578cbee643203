// The 5-bit fully connected with block scales over several rows, i8mm (SMMLA): rows in pairs, four
// rows by one tile, half a tile per pass, each zipped weight vector serving both pairs (an odd row:
// SDOT).

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_neon_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb5w_gemm_4x16_neoni8mm(const void* packed, size_t k, size_t n, size_t rows,
                                 const int8_t* q, size_t q_stride, const float* x_scales,
                                 const int32_t* x_sums, float* y, size_t y_stride) {
  using L = Qb5Layout;
  static const NeonBlockFn kBlocks[4][1] = {
      {&neon_block<L, SdotDot, 1, 1, 4>},
      {&neon_block_mmla<L, 2, 4>},
      {&neon_block<L, SdotDot, 3, 1, 2>},
      {&neon_block_mmla<L, 4, 2>}};
  neon_run_blocks(kBlocks, packed, qb5_tile_bytes(k), 0, k, n, rows, q, q_stride, x_scales, x_sums,
                  y, y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
