// The int8 and int4 fully connected in one call (quantize the rows, integer dot, epilogue), for
// the kernels' tests and benchmarks: the runtime runs the same steps through its format rows
// (fc_format.h), quantizing once per run and running the dot per slab.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_FULLY_CONNECTED_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_FULLY_CONNECTED_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

// y = the int8 fully connected of `rows` rows of x (x_stride floats apart) into rows of y
// (y_stride floats apart): quantize, then GEMV for one row or GEMM for more, with `set`'s kernels.
// Errors: InvalidArgument when check_qs8_kernel_args fails, rows exceed the scratch, a buffer is
// null or a stride is too short, or a kind of `set` is missing; y is not written then.
runtime::Status qs8_qc8w_fully_connected(const QS8Kernels& set, const void* packed,
                                         size_t packed_bytes, size_t k, size_t n, size_t rows,
                                         const float* x, size_t x_stride, float* y, size_t y_stride,
                                         const QS8Scratch& scratch);

// All of it for `rows` rows of x (x_stride floats apart): quantize with `qs8`'s quantizer, then
// qs8_qc4w_run_quantized.
// Errors: as qs8_quantize_rows and qs8_qc4w_run_quantized; y is not written then.
runtime::Status qs8_qc4w_fully_connected(const QS8Kernels& qs8, const QC4Kernels& set,
                                         const void* packed, size_t packed_bytes, size_t k,
                                         size_t n, size_t group, size_t rows, const float* x,
                                         size_t x_stride, float* y, size_t y_stride,
                                         const QS8Scratch& scratch);

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_FULLY_CONNECTED_H_
