// The root-mean-square norm, scalar reference (kernels.h gives the sum's order, which the vector
// sets follow lane for lane).

#include <cmath>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

void f32_rmsnorm_scalar(size_t rows, size_t channels, const float* x, const float* w, float eps,
                        float* y) {
  for (size_t r = 0; r < rows; ++r, x += channels, y += channels) {
    float lanes[16] = {};
    for (size_t c = 0; c < channels; ++c) lanes[c % 16] = std::fma(x[c], x[c], lanes[c % 16]);
    for (size_t half = 8; half > 0; half /= 2) {
      for (size_t j = 0; j < half; ++j) lanes[j] += lanes[j + half];
    }
    const float scale = 1.0f / std::sqrt(lanes[0] / static_cast<float>(channels) + eps);
    for (size_t c = 0; c < channels; ++c) y[c] = w[c] * (x[c] * scale);
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
