// The int8 integer dot, scalar reference: reads the packed layout of kernels.h input by input.

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_qc8w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, int32_t* acc, size_t acc_stride) {
  const uint8_t* tiles = static_cast<const uint8_t*>(packed);
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* qr = q + r * q_stride;
    for (size_t j = 0; j < n; ++j) {
      const int8_t* groups = reinterpret_cast<const int8_t*>(
          tiles + j / kQC8Tile * qc8_tile_bytes(k) + kQC8HeaderBytes);
      const size_t c = j % kQC8Tile;
      int32_t sum = 0;
      for (size_t i = 0; i < k; ++i) {
        const int8_t w =
            groups[(i / kQC8KBlock) * kQC8Tile * kQC8KBlock + c * kQC8KBlock + i % kQC8KBlock];
        sum += static_cast<int32_t>(qr[i]) * w;
      }
      acc[r * acc_stride + j] = sum;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
