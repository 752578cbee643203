// The argmax one score at a time: the reference every other set must equal.

#include "edgeshare/runtime/kernels/portable/argmax.h"

namespace edgeshare {
namespace runtime {
namespace portable {

size_t argmax_f32_scalar(size_t n, const float* x) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
