// Symmetric int8 quantization of activations in blocks of kActBlock inputs, scalar reference:
// the vector quantizers compute the same float operations (|x| max, 127 / max, one multiply,
// x86's max/min clamp to +-127, round to nearest even) and so give the same bytes and scales.

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_scalar_ops.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_quantize_scalar(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                         size_t q_stride, float* scales, int32_t* sums) {
  const size_t blocks = act_blocks(k);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    for (size_t b = 0; b < blocks; ++b) {
      const size_t lo = b * kActBlock, hi = lo + kActBlock < k ? lo + kActBlock : k;
      float amax = 0.0f;
      for (size_t i = lo; i < hi; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
      float inv;
      scales[r * blocks + b] = qs8_block_scale(amax, &inv);
      for (size_t i = lo; i < hi; ++i) qr[i] = qs8_quantize_one(xr[i], inv);
      std::memset(qr + hi, 0, lo + kActBlock - hi);
      sums[r * blocks + b] = qs8_block_sum(qr + lo);
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
