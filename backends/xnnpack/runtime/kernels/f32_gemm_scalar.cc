// f32 GEMM over XNNPACK's packing, scalar reference: each output is the bias, then std::fma per
// input in input order (one rounding each, as a vector FMA), then x86's max and min with the
// vector kernels' operand order, so the vector kernels equal it bit for bit, NaNs included.

#include <cmath>
#include <limits>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_gemm_scalar(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                     size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                     size_t prefetch_bytes) {
  const float lo = -std::numeric_limits<float>::infinity();
  const float hi = std::numeric_limits<float>::infinity();
  const size_t tile = (k + 1) * kF32Tile;
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    for (size_t j = 0; j < n; ++j) {
      const float* w = packed + j / kF32Tile * tile + j % kF32Tile;
      float acc = w[0];
      for (size_t i = 0; i < k; ++i) acc = std::fma(w[(i + 1) * kF32Tile], xr[i], acc);
      // MAXPS / MINPS: the second operand when either is a NaN or both are zeros.
      acc = acc > lo ? acc : lo;
      acc = acc < hi ? acc : hi;
      y[r * y_stride + j] = acc;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
