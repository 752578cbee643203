// The reference gemm_nt and gemm_nn: one dot product per output, summed in order over k (weights
// widened to float first; an int8 weight's sum then times its output's scale).

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

namespace {

float widen(float v) { return v; }
float widen(uint16_t v) { return kernels::half_to_float(v); }
float widen(int8_t v) { return static_cast<float>(v); }

// b_out, b_in: the strides of b's output and input index (gemm_nt's b is [n, k], gemm_nn's [k, n]).
template <typename BT>
void reference(size_t m, size_t n, size_t k, const float* a, const BT* b, size_t b_out, size_t b_in,
               const float* scales, float* c) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (size_t p = 0; p < k; ++p) acc += a[i * k + p] * widen(b[j * b_out + p * b_in]);
      c[i * n + j] = scales != nullptr ? acc * scales[j] : acc;
    }
  }
}

}  // namespace

void gemm_nt_f32_scalar(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  reference(m, n, k, a, b, k, 1, nullptr, c);
}

void gemm_nt_f16_scalar(size_t m, size_t n, size_t k, const float* a, const uint16_t* b,
                        float* c) {
  reference(m, n, k, a, b, k, 1, nullptr, c);
}

void gemm_nt_q8_scalar(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                       const float* scales, float* c) {
  reference(m, n, k, a, b, k, 1, scales, c);
}

void gemm_nn_f32_scalar(size_t m, size_t n, size_t k, const float* a, const float* b, float* c) {
  reference(m, n, k, a, b, 1, n, nullptr, c);
}

void gemm_nn_f16_scalar(size_t m, size_t n, size_t k, const float* a, const uint16_t* b, float* c) {
  reference(m, n, k, a, b, 1, n, nullptr, c);
}

void gemm_nn_q8_scalar(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                       const float* scales, float* c) {
  reference(m, n, k, a, b, 1, n, scales, c);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
