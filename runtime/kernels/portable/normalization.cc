// Portable fp32 softmax and layer norm; outputs are resized to the input's shape (layer norm's
// mean and rstd to it with the normalized dims as 1).

#include <cmath>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// Softmax (or log-softmax) of self along dim into out; self and out have the same shape.
Status softmax_along(const Tensor& self, Tensor& out, int64_t dim_arg_value, bool log,
                     const char* op) {
  ES_RETURN_IF_ERROR(resize_output(out, self.sizes(), op));
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_arg_value, self.dim(), op));
  size_t outer = 1, inner = 1;
  const size_t n = self.dim() == 0 ? 1 : static_cast<size_t>(self.size(dim));
  for (size_t d = 0; d < dim; ++d) outer *= self.size(d);
  for (size_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  const float* x = self.data<float>();
  float* y = out.data<float>();
  for (size_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < inner; ++i) {
      const size_t base = o * n * inner + i;
      float max = -INFINITY;
      for (size_t j = 0; j < n; ++j) max = std::fmax(max, x[base + j * inner]);
      float sum = 0.0f;
      for (size_t j = 0; j < n; ++j) sum += std::exp(x[base + j * inner] - max);
      for (size_t j = 0; j < n; ++j) {
        const float shifted = x[base + j * inner] - max;
        y[base + j * inner] = log ? shifted - std::log(sum) : std::exp(shifted) / sum;
      }
    }
  }
  return Status();
}

// _softmax(self, dim, half_to_float)
Status softmax(Args args) {
  const char* op = "aten::_softmax";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 3, op));
  return softmax_along(*self, *out, dim, false, op);
}

Status log_softmax(Args args) {
  const char* op = "aten::_log_softmax";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 3, op));
  return softmax_along(*self, *out, dim, true, op);
}

// softmax.int(self, dim, dtype?)
Status softmax_int(Args args) {
  const char* op = "aten::softmax.int";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 3, op));
  return softmax_along(*self, *out, dim, false, op);
}

// Normalises the last len(normalized_shape) dims; mean/rstd may be null.
Status layer_norm_into(Args args, size_t first_output, Tensor* mean, Tensor* rstd, const char* op) {
  ES_ASSIGN_OR_RETURN(Tensor * input, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Span<const int64_t> shape, int_list_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * weight, optional_float_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * bias, optional_float_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(const double eps, scalar_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, first_output, op));
  ES_CHECK_OR_RETURN_ERROR(shape.size() <= input->dim(), Error::InvalidProgram,
                           "%s: normalized_shape has more dims than the input", op);
  ES_RETURN_IF_ERROR(resize_output(*out, input->sizes(), op));
  size_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t d = input->dim() - shape.size() + i;
    ES_CHECK_OR_RETURN_ERROR(shape[i] == input->size(d), Error::InvalidProgram,
                             "%s: normalized_shape does not match the input", op);
    n *= static_cast<size_t>(shape[i]);
  }
  ES_CHECK_OR_RETURN_ERROR(n > 0, Error::InvalidProgram, "%s: empty normalized shape", op);
  ES_CHECK_OR_RETURN_ERROR(weight == nullptr || weight->numel() == n, Error::InvalidProgram,
                           "%s: weight must have %zu elements", op, n);
  ES_CHECK_OR_RETURN_ERROR(bias == nullptr || bias->numel() == n, Error::InvalidProgram,
                           "%s: bias must have %zu elements", op, n);
  const size_t rows = input->numel() / n;
  // mean and rstd: the input's shape with the normalized dims as 1.
  Shape stats = shape_of(*input);
  for (size_t d = input->dim() - shape.size(); d < input->dim(); ++d) stats.sizes[d] = 1;
  if (mean != nullptr) ES_RETURN_IF_ERROR(resize_output(*mean, stats, op));
  if (rstd != nullptr) ES_RETURN_IF_ERROR(resize_output(*rstd, stats, op));
  const float* x = input->data<float>();
  float* y = out->data<float>();
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += xr[i];
    const double mu = sum / n;
    double var = 0.0;
    for (size_t i = 0; i < n; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    const float inv = static_cast<float>(1.0 / std::sqrt(var / n + eps));
    for (size_t i = 0; i < n; ++i) {
      float v = (xr[i] - static_cast<float>(mu)) * inv;
      if (weight != nullptr) v *= weight->data<float>()[i];
      if (bias != nullptr) v += bias->data<float>()[i];
      y[r * n + i] = v;
    }
    if (mean != nullptr) mean->data<float>()[r] = static_cast<float>(mu);
    if (rstd != nullptr) rstd->data<float>()[r] = inv;
  }
  return Status();
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
Status native_layer_norm(Args args) {
  const char* op = "aten::native_layer_norm";
  ES_RETURN_IF_ERROR(expect_args(args, 8, op));
  ES_ASSIGN_OR_RETURN(Tensor * mean, float_arg(args, 6, op));
  ES_ASSIGN_OR_RETURN(Tensor * rstd, float_arg(args, 7, op));
  return layer_norm_into(args, 5, mean, rstd, op);
}

// layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable) -> out
Status layer_norm(Args args) {
  const char* op = "aten::layer_norm";
  ES_RETURN_IF_ERROR(expect_args(args, 7, op));
  return layer_norm_into(args, 6, nullptr, nullptr, op);
}

// Input counts are the schema's arguments; outputs follow.
const bool registered = register_kernel("aten::_softmax", softmax, 3).ok() &&
                        register_kernel("aten::softmax.int", softmax_int, 3).ok() &&
                        register_kernel("aten::_log_softmax", log_softmax, 3).ok() &&
                        register_kernel("aten::native_layer_norm", native_layer_norm, 5).ok() &&
                        register_kernel("aten::layer_norm", layer_norm, 6).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
