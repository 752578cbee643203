// Packing of int8 per-channel weights into the layout of kernels.h (done once, at load).

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qc8w_pack(const int8_t* weight, const float* scales, const float* bias, size_t k, size_t n,
               void* packed) {
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  uint8_t* out = static_cast<uint8_t*>(packed);
  std::memset(out, 0, qc8_packed_bytes(k, n));
  for (size_t t = 0; t < tiles; ++t) {
    uint8_t* tile = out + t * qc8_tile_bytes(k);
    int32_t sums[kQC8Tile] = {};
    float tile_scales[kQC8Tile] = {};
    float tile_bias[kQC8Tile] = {};
    int8_t* groups = reinterpret_cast<int8_t*>(tile + kQC8HeaderBytes);
    for (size_t c = 0; c < kQC8Tile && t * kQC8Tile + c < n; ++c) {
      const size_t j = t * kQC8Tile + c;
      const int8_t* row = weight + j * k;
      for (size_t i = 0; i < k; ++i) {
        sums[c] += row[i];
        groups[(i / kQC8KBlock) * kQC8Tile * kQC8KBlock + c * kQC8KBlock + i % kQC8KBlock] = row[i];
      }
      tile_scales[c] = scales[j];
      tile_bias[c] = bias != nullptr ? bias[j] : 0.0f;
    }
    std::memcpy(tile, sums, sizeof(sums));
    std::memcpy(tile + sizeof(sums), tile_scales, sizeof(tile_scales));
    std::memcpy(tile + sizeof(sums) + sizeof(tile_scales), tile_bias, sizeof(tile_bias));
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
