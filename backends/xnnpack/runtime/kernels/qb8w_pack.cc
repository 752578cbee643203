// Packs an int8 weight with block scales into kernels.h's qb8w layout.

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qb8w_pack(const int8_t* weight, const uint16_t* scales, const float* bias, size_t k, size_t n,
               void* packed) {
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  const size_t blocks = act_blocks(k);
  const size_t tile_bytes = qb8_tile_bytes(k);
  uint8_t* out = static_cast<uint8_t*>(packed);
  for (size_t t = 0; t < tiles; ++t) {
    uint8_t* tile = out + t * tile_bytes;
    // Weight 0 and scale 0 wherever no channel or block is.
    std::memset(tile + kQC8HeaderBytes, 0, tile_bytes - kQC8HeaderBytes);
    for (size_t b = 0; b < (blocks + 1) / 2 * 2; ++b) {
      std::memset(tile + qb8_block_offset(b), qc8_stored_byte(0), kQB8BlockBytes);
    }
    float ones[kQC8Tile], tile_bias[kQC8Tile] = {};
    for (float& one : ones) one = 1.0f;
    for (size_t c = 0; c < kQC8Tile && t * kQC8Tile + c < n; ++c) {
      const size_t j = t * kQC8Tile + c;
      const int8_t* row = weight + j * k;
      for (size_t b = 0; b < blocks; ++b) {
        uint8_t* groups = tile + qb8_block_offset(b);
        for (size_t i = 0; i < kActBlock; ++i) {
          groups[i / kQC8KBlock * kQC8Tile * kQC8KBlock + c * kQC8KBlock + i % kQC8KBlock] =
              qc8_stored_byte(row[b * kActBlock + i]);
        }
        std::memcpy(tile + qb8_scales_offset(b) + c * 2, scales + j * blocks + b, 2);
      }
      tile_bias[c] = bias != nullptr ? bias[j] : 0.0f;
    }
    std::memcpy(tile, ones, sizeof(ones));
    std::memcpy(tile + sizeof(ones), tile_bias, sizeof(tile_bias));
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
