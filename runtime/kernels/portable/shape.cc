// Portable shape kernels: views are materialised as copies into the planned output (the memory
// planner gives every value its own buffer), so they work for any dtype. Each computes its
// output's shape from its inputs and arguments and resizes the output to it.

#include <cstdint>
#include <cstring>
#include <limits>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
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

// Copies self into out resized to `shape` (same elements, another shape: view, clone, ...).
Status copy_as(const Tensor& self, Tensor& out, const Shape& shape, const char* op) {
  ES_RETURN_IF_ERROR(same_type(self, out, op));
  ES_CHECK_OR_RETURN_ERROR(shape.numel() == self.numel(), Error::InvalidProgram,
                           "%s: the output would have %zu elements, self has %zu", op,
                           shape.numel(), self.numel());
  ES_RETURN_IF_ERROR(resize_output(out, shape, op));
  if (out.nbytes() > 0) std::memcpy(out.mutable_data(), self.const_data(), out.nbytes());
  return Status();
}

// (self, size): sizes from the list, one of them may be -1 (inferred from self's elements).
Status view_like(Args args, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Span<const int64_t> sizes, int_list_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, op));
  Shape shape;
  size_t inferred = Tensor::kMaxDims;
  size_t known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      ES_CHECK_OR_RETURN_ERROR(inferred == Tensor::kMaxDims, Error::InvalidProgram,
                               "%s: more than one size is -1", op);
      inferred = i;
      ES_RETURN_IF_ERROR(append(shape, 0, op));
      continue;
    }
    ES_RETURN_IF_ERROR(append(shape, sizes[i], op));
    known *= static_cast<size_t>(sizes[i]);
  }
  if (inferred != Tensor::kMaxDims) {
    ES_CHECK_OR_RETURN_ERROR(known != 0 && self->numel() % known == 0, Error::InvalidProgram,
                             "%s: cannot infer the size -1 of a view of %zu elements", op,
                             self->numel());
    shape.sizes[inferred] = static_cast<int32_t>(self->numel() / known);
  }
  return copy_as(*self, *out, shape, op);
}

Status view(Args a) { return view_like(a, "aten::view"); }
Status unsafe_view(Args a) { return view_like(a, "aten::_unsafe_view"); }
Status reshape(Args a) { return view_like(a, "aten::reshape"); }
Status view_copy(Args a) { return view_like(a, "aten::view_copy"); }

// (self, ..., out) -> a copy of self with its shape.
Status copy_same_shape(Args args, size_t count, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, count, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, count - 1, op));
  return copy_as(*self, *out, shape_of(*self), op);
}

Status clone(Args a) { return copy_same_shape(a, 3, "aten::clone"); }
Status alias(Args a) { return copy_same_shape(a, 2, "aten::alias"); }

// unsqueeze(self, dim): a size-1 dim inserted at dim (of the result's rank).
Status unsqueeze(Args args) {
  const char* op = "aten::unsqueeze";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim() + 1, op));
  Shape shape;
  for (size_t d = 0; d <= self->dim(); ++d) {
    if (d == dim) ES_RETURN_IF_ERROR(append(shape, 1, op));
    if (d < self->dim()) ES_RETURN_IF_ERROR(append(shape, self->size(d), op));
  }
  return copy_as(*self, *out, shape, op);
}

// squeeze.dim(self, dim) and squeeze.dims(self, dims): the listed dims of size 1 removed.
Status squeeze(Args args) {
  const char* op = "aten::squeeze";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, op));
  ES_CHECK_OR_RETURN_ERROR(args[1]->is_int() || args[1]->is_int_list(), Error::InvalidProgram,
                           "%s: dim must be an int or an int list", op);
  const int64_t single = args[1]->is_int() ? args[1]->to_int() : 0;
  const Span<const int64_t> dims =
      args[1]->is_int() ? Span<const int64_t>(&single, 1) : args[1]->to_int_list();
  bool drop[Tensor::kMaxDims] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    ES_ASSIGN_OR_RETURN(const size_t d, dim_arg(dims[i], self->dim(), op));
    if (d < self->dim() && self->size(d) == 1) drop[d] = true;
  }
  Shape shape;
  for (size_t d = 0; d < self->dim(); ++d) {
    if (!drop[d]) ES_RETURN_IF_ERROR(append(shape, self->size(d), op));
  }
  return copy_as(*self, *out, shape, op);
}

// Copies elements of `self` to `out` where out's index i reads self at offsets from `strides`
// (one stride per out dim, in self's elements, plus a base offset). Trailing out dims that read
// self contiguously are copied as one block per memcpy: a KV cache's repeat (expand) or a slice
// over whole rows then moves rows, not single elements (decode ran ~6 ms per token in here).
void strided_copy(const Tensor& self, Tensor& out, const size_t* strides, size_t base) {
  const size_t elem = element_size(self.scalar_type());
  const auto* src = static_cast<const uint8_t*>(self.const_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  size_t rank = out.dim();
  size_t block = 1;  // elements per memcpy
  // A dim of size 1 moves no offset whatever its stride.
  while (rank > 0 && (strides[rank - 1] == block || out.size(rank - 1) == 1)) {
    block *= static_cast<size_t>(out.size(--rank));
  }
  const size_t numel = out.numel();
  if (numel == 0) return;
  size_t index[Tensor::kMaxDims] = {};
  size_t offset = base;
  for (size_t i = 0; i < numel; i += block) {
    std::memcpy(dst + i * elem, src + offset * elem, block * elem);
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
  ES_CHECK_OR_RETURN_ERROR(dims.size() == self->dim(), Error::InvalidProgram,
                           "%s: %zu dims for a rank-%zu tensor", op, dims.size(), self->dim());
  size_t in_strides[Tensor::kMaxDims];
  contiguous_strides(*self, in_strides);
  size_t strides[Tensor::kMaxDims];
  bool seen[Tensor::kMaxDims] = {};
  Shape shape;
  for (size_t d = 0; d < dims.size(); ++d) {
    ES_ASSIGN_OR_RETURN(const size_t from, dim_arg(dims[d], self->dim(), op));
    ES_CHECK_OR_RETURN_ERROR(!seen[from], Error::InvalidProgram, "%s: dims are not a permutation",
                             op);
    seen[from] = true;
    strides[d] = in_strides[from];
    ES_RETURN_IF_ERROR(append(shape, self->size(from), op));
  }
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  strided_copy(*self, *out, strides, 0);
  return Status();
}

// self with dims d0 and d1 swapped (both valid dims of a rank >= 1 self).
Status swap_dims(const Tensor& self, Tensor& out, size_t d0, size_t d1, const char* op) {
  ES_RETURN_IF_ERROR(same_type(self, out, op));
  size_t strides[Tensor::kMaxDims];
  contiguous_strides(self, strides);
  Shape shape = shape_of(self);
  if (self.dim() > 0) {
    const size_t tmp = strides[d0];
    strides[d0] = strides[d1];
    strides[d1] = tmp;
    shape.sizes[d0] = self.size(d1);
    shape.sizes[d1] = self.size(d0);
  }
  ES_RETURN_IF_ERROR(resize_output(out, shape, op));
  strided_copy(self, out, strides, 0);
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
  ES_ASSIGN_OR_RETURN(const size_t d0, dim_arg(d0_arg, self->dim(), op));
  ES_ASSIGN_OR_RETURN(const size_t d1, dim_arg(d1_arg, self->dim(), op));
  return swap_dims(*self, *out, d0, d1, op);
}

// t(self): 2-d transpose (1-d and 0-d are copies).
Status t(Args args) {
  const char* op = "aten::t";
  ES_RETURN_IF_ERROR(expect_args(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 1, op));
  if (self->dim() < 2) return copy_as(*self, *out, shape_of(*self), op);
  ES_CHECK_OR_RETURN_ERROR(self->dim() == 2, Error::InvalidProgram, "%s: self must be 2-d", op);
  return swap_dims(*self, *out, 0, 1, op);
}

// expand(self, size, implicit): self broadcast to size, where -1 keeps self's size.
Status expand(Args args) {
  const char* op = "aten::expand";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Span<const int64_t> sizes, int_list_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_RETURN_IF_ERROR(same_type(*self, *out, op));
  ES_CHECK_OR_RETURN_ERROR(sizes.size() >= self->dim(), Error::InvalidProgram,
                           "%s: %zu sizes for a rank-%zu tensor", op, sizes.size(), self->dim());
  const size_t lead = sizes.size() - self->dim();
  Shape shape;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t in = i < lead ? -1 : self->size(i - lead);
    const int64_t want = sizes[i] == -1 && i >= lead ? in : sizes[i];
    ES_CHECK_OR_RETURN_ERROR(in == -1 || in == 1 || in == want, Error::InvalidProgram,
                             "%s: dim %zu of size %lld cannot expand to %lld", op, i - lead,
                             static_cast<long long>(in), static_cast<long long>(want));
    ES_RETURN_IF_ERROR(append(shape, want, op));
  }
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  // A broadcast dim (new, or of size 1) reads self with stride 0.
  size_t in_strides[Tensor::kMaxDims];
  contiguous_strides(*self, in_strides);
  size_t strides[Tensor::kMaxDims];
  for (size_t i = 0; i < out->dim(); ++i) {
    const bool broadcast = i < lead || (self->size(i - lead) == 1 && out->size(i) != 1);
    strides[i] = broadcast ? 0 : in_strides[i - lead];
  }
  strided_copy(*self, *out, strides, 0);
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
  ES_CHECK_OR_RETURN_ERROR(self->dim() > 0 && step > 0, Error::InvalidProgram,
                           "%s: self must have a dim and step must be positive", op);
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
  Shape shape = shape_of(*self);
  shape.sizes[dim] = static_cast<int32_t>((end - start + step - 1) / step);
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
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
  ES_CHECK_OR_RETURN_ERROR(self->dim() > 0, Error::InvalidProgram, "%s: self is rank 0", op);
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim(), op));
  const int64_t size = self->size(dim);
  if (index < 0) index += size;
  ES_CHECK_OR_RETURN_ERROR(index >= 0 && index < size, Error::InvalidProgram,
                           "%s: index %lld is out of range for size %lld", op,
                           static_cast<long long>(index), static_cast<long long>(size));
  size_t in_strides[Tensor::kMaxDims];
  contiguous_strides(*self, in_strides);
  size_t strides[Tensor::kMaxDims];
  Shape shape;
  for (size_t d = 0; d < self->dim(); ++d) {
    if (d == dim) continue;
    strides[shape.rank] = in_strides[d];
    ES_RETURN_IF_ERROR(append(shape, self->size(d), op));
  }
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
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
    ES_CHECK_OR_RETURN_ERROR(sizes[k] >= 0 && sizes[k] <= self->size(dim), Error::InvalidProgram,
                             "%s: split size %lld is out of range", op,
                             static_cast<long long>(sizes[k]));
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
    Shape shape = shape_of(*self);
    shape.sizes[dim] = static_cast<int32_t>(sizes[k]);
    ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
    strided_copy(*self, *out, strides, start * strides[dim]);
    start += static_cast<size_t>(sizes[k]);
  }
  return Status();
}

// A 1-d tensor with no elements, which cat skips.
bool legacy_empty(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

// The shape of cat(items, dim) (items checked to be tensors of out's dtype), given the first
// item that is not skipped; its dim normalised into *dim.
Result<Shape> cat_shape(Span<EValue* const> items, const Tensor& first, int64_t dim_value,
                        size_t* dim, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(first.dim() > 0, Error::InvalidProgram,
                           "%s: zero-dim tensors cannot be joined", op);
  ES_ASSIGN_OR_RETURN(*dim, dim_arg(dim_value, first.dim(), op));
  Shape shape = shape_of(first);
  int64_t joined = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const Tensor& t = items[k]->to_tensor();
    if (legacy_empty(t)) continue;
    ES_CHECK_OR_RETURN_ERROR(t.dim() == first.dim(), Error::InvalidProgram,
                             "%s: item %zu has rank %zu, expected %zu", op, k, t.dim(),
                             first.dim());
    for (size_t d = 0; d < t.dim(); ++d) {
      ES_CHECK_OR_RETURN_ERROR(d == *dim || t.size(d) == first.size(d), Error::InvalidProgram,
                               "%s: item %zu has size %d in dim %zu, expected %d", op, k, t.size(d),
                               d, first.size(d));
    }
    joined += t.size(*dim);
  }
  ES_CHECK_OR_RETURN_ERROR(joined <= std::numeric_limits<int32_t>::max(), Error::InvalidProgram,
                           "%s: the joined size is out of range", op);
  shape.sizes[*dim] = static_cast<int32_t>(joined);
  return shape;
}

// cat(tensors, dim): the tensors joined along dim. As in torch, a 1-d tensor with no elements is
// skipped whatever its rank (the legacy empty tensor), so cat([empty, x]) is x.
Status cat(Args args) {
  const char* op = "aten::cat";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_CHECK_OR_RETURN_ERROR(args[0]->is_list(), Error::InvalidProgram,
                           "%s: argument 0 must be a list of tensors", op);
  const Span<EValue* const> items = args[0]->to_list();
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, op));
  ES_CHECK_OR_RETURN_ERROR(items.size() > 0, Error::InvalidProgram, "%s: no tensors", op);
  const Tensor* first = nullptr;  // the first tensor that is not skipped
  for (size_t k = 0; k < items.size(); ++k) {
    ES_CHECK_OR_RETURN_ERROR(items[k] != nullptr && items[k]->is_tensor(), Error::InvalidProgram,
                             "%s: item %zu is not a tensor", op, k);
    const Tensor& t = items[k]->to_tensor();
    ES_CHECK_OR_RETURN_ERROR(t.scalar_type() == out->scalar_type(), Error::NotSupported,
                             "%s: item %zu is %s, the output %s (mixed dtypes are not supported)",
                             op, k, to_string(t.scalar_type()), to_string(out->scalar_type()));
    if (!legacy_empty(t) && first == nullptr) first = &t;
  }
  if (first == nullptr) {  // every item is an empty 1-d tensor: so is the result
    return resize_output(*out, items[0]->to_tensor().sizes(), op);
  }
  size_t dim = 0;
  ES_ASSIGN_OR_RETURN(const Shape shape, cat_shape(items, *first, dim_value, &dim, op));
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  size_t outer = 1, inner = element_size(out->scalar_type());
  for (size_t d = 0; d < dim; ++d) outer *= static_cast<size_t>(shape.sizes[d]);
  for (size_t d = dim + 1; d < shape.rank; ++d) inner *= static_cast<size_t>(shape.sizes[d]);
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  for (size_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < items.size(); ++k) {
      const Tensor& t = items[k]->to_tensor();
      if (legacy_empty(t)) continue;
      const size_t bytes = static_cast<size_t>(t.size(dim)) * inner;
      if (bytes == 0) continue;
      std::memcpy(dst, static_cast<const uint8_t*>(t.const_data()) + o * bytes, bytes);
      dst += bytes;
    }
  }
  return Status();
}

// The row indices[i] names in a table of `rows` rows, or an error when it is outside.
Result<size_t> table_row(const Tensor& indices, size_t i, size_t rows, const char* op) {
  const int64_t index = load<int64_t>(indices.const_data(), indices.scalar_type(), i);
  ES_CHECK_OR_RETURN_ERROR(index >= 0 && static_cast<size_t>(index) < rows, Error::OutOfRange,
                           "%s: index %lld is outside the table of %zu rows", op,
                           static_cast<long long>(index), rows);
  return static_cast<size_t>(index);
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
  ES_CHECK_OR_RETURN_ERROR(
      indices->scalar_type() == ScalarType::Long || indices->scalar_type() == ScalarType::Int,
      Error::NotSupported, "%s: indices must be Long or Int", op);
  const size_t rows = weight->size(0), width = weight->size(1);
  Shape shape = shape_of(*indices);
  ES_RETURN_IF_ERROR(append(shape, weight->size(1), op));
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));
  const size_t row_bytes = width * element_size(weight->scalar_type());
  const auto* src = static_cast<const uint8_t*>(weight->const_data());
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  for (size_t i = 0; i < indices->numel(); ++i) {
    ES_ASSIGN_OR_RETURN(const size_t index, table_row(*indices, i, rows, op));
    std::memcpy(dst + i * row_bytes, src + index * row_bytes, row_bytes);
  }
  return Status();
}

// The operands of a quantized table's gather: (weight, scales, indices, out), with integer indices
// and a float output.
struct GatherOperands {
  Tensor* weight;
  Tensor* scales;
  Tensor* indices;
  Tensor* out;
};

Result<GatherOperands> gather_operands(Args args, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  GatherOperands g{};
  ES_ASSIGN_OR_RETURN(g.weight, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(g.scales, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(g.indices, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(g.out, tensor_arg(args, 3, op));
  ES_CHECK_OR_RETURN_ERROR(g.out->scalar_type() == ScalarType::Float, Error::InvalidProgram,
                           "%s: out must be float", op);
  ES_CHECK_OR_RETURN_ERROR(
      g.indices->scalar_type() == ScalarType::Long || g.indices->scalar_type() == ScalarType::Int,
      Error::NotSupported, "%s: indices must be Long or Int", op);
  return g;
}

// Resizes a gather's output to the indices' shape plus one row of `width`.
Status resize_gathered(const GatherOperands& g, size_t width, const char* op) {
  Shape shape = shape_of(*g.indices);
  ES_RETURN_IF_ERROR(append(shape, static_cast<int64_t>(width), op));
  return resize_output(*g.out, shape, op);
}

// edgeshare::embedding_qc8w(weight int8 [n, d], scales float [n], indices) -> float [..., d]:
// the gather of an int8-per-row table (exir/quantize.py's qc8w), each row written as q * scale, so
// one int8 entry serves a tied embedding and the lm_head's int8 matmul.
Status embedding_qc8w(Args args) {
  const char* op = "edgeshare::embedding_qc8w";
  ES_ASSIGN_OR_RETURN(const GatherOperands g, gather_operands(args, op));
  Tensor *weight = g.weight, *scales = g.scales, *indices = g.indices, *out = g.out;
  ES_CHECK_OR_RETURN_ERROR(weight->dim() == 2 && weight->scalar_type() == ScalarType::Char,
                           Error::InvalidProgram, "%s: weight must be a 2-d int8 tensor", op);
  const size_t rows = weight->size(0), width = weight->size(1);
  ES_CHECK_OR_RETURN_ERROR(scales->scalar_type() == ScalarType::Float && scales->numel() == rows,
                           Error::InvalidProgram, "%s: scales must be float with one per row (%zu)", op,
                           rows);
  ES_RETURN_IF_ERROR(resize_gathered(g, width, op));
  const auto* q = static_cast<const int8_t*>(weight->const_data());
  const auto* scale = static_cast<const float*>(scales->const_data());
  auto* dst = static_cast<float*>(out->mutable_data());
  for (size_t i = 0; i < indices->numel(); ++i) {
    ES_ASSIGN_OR_RETURN(const size_t index, table_row(*indices, i, rows, op));
    const int8_t* row = q + index * width;
    const float s = scale[index];
    float* y = dst + i * width;
    for (size_t j = 0; j < width; ++j) y[j] = static_cast<float>(row[j]) * s;
  }
  return Status();
}

// edgeshare::embedding_qb8w(weight int8 [n, d], scales half [n, d / 32], indices) -> float [..., d]:
// the gather of an int8 table in blocks of 32 (exir/quantize.py's qb8w), each value written as
// q * its block's scale (exact in float), so one entry serves a tied embedding and the lm_head's
// int8 matmul.
Status embedding_qb8w(Args args) {
  const char* op = "edgeshare::embedding_qb8w";
  constexpr size_t kBlock = 32;
  ES_ASSIGN_OR_RETURN(const GatherOperands g, gather_operands(args, op));
  Tensor *weight = g.weight, *scales = g.scales, *indices = g.indices;
  ES_CHECK_OR_RETURN_ERROR(weight->dim() == 2 && weight->scalar_type() == ScalarType::Char,
                           Error::InvalidProgram, "%s: weight must be a 2-d int8 tensor", op);
  const size_t rows = weight->size(0), width = weight->size(1);
  ES_CHECK_OR_RETURN_ERROR(width % kBlock == 0 && scales->dim() == 2 &&
                               scales->scalar_type() == ScalarType::Half &&
                               static_cast<size_t>(scales->size(0)) == rows &&
                               static_cast<size_t>(scales->size(1)) == width / kBlock,
                           Error::InvalidProgram,
                           "%s: a row of %zu needs half scales [%zu, %zu] (blocks of %zu)", op, width,
                           rows, width / kBlock, kBlock);
  ES_RETURN_IF_ERROR(resize_gathered(g, width, op));
  const auto* q = static_cast<const int8_t*>(weight->const_data());
  const auto* scale = static_cast<const uint16_t*>(scales->const_data());
  auto* dst = static_cast<float*>(g.out->mutable_data());
  const size_t blocks = width / kBlock;
  for (size_t i = 0; i < indices->numel(); ++i) {
    ES_ASSIGN_OR_RETURN(const size_t index, table_row(*indices, i, rows, op));
    const int8_t* row = q + index * width;
    float* y = dst + i * width;
    for (size_t b = 0; b < blocks; ++b) {
      const float s = kernels::half_to_float(scale[index * blocks + b]);
      for (size_t j = b * kBlock; j < (b + 1) * kBlock; ++j) y[j] = static_cast<float>(row[j]) * s;
    }
  }
  return Status();
}

// edgeshare::embedding_qb5w(weight uint8 [n, d * 5 / 8], scales half [n, d / 32], indices)
// -> float [..., d]: the gather of a 5-bit table in blocks of 32 (exir/_quantizers.py's qb5w: per
// row and block, u = w + 16's low nibbles two to a byte, then its fifth bits as a little-endian
// 32-bit word), only the looked-up rows, each value q * its block's scale (exact in float).
Status embedding_qb5w(Args args) {
  const char* op = "edgeshare::embedding_qb5w";
  constexpr size_t kBlock = 32, kBlockBytes = kBlock * 5 / 8;
  ES_ASSIGN_OR_RETURN(const GatherOperands g, gather_operands(args, op));
  Tensor *weight = g.weight, *scales = g.scales, *indices = g.indices;
  ES_CHECK_OR_RETURN_ERROR(weight->dim() == 2 && weight->scalar_type() == ScalarType::Byte,
                           Error::InvalidProgram, "%s: weight must be a 2-d uint8 tensor", op);
  const size_t rows = weight->size(0), row_bytes = weight->size(1);
  const size_t blocks = row_bytes / kBlockBytes, width = blocks * kBlock;
  ES_CHECK_OR_RETURN_ERROR(row_bytes % kBlockBytes == 0 && blocks > 0 && scales->dim() == 2 &&
                               scales->scalar_type() == ScalarType::Half &&
                               static_cast<size_t>(scales->size(0)) == rows &&
                               static_cast<size_t>(scales->size(1)) == blocks,
                           Error::InvalidProgram,
                           "%s: rows of %zu bytes need a multiple of %zu and half scales "
                           "[%zu, %zu]",
                           op, row_bytes, kBlockBytes, rows, blocks);
  ES_RETURN_IF_ERROR(resize_gathered(g, width, op));
  const auto* packed = static_cast<const uint8_t*>(weight->const_data());
  const auto* scale = static_cast<const uint16_t*>(scales->const_data());
  auto* dst = static_cast<float*>(g.out->mutable_data());
  for (size_t i = 0; i < indices->numel(); ++i) {
    ES_ASSIGN_OR_RETURN(const size_t index, table_row(*indices, i, rows, op));
    float* y = dst + i * width;
    for (size_t b = 0; b < blocks; ++b) {
      const uint8_t* block = packed + index * row_bytes + b * kBlockBytes;
      const uint8_t* fifth = block + kBlock / 2;
      const float s = kernels::half_to_float(scale[index * blocks + b]);
      for (size_t j = 0; j < kBlock; ++j) {
        const int low = (block[j / 2] >> (4 * (j % 2))) & 0xF;
        const int u = low | ((fifth[j / 8] >> (j % 8)) & 1) << 4;
        y[b * kBlock + j] = static_cast<float>(u - 16) * s;
      }
    }
  }
  return Status();
}

// edgeshare::embedding_qc4w(weight uint8 [n, d / 2], scales half [n, d / group], indices)
// -> float [..., d]: the gather of an int4 table (exir/quantize.py's qc4w), only the looked-up rows
// dequantized, each as q * scale per group. The group is d / the scales' columns.
Status embedding_qc4w(Args args) {
  const char* op = "edgeshare::embedding_qc4w";
  ES_ASSIGN_OR_RETURN(const GatherOperands g, gather_operands(args, op));
  Tensor *weight = g.weight, *scales = g.scales, *indices = g.indices;
  ES_CHECK_OR_RETURN_ERROR(weight->dim() == 2 && weight->scalar_type() == ScalarType::Byte,
                           Error::InvalidProgram, "%s: weight must be a 2-d uint8 tensor", op);
  const size_t rows = weight->size(0), width = 2 * static_cast<size_t>(weight->size(1));
  ES_CHECK_OR_RETURN_ERROR(scales->dim() == 2 && scales->scalar_type() == ScalarType::Half &&
                               static_cast<size_t>(scales->size(0)) == rows && scales->size(1) > 0,
                           Error::InvalidProgram, "%s: scales must be half [%zu, groups]", op, rows);
  const size_t groups = scales->size(1);
  const size_t group = width / groups;
  ES_CHECK_OR_RETURN_ERROR(group * groups == width && group % 2 == 0, Error::InvalidProgram,
                           "%s: %zu scales per row do not split a row of %zu into even groups", op,
                           groups, width);
  ES_RETURN_IF_ERROR(resize_gathered(g, width, op));
  const auto* q = static_cast<const uint8_t*>(weight->const_data());
  const auto* scale = static_cast<const uint16_t*>(scales->const_data());
  auto* dst = static_cast<float*>(g.out->mutable_data());
  const DequantizeQc4wRow row = dequantize_qc4w_row_kernel().row;
  for (size_t i = 0; i < indices->numel(); ++i) {
    ES_ASSIGN_OR_RETURN(const size_t index, table_row(*indices, i, rows, op));
    row(width, group, q + index * (width / 2), scale + index * groups, dst + i * width);
  }
  return Status();
}

// Input counts are the schema's arguments; outputs follow (split_with_sizes: one per piece).
const KernelEntry kKernels[] = {
    {"aten::view", view, 2},
    {"aten::_unsafe_view", unsafe_view, 2},
    {"aten::reshape", reshape, 2},
    {"aten::view_copy", view_copy, 2},
    {"aten::clone", clone, 2},
    {"aten::alias", alias, 1},
    {"aten::unsqueeze", unsqueeze, 2},
    {"aten::squeeze.dim", squeeze, 2},
    {"aten::squeeze.dims", squeeze, 2},
    {"aten::permute", permute, 2},
    {"aten::transpose.int", transpose, 3},
    {"aten::t", t, 1},
    {"aten::expand", expand, 3},
    {"aten::slice.Tensor", slice, 5},
    {"aten::select.int", select, 3},
    {"aten::split_with_sizes", split_with_sizes, 3},
    {"aten::embedding", embedding, 5},
    {"edgeshare::embedding_qc8w", embedding_qc8w, 3},
    {"edgeshare::embedding_qb8w", embedding_qb8w, 3},
    {"edgeshare::embedding_qb5w", embedding_qb5w, 3},
    {"edgeshare::embedding_qc4w", embedding_qc4w, 3},
    {"aten::cat", cat, 2},
};
const bool registered = register_kernels(kKernels);

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
