// The AVX-VNNI int8 and int4 kernels built with AVX-512 VL's (EVEX) encoding of the same
// instructions, for tests only: they run the AVX-VNNI files' blocks on AVX-512 VNNI CPUs that lack
// AVX-VNNI, where the AVX-VNNI path itself cannot run. Same signatures as the AVX-VNNI kernels.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_QC8W_VNNI256_EVEX_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_QC8W_VNNI256_EVEX_H_

#include <cstddef>
#include <cstdint>

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemv_4x16_vnni256_evex(const void* packed, size_t k, size_t n, const int8_t* q,
                                     const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemm_4x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t rows,
                                     const int8_t* q, size_t q_stride, const float* x_scales,
                                     const int32_t* x_sums, float* y, size_t y_stride);

void qs8_qb8w_gemv_4x16_vnni256_evex(const void* packed, size_t k, size_t n, const int8_t* q,
                                     const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_4x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t rows,
                                     const int8_t* q, size_t q_stride, const float* x_scales,
                                     const int32_t* x_sums, float* y, size_t y_stride);

void qs8_qc4w_gemv_2x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t group,
                                     const int8_t* q, const float* x_scales,
                                     const int32_t* x_sums, float* y);
void qs8_qc4w_gemm_8x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t group,
                                     size_t rows, const int8_t* q, size_t q_stride,
                                     const float* x_scales, const int32_t* x_sums, float* y,
                                     size_t y_stride);

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_QC8W_VNNI256_EVEX_H_
