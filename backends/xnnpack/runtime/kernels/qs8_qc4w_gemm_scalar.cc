// The int4 fully connected, scalar reference: reads the packed layout of kernels.h input by input.

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc4w_gemm_scalar(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                          const int8_t* q, size_t q_stride, const int32_t* xsum8,
                          const float* x_scales, float* y, size_t y_stride) {
  const uint8_t* tiles = static_cast<const uint8_t*>(packed);
  const size_t groups = k / group;
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* qr = q + r * q_stride;
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* tile = tiles + j / kQC4Tile * qc4_tile_bytes(k, group);
      const size_t c = j % kQC4Tile;
      float bias;
      std::memcpy(&bias, tile + c * 4, sizeof(bias));
      float acc = 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        const uint8_t* blocks = tile + qc4_blocks_offset(g, group);
        int32_t sum = 0;
        for (size_t i = 0; i < group; i += kQC4KBlock) {
          const uint8_t* block = blocks + i / kQC4KBlock * kQC4BlockBytes + c * 4;
          for (size_t b = 0; b < 4; ++b) {
            sum += static_cast<int32_t>(block[b] & 0x0F) * qr[g * group + i + b];
            sum += static_cast<int32_t>(block[b] >> 4) * qr[g * group + i + 4 + b];
          }
        }
        sum -= xsum8[r * groups + g];
        uint16_t scale;
        std::memcpy(&scale, tile + qc4_scales_offset(g, group) + c * 2, sizeof(scale));
        acc = std::fma(static_cast<float>(sum), runtime::kernels::half_to_float(scale), acc);
      }
      y[r * y_stride + j] = std::fma(acc, x_scales[r], bias);
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
