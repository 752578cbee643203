// Per-row symmetric int8 quantization of activations, scalar reference: the vector quantizers
// compute the same float operations (|x| max, 127 / max, one multiply, x86's max/min clamp to
// +-127, round to nearest even) and so give the same bytes and scales.

#include <cmath>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_scalar_ops.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void qs8_quantize_scalar(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                         size_t q_stride, float* scales) {
  const size_t kp = qc8_padded_k(k);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    int8_t* qr = q + r * q_stride;
    float amax = 0.0f;
    for (size_t i = 0; i < k; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
    scales[r] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (size_t i = 0; i < k; ++i) qr[i] = qs8_quantize_one(xr[i], inv);
    std::memset(qr + k, 0, kp - k);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
