// The float epilogue of the int8 fully connected: one implementation for every path (see
// kernels.h), so equal accumulators give equal floats whatever kernel computed them.

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qc8w_dequantize(const void* packed, size_t k, size_t n, size_t rows, const int32_t* acc,
                     size_t acc_stride, const float* x_scales, float* y, size_t y_stride) {
  const uint8_t* tiles = static_cast<const uint8_t*>(packed);
  for (size_t j0 = 0; j0 < n; j0 += kQC8Tile) {
    const uint8_t* tile = tiles + j0 / kQC8Tile * qc8_tile_bytes(k);
    float scales[kQC8Tile], bias[kQC8Tile];
    std::memcpy(scales, tile + kQC8Tile * 4, sizeof(scales));
    std::memcpy(bias, tile + kQC8Tile * 8, sizeof(bias));
    const size_t count = n - j0 < kQC8Tile ? n - j0 : kQC8Tile;
    for (size_t r = 0; r < rows; ++r) {
      const int32_t* a = acc + r * acc_stride + j0;
      float* out = y + r * y_stride + j0;
      const float xs = x_scales[r];
      for (size_t c = 0; c < count; ++c) {
        const float s = xs * scales[c];
        out[c] = s * static_cast<float>(a[c]) + bias[c];
      }
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
