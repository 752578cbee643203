// The int8 fully connected with block scales, scalar reference: reads kernels.h's qb8w layout
// input by input and follows its order of float operations.

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qb8w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                          size_t y_stride) {
  const uint8_t* tiles = static_cast<const uint8_t*>(packed);
  const size_t blocks = act_blocks(k);
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* qr = q + r * q_stride;
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* tile = tiles + j / kQC8Tile * qb8_tile_bytes(k);
      const size_t c = j % kQC8Tile;
      float acc = 0.0f;
      for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* groups = tile + qb8_block_offset(b);
        // The stored w + offset against q, less offset * the block's sum: the exact dot.
        int32_t dot = -kQC8WeightOffset * x_sums[r * blocks + b];
        for (size_t i = 0; i < kActBlock; ++i) {
          const int32_t w = qc8_stored_value(
              groups[i / kQC8KBlock * kQC8Tile * kQC8KBlock + c * kQC8KBlock + i % kQC8KBlock]);
          dot += static_cast<int32_t>(qr[b * kActBlock + i]) * w;
        }
        uint16_t scale_bits;
        std::memcpy(&scale_bits, tile + qb8_scales_offset(b) + c * 2, sizeof(scale_bits));
        const float w_scale = runtime::kernels::half_to_float(scale_bits);
        acc = std::fma(static_cast<float>(dot), x_scales[r * blocks + b] * w_scale, acc);
      }
      float bias;
      std::memcpy(&bias, tile + kQC8Tile * 4 + c * 4, sizeof(bias));
      y[r * y_stride + j] = acc + bias;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
