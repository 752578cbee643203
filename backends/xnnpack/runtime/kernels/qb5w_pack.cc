// Packs a 5-bit weight with block scales into kernels.h's qb5w layout.

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qb5w_pack(const uint8_t* weight, const uint16_t* scales, const float* bias, size_t k,
               size_t n, void* packed) {
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  const size_t blocks = act_blocks(k);
  const size_t row_bytes = blocks * kQB5RowBlockBytes;
  const size_t tile_bytes = qb5_tile_bytes(k);
  uint8_t* out = static_cast<uint8_t*>(packed);
  for (size_t t = 0; t < tiles; ++t) {
    uint8_t* tile = out + t * tile_bytes;
    // Weight 0 (u = 16: nibble 0, fifth bit set) and scale 0 wherever no channel or block is.
    std::memset(tile + kQC8HeaderBytes, 0, tile_bytes - kQC8HeaderBytes);
    for (size_t b = 0; b < (blocks + 1) / 2 * 2; ++b) {
      std::memset(tile + qb5_block_offset(b) + kQB5NibbleBytes, 0xFF, kQB5BitsBytes);
    }
    float ones[kQC8Tile], tile_bias[kQC8Tile] = {};
    for (float& one : ones) one = 1.0f;
    for (size_t c = 0; c < kQC8Tile && t * kQC8Tile + c < n; ++c) {
      const size_t j = t * kQC8Tile + c;
      for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* src = weight + j * row_bytes + b * kQB5RowBlockBytes;
        uint8_t* nibbles = tile + qb5_block_offset(b);
        uint8_t* bits = nibbles + kQB5NibbleBytes;
        for (size_t i = 0; i < kActBlock; ++i) {
          const unsigned low = (src[i / 2] >> (4 * (i % 2))) & 0xFu;
          const unsigned fifth = (src[kActBlock / 2 + i / 8] >> (i % 8)) & 1u;
          const size_t g = i / kQC8KBlock, at = c * kQC8KBlock + i % kQC8KBlock;
          nibbles[g % 4 * 64 + at] |= static_cast<uint8_t>(low << (4 * (g / 4)));
          if (fifth == 0) bits[at] &= static_cast<uint8_t>(~(1u << g));
        }
        std::memcpy(tile + qb5_scales_offset(b) + c * 2, scales + j * blocks + b, 2);
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
