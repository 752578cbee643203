// The 5-bit fully connected with block scales over one row, AVX-512 VNNI: four tiles (four weight
// streams) at a time.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb5w_gemv_4x16_avx512vnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                   const float* x_scales, const int32_t* x_sums, float* y) {
  constexpr QS8Scales kBlock = QS8Scales::kPerBlockInt5;
  static const QS8BlockFn kBlocks[1][4] = {
      {&qs8_block_avx512vnni<1, 1, true, kBlock>, &qs8_block_avx512vnni<1, 2, true, kBlock>,
       &qs8_block_avx512vnni<1, 3, true, kBlock>, &qs8_block_avx512vnni<1, 4, true, kBlock>}};
  qs8_run_blocks(kBlocks, packed, qb5_tile_bytes(k), k, n, /*rows=*/1, q, qc8_padded_k(k),
                 x_scales, x_sums, y, n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
