// The int8 fully connected with block scales over several rows, AVX-512 VNNI: blocks of up to 8 rows by 2 tiles.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb8w_gemm_8x32_avx512vnni(const void* packed, size_t k, size_t n, size_t rows,
                                   const int8_t* q, size_t q_stride, const float* x_scales,
                                   const int32_t* x_sums, float* y, size_t y_stride) {
  constexpr QS8Scales kBlock = QS8Scales::kPerBlock;
  // Prefetching as the GEMV: eight rows per pass over the weight read it about as fast as one
  // row's GEMV does, so a pass waits on memory as a GEMV would without the lines asked for ahead.
  static const QS8BlockFn kBlocks[8][2] = {
      {&qs8_block_avx512vnni<1, 1, true, kBlock>, &qs8_block_avx512vnni<1, 2, true, kBlock>},
      {&qs8_block_avx512vnni<2, 1, true, kBlock>, &qs8_block_avx512vnni<2, 2, true, kBlock>},
      {&qs8_block_avx512vnni<3, 1, true, kBlock>, &qs8_block_avx512vnni<3, 2, true, kBlock>},
      {&qs8_block_avx512vnni<4, 1, true, kBlock>, &qs8_block_avx512vnni<4, 2, true, kBlock>},
      {&qs8_block_avx512vnni<5, 1, true, kBlock>, &qs8_block_avx512vnni<5, 2, true, kBlock>},
      {&qs8_block_avx512vnni<6, 1, true, kBlock>, &qs8_block_avx512vnni<6, 2, true, kBlock>},
      {&qs8_block_avx512vnni<7, 1, true, kBlock>, &qs8_block_avx512vnni<7, 2, true, kBlock>},
      {&qs8_block_avx512vnni<8, 1, true, kBlock>, &qs8_block_avx512vnni<8, 2, true, kBlock>}};
  qs8_run_blocks(kBlocks, packed, qb8_tile_bytes(k), k, n, rows, q, q_stride, x_scales, x_sums, y,
                 y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
