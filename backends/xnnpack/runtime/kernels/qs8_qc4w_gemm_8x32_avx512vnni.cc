// The int4 fully connected: eight rows by two tiles at a time, AVX-512 VNNI; the rows past the
// last eight as qs8_qc4w_gemm_4x32_avx512vnni runs them, prefetching when they are all there is (a
// decode step of two to seven sequences, whose one pass over the weight streams it as a GEMV does).

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_8x32_avx512vnni(const void* packed, size_t k, size_t n, size_t group,
                                   size_t rows, const int8_t* q, size_t q_stride,
                                   const float* x_scales, const int32_t* x_sums, float* y,
                                   size_t y_stride) {
  const size_t eights = rows / 8 * 8;
  if (eights > 0) {
    // A pass over the weight that serves eight rows reads it about as fast as a one-row GEMV, so
    // it would wait on memory as a GEMV would: it asks for each tile's lines ahead as the GEMV
    // does.
    qc4w_run<QC4Avx512Vnni, 8, 2>(packed, k, n, group, eights, q, q_stride, x_scales, x_sums, y,
                                  y_stride, /*prefetch=*/true);
  }
  if (rows > eights) {
    // After an eight-row pass the weight's slab is in L2; without one it comes from memory.
    const size_t blocks = k / kActBlock;
    qc4w_run<QC4Avx512Vnni, 4, 2>(packed, k, n, group, rows - eights, q + eights * q_stride,
                                  q_stride, x_scales + eights * blocks, x_sums + eights * blocks,
                                  y + eights * y_stride, y_stride, /*prefetch=*/eights == 0);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
