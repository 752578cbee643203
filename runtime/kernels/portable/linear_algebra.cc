// Portable fp32 matrix kernels: linear, addmm, mm, bmm. Straightforward loops ordered for
// contiguous inner access, except linear, which runs the vectorized gemm_nt (the low-rank products
// of a swappable adapter run here, on the adapter's mapped bytes); the XNNPACK delegate is where
// speed lives otherwise. Each resizes its output to
// the product's shape.

#include <cstring>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// c[m, n] = a[m, k] @ b[k, n]; c is overwritten.
void matmul(const float* a, const float* b, float* c, size_t m, size_t k, size_t n) {
  std::memset(c, 0, m * n * sizeof(float));
  for (size_t i = 0; i < m; ++i) {
    for (size_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      // The output never aliases an input (memory planning): without that promise the compiler
      // keeps this loop scalar (a KV cache's attention at T=32 ran at ~5 GFLOP/s here).
      const float* __restrict brow = b + p * n;
      float* __restrict crow = c + i * n;
      for (size_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
}

// linear(input[..., in], weight[out, in], bias?[out]) -> [..., out]
Status linear(Args args) {
  const char* op = "aten::linear";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * input, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * weight, float_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * bias, optional_float_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 3, op));
  ES_CHECK_OR_RETURN_ERROR(weight->dim() == 2 && input->dim() >= 1, Error::InvalidProgram,
                           "%s: weight must be 2-d", op);
  const size_t in = static_cast<size_t>(weight->size(1));
  const size_t outc = static_cast<size_t>(weight->size(0));
  ES_CHECK_OR_RETURN_ERROR(static_cast<size_t>(input->size(input->dim() - 1)) == in,
                           Error::InvalidProgram, "%s: input's last dim is not %zu", op, in);
  const size_t rows = input->numel() / (in == 0 ? 1 : in);
  Shape shape = shape_of(*input);
  shape.sizes[shape.rank - 1] = weight->size(0);
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  ES_CHECK_OR_RETURN_ERROR(bias == nullptr || bias->numel() == outc, Error::InvalidProgram,
                           "%s: bias must have %zu elements", op, outc);
  // The weight as stored: an open constant (a swappable adapter's mapped bytes) is never packed.
  gemm_nt_kernels().f32(rows, outc, in, input->data<float>(), weight->data<float>(),
                        out->data<float>());
  if (bias != nullptr) {
    float* y = out->data<float>();
    const float* b = bias->data<float>();
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < outc; ++j) y[r * outc + j] += b[j];
    }
  }
  return Status();
}

Status check_2d(const Tensor& t, const char* op, const char* what) {
  ES_CHECK_OR_RETURN_ERROR(t.dim() == 2, Error::InvalidProgram, "%s: %s must be 2-d", op, what);
  return Status();
}

// mm(self[m, k], mat2[k, n]) -> [m, n]
Status mm(Args args) {
  const char* op = "aten::mm";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * a, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * b, float_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 2, op));
  ES_RETURN_IF_ERROR(check_2d(*a, op, "self"));
  ES_RETURN_IF_ERROR(check_2d(*b, op, "mat2"));
  ES_CHECK_OR_RETURN_ERROR(a->size(1) == b->size(0), Error::InvalidProgram,
                           "%s: inner dims %d and %d differ", op, a->size(1), b->size(0));
  ES_RETURN_IF_ERROR(resize_output(*out, {a->size(0), b->size(1)}, op));
  matmul(a->data<float>(), b->data<float>(), out->data<float>(), a->size(0), a->size(1),
         b->size(1));
  return Status();
}

// addmm(self, mat1[m, k], mat2[k, n], beta, alpha) = beta * self + alpha * mat1 @ mat2
Status addmm(Args args) {
  const char* op = "aten::addmm";
  ES_RETURN_IF_ERROR(expect_args(args, 6, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * a, float_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * b, float_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(const double beta, scalar_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(const double alpha, scalar_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 5, op));
  ES_RETURN_IF_ERROR(check_2d(*a, op, "mat1"));
  ES_RETURN_IF_ERROR(check_2d(*b, op, "mat2"));
  ES_CHECK_OR_RETURN_ERROR(a->size(1) == b->size(0), Error::InvalidProgram,
                           "%s: inner dims %d and %d differ", op, a->size(1), b->size(0));
  ES_RETURN_IF_ERROR(resize_output(*out, {a->size(0), b->size(1)}, op));
  matmul(a->data<float>(), b->data<float>(), out->data<float>(), a->size(0), a->size(1),
         b->size(1));
  const Tensor* inputs[] = {self};
  ES_ASSIGN_OR_RETURN(Broadcast bc, Broadcast::make(*out, inputs, 1, op));
  float* y = out->data<float>();
  const float* s = self->data<float>();
  const float fa = static_cast<float>(alpha);
  const float fb = static_cast<float>(beta);
  bc.for_each([&](size_t i, const size_t* o) { y[i] = fa * y[i] + fb * s[o[0]]; });
  return Status();
}

// bmm(self[b, m, k], mat2[b, k, n]) -> [b, m, n]
Status bmm(Args args) {
  const char* op = "aten::bmm";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * a, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * b, float_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 2, op));
  ES_CHECK_OR_RETURN_ERROR(
      a->dim() == 3 && b->dim() == 3 && a->size(0) == b->size(0) && a->size(2) == b->size(1),
      Error::InvalidProgram, "%s: shapes do not match", op);
  const size_t batch = a->size(0), m = a->size(1), k = a->size(2), n = b->size(2);
  ES_RETURN_IF_ERROR(resize_output(*out, {a->size(0), a->size(1), b->size(2)}, op));
  for (size_t i = 0; i < batch; ++i) {
    matmul(a->data<float>() + i * m * k, b->data<float>() + i * k * n,
           out->data<float>() + i * m * n, m, k, n);
  }
  return Status();
}

// Input counts are the schema's arguments; outputs follow.
const bool registered =
    register_kernel("aten::linear", linear, 3).ok() && register_kernel("aten::mm", mm, 2).ok() &&
    register_kernel("aten::addmm", addmm, 5).ok() && register_kernel("aten::bmm", bmm, 2).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
