// f32 x f16w GEMM, scalar reference: each output is its bias, then std::fma per input in input
// order over the widened weight (one rounding each, as a vector FMA), so the vector kernels equal
// it bit for bit.

#include <cmath>
#include <cstring>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_f16w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                          size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                          size_t prefetch_bytes) {
  (void)prefetch;
  (void)prefetch_bytes;
  const uint8_t* base = static_cast<const uint8_t*>(packed);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* tile = base + j / kF16WTile * f16w_tile_bytes(k);
      const size_t lane = j % kF16WTile;
      float acc;
      std::memcpy(&acc, tile + lane * sizeof(float), sizeof(float));
      const uint8_t* w = tile + kF16WTile * sizeof(float) + lane * sizeof(uint16_t);
      for (size_t i = 0; i < k; ++i) {
        uint16_t h;
        std::memcpy(&h, w + i * kF16WTile * sizeof(uint16_t), sizeof(h));
        acc = std::fma(runtime::kernels::half_to_float(h), xr[i], acc);
      }
      y[r * y_stride + j] = acc;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
