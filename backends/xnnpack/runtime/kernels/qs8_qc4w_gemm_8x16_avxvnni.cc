// The int4 fully connected: eight rows by one tile at a time, AVX-VNNI, the rows left over four,
// two, then one at a time. As AVX2's eight-row tile, the block spills its float sums to the stack
// and is still the fastest: one pass over the slab serves the eight rows of a batch's decode step
// (docs/kernels.md). Every pass prefetches: the first streams the slab from memory as a GEMV
// does, and the later ones find it in L2, where a prefetch costs little.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_8x16_avxvnni(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride) {
  const size_t eights = rows / 8 * 8;
  if (eights > 0) {
    qc4w_run<QC4AvxVnni, 8, 1>(packed, k, n, group, eights, q, q_stride, x_scales, x_sums, y,
                               y_stride, /*prefetch=*/true);
  }
  if (rows > eights) {
    const size_t blocks = k / kActBlock;
    qc4w_run<QC4AvxVnni, 4, 1>(packed, k, n, group, rows - eights, q + eights * q_stride,
                               q_stride, x_scales + eights * blocks, x_sums + eights * blocks,
                               y + eights * y_stride, y_stride, /*prefetch=*/true);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
