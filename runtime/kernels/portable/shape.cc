// Portable shape kernels: views are materialised as copies into the planned output (the memory
// planner gives every value its own buffer), so they work for any dtype.

#include <cstring>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

Status same_type(const Tensor& a, const Tensor& b, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(a.scalar_type() == b.scalar_type(), Error::InvalidProgram,
                           "%s: output dtype %s differs from input dtype %s", op,
                           to_string(b.scalar_type()), to_string(a.scalar_type()));
  return Status();
}

// Copies self into out when both have the same number of elements (view, reshape, clone, ...).
Status copy_same_numel(Args args, size_t count, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, count, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, count - 1, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  ES_RETURN_IF_ERROR(expect_numel(*out, self->numel(), op));
  if (out->nbytes() > 0) std::memcpy(out->mutable_data(), self->const_data(), out->nbytes());
  return Status();
}

Status view(Args a) { return copy_same_numel(a, 3, "aten::view"); }
Status unsafe_view(Args a) { return copy_same_numel(a, 3, "aten::_unsafe_view"); }
Status reshape(Args a) { return copy_same_numel(a, 3, "aten::reshape"); }
Status view_copy(Args a) { return copy_same_numel(a, 3, "aten::view_copy"); }
Status clone(Args a) { return copy_same_numel(a, 3, "aten::clone"); }
Status alias(Args a) { return copy_same_numel(a, 2, "aten::alias"); }
Status unsqueeze(Args a) { return copy_same_numel(a, 3, "aten::unsqueeze"); }
Status squeeze_dim(Args a) { return copy_same_numel(a, 3, "aten::squeeze"); }

// Copies elements of `self` to `out` where out's index i reads self at offsets from `strides`
// (one stride per out dim, in self's elements, plus a base offset).
void strided_copy(const Tensor& self, Tensor& out, const size_t* strides, size_t base) {
  const size_t elem = element_size(self.scalar_type());
  const auto* src = static_cast<const uint8_t*>(self.const_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  size_t index[Tensor::kMaxDims] = {};
  size_t offset = base;
  const size_t rank = out.dim();
  for (size_t i = 0; i < out.numel(); ++i) {
    std::memcpy(dst + i * elem, src + offset * elem, elem);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      offset += strides[d];
      if (index[d] < static_cast<size_t>(out.size(d))) break;
      offset -= strides[d] * index[d];
      index[d] = 0;
    }
  }
}

void contiguous_strides(const Tensor& t, size_t* strides) {
  size_t s = 1;
  for (size_t d = t.dim(); d-- > 0;) {
    strides[d] = s;
    s *= static_cast<size_t>(t.size(d));
  }
}

// permute(self, dims)
Status permute(Args args) {
  const char* op = "aten::permute";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Span<const int64_t> dims, int_list_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  ES_CHECK_OR_RETURN_ERROR(dims.size() == self->dim() && out->dim() == self->dim(),
                           Error::InvalidProgram, "%s: dims do not match the rank", op);
  size_t in_strides[Tensor::kMaxDims];
  contiguous_strides(*self, in_strides);
  size_t strides[Tensor::kMaxDims];
  bool seen[Tensor::kMaxDims] = {};
  for (size_t d = 0; d < dims.size(); ++d) {
    ES_ASSIGN_OR_RETURN(const size_t from, dim_arg(dims[d], self->dim(), op));
    ES_CHECK_OR_RETURN_ERROR(!seen[from] && out->size(d) == self->size(from), Error::InvalidProgram,
                             "%s: dims are not a permutation matching the output", op);
    seen[from] = true;
    strides[d] = in_strides[from];
  }
  strided_copy(*self, *out, strides, 0);
  return Status();
}

// transpose.int(self, dim0, dim1)
Status transpose(Args args) {
  const char* op = "aten::transpose";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t d0_arg, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(const int64_t d1_arg, int_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  ES_ASSIGN_OR_RETURN(const size_t d0, dim_arg(d0_arg, self->dim(), op));
  ES_ASSIGN_OR_RETURN(const size_t d1, dim_arg(d1_arg, self->dim(), op));
  ES_CHECK_OR_RETURN_ERROR(out->dim() == self->dim(), Error::InvalidProgram, "%s: rank differs",
                           op);
  size_t strides[Tensor::kMaxDims];
  contiguous_strides(*self, strides);
  if (self->dim() > 0) {
    const size_t tmp = strides[d0];
    strides[d0] = strides[d1];
    strides[d1] = tmp;
  }
  for (size_t d = 0; d < self->dim(); ++d) {
    const size_t from = d == d0 ? d1 : (d == d1 ? d0 : d);
    ES_CHECK_OR_RETURN_ERROR(out->size(d) == self->size(from), Error::InvalidProgram,
                             "%s: output shape does not match", op);
  }
  strided_copy(*self, *out, strides, 0);
  return Status();
}

// t(self): 2-d transpose (1-d and 0-d are copies).
Status t(Args args) {
  const char* op = "aten::t";
  ES_RETURN_IF_ERROR(expect_args(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 1, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  if (self->dim() < 2) return copy_same_numel(args, 2, op);
  ES_CHECK_OR_RETURN_ERROR(self->dim() == 2 && out->dim() == 2 && out->size(0) == self->size(1) &&
                               out->size(1) == self->size(0),
                           Error::InvalidProgram, "%s: shapes do not match", op);
  const size_t strides[2] = {1, static_cast<size_t>(self->size(1))};
  strided_copy(*self, *out, strides, 0);
  return Status();
}

// expand(self, size, implicit): broadcast self to out's shape.
Status expand(Args args) {
  const char* op = "aten::expand";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  const Tensor* inputs[] = {self};
  ES_ASSIGN_OR_RETURN(Broadcast b, Broadcast::make(*out, inputs, 1, op));
  const size_t elem = element_size(self->scalar_type());
  const auto* src = static_cast<const uint8_t*>(self->const_data());
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  b.for_each(
      [&](size_t i, const size_t* o) { std::memcpy(dst + i * elem, src + o[0] * elem, elem); });
  return Status();
}

// slice.Tensor(self, dim, start?, end?, step)
Status slice(Args args) {
  const char* op = "aten::slice";
  ES_RETURN_IF_ERROR(expect_args(args, 6, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(const int64_t step, int_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 5, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim(), op));
  ES_CHECK_OR_RETURN_ERROR(self->dim() > 0 && out->dim() == self->dim() && step > 0,
                           Error::InvalidProgram, "%s: bad arguments", op);
  const int64_t size = self->size(dim);
  // Checked before reading: to_int() of a value of another kind reads the wrong union member.
  ES_CHECK_OR_RETURN_ERROR(args[2]->is_none() || args[2]->is_int(), Error::InvalidProgram,
                           "%s: start must be an int", op);
  ES_CHECK_OR_RETURN_ERROR(args[3]->is_none() || args[3]->is_int(), Error::InvalidProgram,
                           "%s: end must be an int", op);
  int64_t start = args[2]->is_none() ? 0 : args[2]->to_int();
  int64_t end = args[3]->is_none() ? size : args[3]->to_int();
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : (start > size ? size : start);
  end = end < start ? start : (end > size ? size : end);
  const int64_t count = (end - start + step - 1) / step;
  for (size_t d = 0; d < self->dim(); ++d) {
    const int64_t want = d == dim ? count : self->size(d);
    ES_CHECK_OR_RETURN_ERROR(out->size(d) == want, Error::InvalidProgram,
                             "%s: output shape does not match", op);
  }
  size_t strides[Tensor::kMaxDims];
  contiguous_strides(*self, strides);
  const size_t base = static_cast<size_t>(start) * strides[dim];
  strides[dim] *= static_cast<size_t>(step);
  strided_copy(*self, *out, strides, base);
  return Status();
}

// select.int(self, dim, index)
Status select(Args args) {
  const char* op = "aten::select";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(int64_t index, int_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  ES_CHECK_OR_RETURN_ERROR(self->dim() > 0 && out->dim() + 1 == self->dim(), Error::InvalidProgram,
                           "%s: output rank must be one less", op);
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim(), op));
  const int64_t size = self->size(dim);
  if (index < 0) index += size;
  ES_CHECK_OR_RETURN_ERROR(index >= 0 && index < size, Error::InvalidProgram,
                           "%s: index out of range", op);
  size_t in_strides[Tensor::kMaxDims];
  contiguous_strides(*self, in_strides);
  size_t strides[Tensor::kMaxDims];
  for (size_t d = 0, o = 0; d < self->dim(); ++d) {
    if (d == dim) continue;
    ES_CHECK_OR_RETURN_ERROR(out->size(o) == self->size(d), Error::InvalidProgram,
                             "%s: output shape does not match", op);
    strides[o++] = in_strides[d];
  }
  strided_copy(*self, *out, strides, static_cast<size_t>(index) * in_strides[dim]);
  return Status();
}

// split_with_sizes(self, split_sizes, dim) -> out0, out1, ...: consecutive slices along dim.
Status split_with_sizes(Args args) {
  const char* op = "aten::split_with_sizes";
  ES_CHECK_OR_RETURN_ERROR(args.size() >= 4, Error::InvalidProgram,
                           "%s takes (self, split_sizes, dim) and at least one output", op);
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Span<const int64_t> sizes, int_list_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 2, op));
  ES_CHECK_OR_RETURN_ERROR(self->dim() > 0, Error::InvalidProgram, "%s: self is rank 0", op);
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim(), op));
  ES_CHECK_OR_RETURN_ERROR(sizes.size() == args.size() - 3, Error::InvalidProgram,
                           "%s: %zu split sizes but %zu outputs", op, sizes.size(),
                           args.size() - 3);
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ES_CHECK_OR_RETURN_ERROR(sizes[k] >= 0, Error::InvalidProgram, "%s: negative split size", op);
    total += sizes[k];
  }
  ES_CHECK_OR_RETURN_ERROR(total == self->size(dim), Error::InvalidProgram,
                           "%s: split sizes add up to %lld, dim %zu has %d", op,
                           static_cast<long long>(total), dim, self->size(dim));
  size_t strides[Tensor::kMaxDims];
  contiguous_strides(*self, strides);
  size_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3 + k, op));
    ES_RETURN_IF_ERROR(same_type(*self, *out, op));
    ES_CHECK_OR_RETURN_ERROR(out->dim() == self->dim(), Error::InvalidProgram,
                             "%s: output %zu has rank %zu", op, k, out->dim());
    for (size_t d = 0; d < self->dim(); ++d) {
      const int64_t want = d == dim ? sizes[k] : self->size(d);
      ES_CHECK_OR_RETURN_ERROR(out->size(d) == want, Error::InvalidProgram,
                               "%s: output %zu does not match its split", op, k);
    }
    strided_copy(*self, *out, strides, start * strides[dim]);
    start += static_cast<size_t>(sizes[k]);
  }
  return Status();
}

// embedding(weight[n, d], indices, padding_idx, scale_grad_by_freq, sparse) -> [..., d]
Status embedding(Args args) {
  const char* op = "aten::embedding";
  ES_RETURN_IF_ERROR(expect_args(args, 6, op));
  ES_ASSIGN_OR_RETURN(Tensor * weight, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * indices, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 5, op));
  ES_RETURN_IF_ERROR(same_type(*weight, *out, op));
  ES_CHECK_OR_RETURN_ERROR(weight->dim() == 2, Error::InvalidProgram, "%s: weight must be 2-d", op);
  const size_t rows = weight->size(0), width = weight->size(1);
  ES_RETURN_IF_ERROR(expect_numel(*out, indices->numel() * width, op));
  const size_t row_bytes = width * element_size(weight->scalar_type());
  const auto* src = static_cast<const uint8_t*>(weight->const_data());
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  for (size_t i = 0; i < indices->numel(); ++i) {
    int64_t index;
    if (indices->scalar_type() == ScalarType::Long) {
      index = indices->data<int64_t>()[i];
    } else {
      ES_CHECK_OR_RETURN_ERROR(indices->scalar_type() == ScalarType::Int, Error::NotSupported,
                               "%s: indices must be Long or Int", op);
      index = indices->data<int32_t>()[i];
    }
    ES_CHECK_OR_RETURN_ERROR(index >= 0 && static_cast<size_t>(index) < rows, Error::OutOfRange,
                             "%s: index %lld is outside the table of %zu rows", op,
                             static_cast<long long>(index), rows);
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(index) * row_bytes, row_bytes);
  }
  return Status();
}

// Input counts are the schema's arguments; outputs follow (split_with_sizes: one per piece).
const bool registered = [] {
  struct {
    const char* name;
    KernelFn fn;
    size_t num_inputs;
  } const kernels[] = {
      {"aten::view", view, 2},
      {"aten::_unsafe_view", unsafe_view, 2},
      {"aten::reshape", reshape, 2},
      {"aten::view_copy", view_copy, 2},
      {"aten::clone", clone, 2},
      {"aten::alias", alias, 1},
      {"aten::unsqueeze", unsqueeze, 2},
      {"aten::squeeze.dim", squeeze_dim, 2},
      {"aten::squeeze.dims", squeeze_dim, 2},
      {"aten::permute", permute, 2},
      {"aten::transpose.int", transpose, 3},
      {"aten::t", t, 1},
      {"aten::expand", expand, 3},
      {"aten::slice.Tensor", slice, 5},
      {"aten::select.int", select, 3},
      {"aten::split_with_sizes", split_with_sizes, 3},
      {"aten::embedding", embedding, 5},
  };
  bool ok = true;
  for (const auto& k : kernels) ok &= register_kernel(k.name, k.fn, k.num_inputs).ok();
  return ok;
}();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
