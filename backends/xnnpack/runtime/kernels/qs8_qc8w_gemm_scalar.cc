// The int8 fully connected, scalar reference: reads the packed layout of kernels.h input by input
// and follows its order of float operations.

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                          size_t y_stride) {
  const uint8_t* tiles = static_cast<const uint8_t*>(packed);
  const size_t blocks = act_blocks(k);
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* qr = q + r * q_stride;
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* tile = tiles + j / kQC8Tile * qc8_tile_bytes(k);
      const uint8_t* groups = tile + kQC8HeaderBytes;
      const size_t c = j % kQC8Tile;
      float acc = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        // The stored w + offset against q, less offset * the block's sum: the exact dot, as VNNI
        // forms it.
        int32_t dot = -kQC8WeightOffset * x_sums[r * blocks + b];
        for (size_t i = b * kActBlock; i < (b + 1) * kActBlock; ++i) {
          const int32_t w = qc8_stored_value(
              groups[(i / kQC8KBlock) * kQC8Tile * kQC8KBlock + c * kQC8KBlock + i % kQC8KBlock]);
          dot += static_cast<int32_t>(qr[i]) * w;
        }
        acc = std::fma(static_cast<float>(dot), x_scales[r * blocks + b], acc);
      }
      float scale, bias;
      std::memcpy(&scale, tile + c * 4, sizeof(scale));
      std::memcpy(&bias, tile + kQC8Tile * 4 + c * 4, sizeof(bias));
      y[r * y_stride + j] = std::fma(acc, scale, bias);
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
