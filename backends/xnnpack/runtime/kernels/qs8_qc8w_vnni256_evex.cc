#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_qc8w_vnni256_evex.h"

#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_x86_blocks.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemv_4x16_vnni256_evex(const void* packed, size_t k, size_t n, const int8_t* q,
                                     int32_t* acc) {
  qs8_gemv_256<Vnni256Dot>(packed, k, n, q, acc);
}

void qs8_qc8w_gemm_4x16_vnni256_evex(const void* packed, size_t k, size_t n, size_t rows,
                                     const int8_t* q, size_t q_stride, int32_t* acc,
                                     size_t acc_stride) {
  qs8_gemm_256<Vnni256Dot>(packed, k, n, rows, q, q_stride, acc, acc_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
