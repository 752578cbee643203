// Portable fp32 reductions over a list of dims: sum.dim_IntList and mean.dim (what torch's
// matmul of a vector and softmax-free norms decompose to).

#include <cmath>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// (self, dim?, keepdim, dtype?, out): out = sum (or mean) of self over dim (None or []: all).
Status reduce(Args args, bool mean, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, 5, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t keepdim, int_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 4, op));
  ES_CHECK_OR_RETURN_ERROR(
      args[3]->is_none() ||
          (args[3]->is_int() && args[3]->to_int() == static_cast<int64_t>(ScalarType::Float)),
      Error::NotSupported, "%s: only a Float result is supported", op);
  const size_t rank = self->dim();
  bool reduced[Tensor::kMaxDims] = {};
  size_t num_reduced = 0;
  if (args[1]->is_none() || (args[1]->is_int_list() && args[1]->to_int_list().size() == 0)) {
    for (size_t d = 0; d < rank; ++d) reduced[d] = true;
    num_reduced = rank;
  } else {
    ES_ASSIGN_OR_RETURN(Span<const int64_t> dims, int_list_arg(args, 1, op));
    for (size_t i = 0; i < dims.size(); ++i) {
      ES_ASSIGN_OR_RETURN(const size_t d, dim_arg(dims[i], rank, op));
      if (rank == 0) continue;  // dim 0 / -1 of a scalar reduces nothing
      ES_CHECK_OR_RETURN_ERROR(!reduced[d], Error::InvalidProgram, "%s: dim %zu appears twice", op,
                               d);
      reduced[d] = true;
      ++num_reduced;
    }
  }
  // The output's shape: kept dims, or every dim with reduced ones as 1 (keepdim).
  size_t out_rank = 0;
  size_t count = 1;  // elements reduced into each output element
  for (size_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      count *= static_cast<size_t>(self->size(d));
      if (keepdim != 0) {
        ES_CHECK_OR_RETURN_ERROR(out_rank < out->dim() && out->size(out_rank) == 1,
                                 Error::InvalidProgram, "%s: output shape does not match", op);
        ++out_rank;
      }
    } else {
      ES_CHECK_OR_RETURN_ERROR(out_rank < out->dim() && out->size(out_rank) == self->size(d),
                               Error::InvalidProgram, "%s: output shape does not match", op);
      ++out_rank;
    }
  }
  ES_CHECK_OR_RETURN_ERROR(out_rank == out->dim(), Error::InvalidProgram,
                           "%s: output rank %zu, expected %zu", op, out->dim(), out_rank);
  // Output stride of each input dim (0 for reduced dims), walking self in order.
  size_t strides[Tensor::kMaxDims] = {};
  size_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    if (reduced[d]) continue;
    strides[d] = stride;
    stride *= static_cast<size_t>(self->size(d));
  }
  float* y = out->data<float>();
  const float* x = self->data<float>();
  const size_t out_numel = out->numel();
  for (size_t i = 0; i < out_numel; ++i) y[i] = 0.0f;
  size_t index[Tensor::kMaxDims] = {};
  size_t offset = 0;
  for (size_t i = 0; i < self->numel(); ++i) {
    y[offset] += x[i];
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      offset += strides[d];
      if (index[d] < static_cast<size_t>(self->size(d))) break;
      offset -= strides[d] * index[d];
      index[d] = 0;
    }
  }
  if (mean) {
    // torch: the mean over no elements is NaN.
    const float scale = 1.0f / static_cast<float>(count);
    for (size_t i = 0; i < out_numel; ++i) y[i] = count == 0 ? NAN : y[i] * scale;
  }
  return Status();
}

Status sum(Args args) { return reduce(args, false, "aten::sum.dim_IntList"); }
Status mean(Args args) { return reduce(args, true, "aten::mean.dim"); }

// Input counts are the schema's arguments; outputs follow.
const bool registered = register_kernel("aten::sum.dim_IntList", sum, 4).ok() &&
                        register_kernel("aten::mean.dim", mean, 4).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
