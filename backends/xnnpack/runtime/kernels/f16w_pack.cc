// The f16w packing (kernels.h): biases widened to float, weights kept as half bytes, input-major
// within tiles of kF16WTile channels, the last tile zero-padded.

#include <cstring>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f16w_pack(const uint16_t* weight, const uint16_t* bias, size_t k, size_t n, void* packed) {
  uint8_t* out = static_cast<uint8_t*>(packed);
  std::memset(out, 0, f16w_packed_bytes(k, n));
  for (size_t j = 0; j < n; ++j) {
    uint8_t* tile = out + j / kF16WTile * f16w_tile_bytes(k);
    const size_t lane = j % kF16WTile;
    const float b = bias != nullptr ? runtime::kernels::half_to_float(bias[j]) : 0.0f;
    std::memcpy(tile + lane * sizeof(float), &b, sizeof(float));
    uint16_t* w = reinterpret_cast<uint16_t*>(tile + kF16WTile * sizeof(float));
    const uint16_t* row = weight + j * k;
    for (size_t i = 0; i < k; ++i) w[i * kF16WTile + lane] = row[i];
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
