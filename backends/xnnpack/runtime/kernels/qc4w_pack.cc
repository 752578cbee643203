// Packing of int4 grouped weights into the layout of kernels.h (done once, at load).

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

namespace {

// Element i of a canonical row (low nibble first) as weight + 8, in 0..15.
uint8_t offset_nibble(const uint8_t* row, size_t i) {
  const uint8_t nibble = (i % 2 == 0) ? (row[i / 2] & 0x0F) : (row[i / 2] >> 4);
  return static_cast<uint8_t>(nibble ^ 0x08);  // two's complement -> offset binary
}

}  // namespace

void qc4w_pack(const uint8_t* weight, const uint16_t* scales, const float* bias, size_t k, size_t n,
               size_t group, void* packed) {
  const size_t tiles = (n + kQC4Tile - 1) / kQC4Tile;
  const size_t groups = k / group;
  uint8_t* out = static_cast<uint8_t*>(packed);
  std::memset(out, 0, qc4_packed_bytes(k, n, group));
  for (size_t t = 0; t < tiles; ++t) {
    uint8_t* tile = out + t * qc4_tile_bytes(k, group);
    float tile_bias[kQC4Tile] = {};
    for (size_t c = 0; c < kQC4Tile && t * kQC4Tile + c < n; ++c) {
      const size_t j = t * kQC4Tile + c;
      const uint8_t* row = weight + j * (k / 2);
      tile_bias[c] = bias != nullptr ? bias[j] : 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        uint8_t* blocks = tile + qc4_blocks_offset(g, group);
        for (size_t i = 0; i < group; i += kQC4KBlock) {
          uint8_t* block = blocks + i / kQC4KBlock * kQC4BlockBytes + c * 4;
          for (size_t b = 0; b < 4; ++b) {
            const size_t at = g * group + i + b;
            block[b] =
                static_cast<uint8_t>(offset_nibble(row, at) | (offset_nibble(row, at + 4) << 4));
          }
        }
        std::memcpy(tile + qc4_scales_offset(g, group) + c * 2, &scales[j * groups + g], 2);
      }
    }
    std::memcpy(tile, tile_bias, sizeof(tile_bias));
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
