// The int8 fully connected over one row, AVX-512 VNNI: four tiles (four weight streams) at a time.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemv_4x16_avx512vnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                   const float* x_scales, const int32_t* x_sums, float* y) {
  static const QS8BlockFn kBlocks[1][4] = {
      {&qs8_block_avx512vnni<1, 1, true>, &qs8_block_avx512vnni<1, 2, true>,
       &qs8_block_avx512vnni<1, 3, true>, &qs8_block_avx512vnni<1, 4, true>}};
  qs8_run_blocks(kBlocks, packed, qc8_tile_bytes(k), k, n, /*rows=*/1, q, qc8_padded_k(k),
                 x_scales, x_sums, y, n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
