// The reference gemm_nt: one dot product per output, summed in order over k.

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

namespace edgeshare {
namespace runtime {
namespace portable {

void gemm_nt_f32_scalar(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (size_t p = 0; p < k; ++p) acc += a[i * k + p] * b[j * k + p];
      c[i * n + j] = acc;
    }
  }
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
