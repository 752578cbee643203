#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_qc8w_vnni256_evex.h"

#include "edgeshare/backends/xnnpack/runtime/kernels/qc4w_x86_blocks.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemv_4x16_vnni256_evex(const void* packed, size_t k, size_t n, const int8_t* q,
                                     const float* x_scales, const int32_t* x_sums, float* y) {
  qs8_gemv_256<Vnni256Dot>(packed, k, n, q, x_scales, x_sums, y);
}

void qs8_qc8w_gemm_4x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t rows,
                                     const int8_t* q, size_t q_stride, const float* x_scales,
                                     const int32_t* x_sums, float* y, size_t y_stride) {
  qs8_gemm_256<Vnni256Dot>(packed, k, n, rows, q, q_stride, x_scales, x_sums, y, y_stride);
}

void qs8_qb8w_gemv_4x16_vnni256_evex(const void* packed, size_t k, size_t n, const int8_t* q,
                                     const float* x_scales, const int32_t* x_sums, float* y) {
  qs8_gemv_256<Vnni256Dot, QS8Scales::kPerBlock>(packed, k, n, q, x_scales, x_sums, y);
}

void qs8_qb8w_gemm_4x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t rows,
                                     const int8_t* q, size_t q_stride, const float* x_scales,
                                     const int32_t* x_sums, float* y, size_t y_stride) {
  qs8_gemm_256<Vnni256Dot, QS8Scales::kPerBlock>(packed, k, n, rows, q, q_stride, x_scales, x_sums,
                                                 y, y_stride);
}

void qs8_qc4w_gemv_2x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t group,
                                     const int8_t* q, const float* x_scales,
                                     const int32_t* x_sums, float* y) {
  qc4w_run<QC4AvxVnni, 1, 2>(packed, k, n, group, /*rows=*/1, q, k, x_scales, x_sums, y, n,
                             /*prefetch=*/true);
}

void qs8_qc4w_gemm_8x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t group,
                                     size_t rows, const int8_t* q, size_t q_stride,
                                     const float* x_scales, const int32_t* x_sums, float* y,
                                     size_t y_stride) {
  qc4w_gemm_8x16<QC4AvxVnni>(packed, k, n, group, rows, q, q_stride, x_scales, x_sums, y,
                             y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
