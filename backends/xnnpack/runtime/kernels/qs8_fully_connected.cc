#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_fully_connected.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Status;

Status qs8_qc8w_fully_connected(const QS8Kernels& set, const void* packed, size_t packed_bytes,
                                size_t k, size_t n, size_t rows, const float* x, size_t x_stride,
                                float* y, size_t y_stride, const QS8Scratch& scratch) {
  // The weight is checked before the rows are quantized; y is written only once all is checked.
  ES_RETURN_IF_ERROR(check_qs8_kernel_args(k, n, packed, packed_bytes));
  ES_RETURN_IF_ERROR(qs8_quantize_rows(set, k, rows, x, x_stride, scratch));
  return qs8_qc8w_run_quantized(set, packed, packed_bytes, k, n, rows, scratch, y, y_stride);
}

Status qs8_qc4w_fully_connected(const QS8Kernels& qs8, const QC4Kernels& set, const void* packed,
                                size_t packed_bytes, size_t k, size_t n, size_t group, size_t rows,
                                const float* x, size_t x_stride, float* y, size_t y_stride,
                                const QS8Scratch& scratch) {
  // The weight is checked before the rows are quantized; y is written only once all is checked.
  ES_RETURN_IF_ERROR(check_qc4_kernel_args(k, n, group, packed, packed_bytes));
  ES_RETURN_IF_ERROR(qs8_quantize_rows(qs8, k, rows, x, x_stride, scratch));
  return qs8_qc4w_run_quantized(set, packed, packed_bytes, k, n, group, rows, scratch, y,
                                y_stride);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
