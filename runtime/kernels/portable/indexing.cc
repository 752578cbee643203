// Portable index.Tensor: torch's advanced indexing with integer index tensors, for any dtype.
//
// self[i0, None, i2] with index tensors i0, i2 (Long or Int; None keeps a dim): the index
// tensors broadcast together to a shape B; when the indexed dims are adjacent, B replaces them in
// place, otherwise B comes first, then the dims that are not indexed, in order (numpy's rule).
// Negative indices count from the end; one outside the dim is an OutOfRange error. Boolean mask
// indices (whose result size depends on the data) are not supported.

#include <cstring>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

constexpr const char* kOp = "aten::index.Tensor";

// The index tensors of one call and where they apply.
struct Indices {
  const Tensor* tensors[Tensor::kMaxDims] = {};
  size_t dims[Tensor::kMaxDims] = {};  // the self dim each indexes, ascending
  size_t count = 0;
  Shape broadcast;  // B
  // strides[k][j]: the step in tensor k's elements per step of B's dim j (0 where broadcast).
  size_t strides[Tensor::kMaxDims][Tensor::kMaxDims] = {};
};

Result<Indices> read_indices(const Tensor& self, Span<EValue* const> items) {
  ES_CHECK_OR_RETURN_ERROR(items.size() <= self.dim(), Error::InvalidProgram,
                           "%s: %zu indices for a rank-%zu tensor", kOp, items.size(), self.dim());
  Indices ix;
  for (size_t d = 0; d < items.size(); ++d) {
    ES_CHECK_OR_RETURN_ERROR(items[d] != nullptr, Error::InvalidProgram, "%s: index %zu is missing",
                             kOp, d);
    if (items[d]->is_none()) continue;
    ES_CHECK_OR_RETURN_ERROR(items[d]->is_tensor(), Error::InvalidProgram,
                             "%s: index %zu must be a tensor or None", kOp, d);
    const Tensor& t = items[d]->to_tensor();
    ES_CHECK_OR_RETURN_ERROR(
        t.scalar_type() == ScalarType::Long || t.scalar_type() == ScalarType::Int,
        Error::NotSupported, "%s: index %zu is %s; only Long and Int indices are supported", kOp, d,
        to_string(t.scalar_type()));
    ix.tensors[ix.count] = &t;
    ix.dims[ix.count++] = d;
  }
  ES_ASSIGN_OR_RETURN(ix.broadcast, broadcast_shape(ix.tensors, ix.count, kOp));
  for (size_t k = 0; k < ix.count; ++k) {
    const Tensor& t = *ix.tensors[k];
    size_t stride = 1;
    for (size_t j = t.dim(); j-- > 0;) {
      const size_t b = ix.broadcast.rank - t.dim() + j;
      ix.strides[k][b] = t.size(j) == 1 ? 0 : stride;
      stride *= static_cast<size_t>(t.size(j));
    }
  }
  return ix;
}

// The output's shape: each out dim is a self dim (source[i] = d) or a dim j of B
// (source[i] = -1 - j).
Result<Shape> index_shape(const Tensor& self, const Indices& ix, int* source) {
  const size_t first = ix.dims[0], last = ix.dims[ix.count - 1];
  const bool adjacent = last - first + 1 == ix.count;
  Shape shape;
  const size_t lead = adjacent ? first : 0;  // self dims before B
  for (size_t d = 0; d < lead; ++d) {
    source[shape.rank] = static_cast<int>(d);
    ES_RETURN_IF_ERROR(append(shape, self.size(d), kOp));
  }
  for (size_t j = 0; j < ix.broadcast.rank; ++j) {
    source[shape.rank] = -1 - static_cast<int>(j);
    ES_RETURN_IF_ERROR(append(shape, ix.broadcast.sizes[j], kOp));
  }
  size_t k = 0;
  for (size_t d = lead; d < self.dim(); ++d) {
    if (k < ix.count && ix.dims[k] == d) {
      ++k;
      continue;
    }
    source[shape.rank] = static_cast<int>(d);
    ES_RETURN_IF_ERROR(append(shape, self.size(d), kOp));
  }
  return shape;
}

// The offset in self (in elements) the index tensors pick at B's position b_pos, added to base.
Result<size_t> picked_offset(const Tensor& self, const Indices& ix, const size_t* self_strides,
                             const size_t* b_pos, size_t base) {
  size_t offset = base;
  for (size_t t = 0; t < ix.count; ++t) {
    size_t at = 0;
    for (size_t j = 0; j < ix.broadcast.rank; ++j) at += b_pos[j] * ix.strides[t][j];
    const int64_t raw =
        load<int64_t>(ix.tensors[t]->const_data(), ix.tensors[t]->scalar_type(), at);
    const int64_t size = self.size(ix.dims[t]);
    const int64_t v = raw < 0 ? raw + size : raw;
    ES_CHECK_OR_RETURN_ERROR(v >= 0 && v < size, Error::OutOfRange,
                             "%s: index %lld is out of range for dim %zu of size %lld", kOp,
                             static_cast<long long>(raw), ix.dims[t], static_cast<long long>(size));
    offset += static_cast<size_t>(v) * self_strides[ix.dims[t]];
  }
  return offset;
}

Status index(Args args) {
  ES_RETURN_IF_ERROR(expect_args(args, 3, kOp));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, kOp));
  ES_CHECK_OR_RETURN_ERROR(args[1]->is_list(), Error::InvalidProgram,
                           "%s: argument 1 must be a list of tensors or None", kOp);
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, kOp));
  ES_CHECK_OR_RETURN_ERROR(self->scalar_type() == out->scalar_type(), Error::InvalidProgram,
                           "%s: output dtype %s differs from input dtype %s", kOp,
                           to_string(out->scalar_type()), to_string(self->scalar_type()));
  ES_ASSIGN_OR_RETURN(const Indices ix, read_indices(*self, args[1]->to_list()));
  if (ix.count == 0) {  // all None: self itself
    ES_RETURN_IF_ERROR(resize_output(*out, self->sizes(), kOp));
    if (out->nbytes() > 0) std::memcpy(out->mutable_data(), self->const_data(), out->nbytes());
    return Status();
  }
  int source[Tensor::kMaxDims];
  ES_ASSIGN_OR_RETURN(const Shape shape, index_shape(*self, ix, source));
  ES_RETURN_IF_ERROR(resize_output(*out, shape, kOp));

  // Self dims after the last indexed one end out's shape in both layouts and are contiguous in
  // self: copy them as one block per position of the other out dims.
  const size_t rank = self->dim(), last = ix.dims[ix.count - 1];
  size_t self_strides[Tensor::kMaxDims];
  size_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    self_strides[d] = stride;
    stride *= static_cast<size_t>(self->size(d));
  }
  const size_t elem = element_size(self->scalar_type());
  const size_t block = self_strides[last] * elem;
  const size_t outer_rank = shape.rank - (rank - 1 - last);
  size_t positions = 1;
  for (size_t i = 0; i < outer_rank; ++i) positions *= static_cast<size_t>(shape.sizes[i]);
  const auto* src = static_cast<const uint8_t*>(self->const_data());
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  size_t pos[Tensor::kMaxDims] = {};
  for (size_t p = 0; p < positions; ++p) {
    size_t base = 0;
    size_t b_pos[Tensor::kMaxDims] = {};
    for (size_t i = 0; i < outer_rank; ++i) {
      if (source[i] >= 0) {
        base += pos[i] * self_strides[source[i]];
      } else {
        b_pos[-1 - source[i]] = pos[i];
      }
    }
    ES_ASSIGN_OR_RETURN(const size_t offset, picked_offset(*self, ix, self_strides, b_pos, base));
    if (block > 0) std::memcpy(dst, src + offset * elem, block);
    dst += block;
    for (size_t i = outer_rank; i-- > 0;) {
      if (++pos[i] < static_cast<size_t>(shape.sizes[i])) break;
      pos[i] = 0;
    }
  }
  return Status();
}

// index.Tensor(self, indices): two inputs; the output follows.
const bool registered = register_kernel("aten::index.Tensor", index, 2).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
