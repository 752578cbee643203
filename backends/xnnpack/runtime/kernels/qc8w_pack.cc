// Packing of int8 per-channel weights into the layout of kernels.h (done once, at load).

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qc8w_pack(const int8_t* weight, const float* scales, const float* bias, size_t k, size_t n,
               void* packed) {
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  const size_t kp = qc8_padded_k(k);
  uint8_t* out = static_cast<uint8_t*>(packed);
  for (size_t t = 0; t < tiles; ++t) {
    uint8_t* tile = out + t * qc8_tile_bytes(k);
    float tile_scales[kQC8Tile] = {};
    float tile_bias[kQC8Tile] = {};
    uint8_t* groups = tile + kQC8HeaderBytes;
    // Weight 0 past n and k.
    std::memset(groups, qc8_stored_byte(0), kp * kQC8Tile);
    for (size_t c = 0; c < kQC8Tile && t * kQC8Tile + c < n; ++c) {
      const size_t j = t * kQC8Tile + c;
      const int8_t* row = weight + j * k;
      for (size_t i = 0; i < k; ++i) {
        groups[(i / kQC8KBlock) * kQC8Tile * kQC8KBlock + c * kQC8KBlock + i % kQC8KBlock] =
            qc8_stored_byte(row[i]);
      }
      tile_scales[c] = scales[j];
      tile_bias[c] = bias != nullptr ? bias[j] : 0.0f;
    }
    std::memcpy(tile, tile_scales, sizeof(tile_scales));
    std::memcpy(tile + sizeof(tile_scales), tile_bias, sizeof(tile_bias));
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
