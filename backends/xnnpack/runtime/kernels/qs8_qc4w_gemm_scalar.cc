// The int4 fully connected, scalar reference: reads the packed layout of kernels.h input by input
// and follows its order of float operations.

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_scalar(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                          const int8_t* q, size_t q_stride, const float* x_scales,
                          const int32_t* x_sums, float* y, size_t y_stride) {
  const uint8_t* tiles = static_cast<const uint8_t*>(packed);
  const size_t groups = k / group, blocks = k / kActBlock;
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* qr = q + r * q_stride;
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* tile = tiles + j / kQC4Tile * qc4_tile_bytes(k, group);
      const size_t c = j % kQC4Tile;
      float bias;
      std::memcpy(&bias, tile + c * 4, sizeof(bias));
      float acc = 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        const uint8_t* packed_blocks = tile + qc4_blocks_offset(g, group);
        uint16_t scale_bits;
        std::memcpy(&scale_bits, tile + qc4_scales_offset(g, group) + c * 2, sizeof(scale_bits));
        const float w_scale = runtime::kernels::half_to_float(scale_bits);
        for (size_t i0 = 0; i0 < group; i0 += kActBlock) {
          const size_t b = (g * group + i0) / kActBlock;
          // The stored weight + 8 against q, less 8 * the block's sum: the exact dot.
          int32_t dot = -8 * x_sums[r * blocks + b];
          for (size_t i = i0; i < i0 + kActBlock; i += kQC4KBlock) {
            const uint8_t* block = packed_blocks + i / kQC4KBlock * kQC4BlockBytes + c * 4;
            for (size_t e = 0; e < 4; ++e) {
              dot += static_cast<int32_t>(block[e] & 0x0F) * qr[g * group + i + e];
              dot += static_cast<int32_t>(block[e] >> 4) * qr[g * group + i + 4 + e];
            }
          }
          acc = std::fma(static_cast<float>(dot), x_scales[r * blocks + b] * w_scale, acc);
        }
      }
      y[r * y_stride + j] = acc + bias;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
