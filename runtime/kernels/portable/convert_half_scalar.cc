// The conversions one element at a time with half.h: the reference every other set must equal.

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/portable/convert_half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

void float_to_half_scalar(size_t n, const float* x, uint16_t* y) {
  for (size_t i = 0; i < n; ++i) y[i] = kernels::float_to_half(x[i]);
}

void half_to_float_scalar(size_t n, const uint16_t* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = kernels::half_to_float(x[i]);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
