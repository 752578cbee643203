// Portable kernels that update a method's state (a KV cache) in place: index_put and copy.
//
// The exporter gives index_put the state tensor as both `self` and the output when nothing reads
// the old value afterwards, so the new rows are written where they live: out == self skips the
// copy of self, and the cost is the rows written, not the cache size.

#include <cstring>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

Status copy_self(const Tensor& self, Tensor* out, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(self.scalar_type() == out->scalar_type(), Error::InvalidProgram,
                           "%s: output dtype %s differs from input dtype %s", op,
                           to_string(out->scalar_type()), to_string(self.scalar_type()));
  ES_RETURN_IF_ERROR(resize_output(*out, self.sizes(), op));
  if (out->mutable_data() != self.const_data() && self.nbytes() > 0) {
    std::memcpy(out->mutable_data(), self.const_data(), self.nbytes());
  }
  return Status();
}

// The one index tensor of an index_put: indices are None up to `dim`, then one 1-D int64 tensor,
// then None or nothing (the pattern torch.export records for index_copy_ and cache[:, :, pos]).
struct OneIndex {
  size_t dim = 0;
  const Tensor* index = nullptr;
};

Result<OneIndex> one_index(Span<EValue* const> indices, size_t rank, const char* op) {
  OneIndex found;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i]->is_none()) continue;
    ES_CHECK_OR_RETURN_ERROR(indices[i]->is_tensor() && found.index == nullptr, Error::NotSupported,
                             "%s: only one index tensor (the others None) is supported", op);
    found.dim = i;
    found.index = &indices[i]->to_tensor();
  }
  ES_CHECK_OR_RETURN_ERROR(found.index != nullptr && found.dim < rank, Error::NotSupported,
                           "%s: needs one index tensor within the rank", op);
  ES_CHECK_OR_RETURN_ERROR(
      found.index->scalar_type() == ScalarType::Long && found.index->dim() == 1,
      Error::NotSupported, "%s: the index must be a 1-D int64 tensor, not a %zu-D %s", op,
      found.index->dim(), to_string(found.index->scalar_type()));
  return found;
}

// index_put(self, indices, values, accumulate) -> out
Status index_put(Args args) {
  const char* op = "aten::index_put";
  ES_RETURN_IF_ERROR(expect_args(args, 5, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_CHECK_OR_RETURN_ERROR(args[1]->is_list(), Error::InvalidProgram,
                           "%s: argument 1 must be a list of tensors", op);
  ES_ASSIGN_OR_RETURN(Tensor * values, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(int64_t accumulate, int_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(OneIndex where, one_index(args[1]->to_list(), self->dim(), op));
  ES_CHECK_OR_RETURN_ERROR(values->scalar_type() == self->scalar_type(), Error::NotSupported,
                           "%s: values are %s, self is %s", op, to_string(values->scalar_type()),
                           to_string(self->scalar_type()));
  ES_CHECK_OR_RETURN_ERROR(!accumulate || self->scalar_type() == ScalarType::Float,
                           Error::NotSupported, "%s: accumulate is supported on Float only", op);

  // The indexed region: self's shape with dim `where.dim` replaced by the index's length.
  int32_t region_sizes[Tensor::kMaxDims];
  for (size_t d = 0; d < self->dim(); ++d) region_sizes[d] = self->size(d);
  const int32_t n = where.index->size(0);
  region_sizes[where.dim] = n;
  Tensor region(self->scalar_type(), Span<const int32_t>(region_sizes, self->dim()), nullptr);
  const Tensor* inputs[] = {values};
  ES_ASSIGN_OR_RETURN(Broadcast walk, Broadcast::make(region, inputs, 1, op));

  size_t inner = 1;
  for (size_t d = where.dim + 1; d < self->dim(); ++d) inner *= static_cast<size_t>(self->size(d));
  const size_t extent = static_cast<size_t>(self->size(where.dim));
  const int64_t* index = where.index->data<int64_t>();
  for (int32_t i = 0; i < n; ++i) {
    const int64_t at = index[i] < 0 ? index[i] + static_cast<int64_t>(extent) : index[i];
    ES_CHECK_OR_RETURN_ERROR(at >= 0 && static_cast<size_t>(at) < extent, Error::InvalidArgument,
                             "%s: index %lld is out of range for dim %zu of size %zu", op,
                             static_cast<long long>(index[i]), where.dim, extent);
  }
  // Only now, with every index checked: a failed call leaves the state as it was.
  ES_RETURN_IF_ERROR(copy_self(*self, out, op));
  const size_t elem = element_size(self->scalar_type());
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  const auto* src = static_cast<const uint8_t*>(values->const_data());
  const size_t per_index = static_cast<size_t>(n) * inner;
  if (!accumulate && values->numel() == region.numel()) {
    // Values of the region's own shape (leading 1s aside: equal sizes are the only broadcast
    // that keeps the count): one copy per indexed row, as a cache write is.
    const size_t row_bytes = inner * elem;
    const size_t outer_count = per_index > 0 ? region.numel() / per_index : 0;
    for (size_t outer = 0; outer < outer_count; ++outer) {
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        int64_t at = index[i];
        if (at < 0) at += static_cast<int64_t>(extent);
        std::memcpy(dst + (outer * extent + static_cast<size_t>(at)) * row_bytes,
                    src + (outer * per_index + i * inner) * elem, row_bytes);
      }
    }
    return Status();
  }
  walk.for_each([&](size_t r, const size_t* offsets) {
    // r walks the region [outer, n, inner]; map it to self's [outer, extent, inner].
    const size_t outer = r / per_index;
    const size_t i = (r / inner) % static_cast<size_t>(n);
    const size_t k = r % inner;
    int64_t at = index[i];
    if (at < 0) at += static_cast<int64_t>(extent);
    const size_t o = (outer * extent + static_cast<size_t>(at)) * inner + k;
    if (accumulate) {
      reinterpret_cast<float*>(dst)[o] += reinterpret_cast<const float*>(src)[offsets[0]];
    } else {
      std::memcpy(dst + o * elem, src + offsets[0] * elem, elem);
    }
  });
  return Status();
}

// copy(self, src, non_blocking) -> out: src broadcast to self's shape (the state update the
// exporter emits when a buffer's new value cannot be written in place).
Status copy(Args args) {
  const char* op = "aten::copy";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * src, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_CHECK_OR_RETURN_ERROR(src->scalar_type() == self->scalar_type(), Error::NotSupported,
                           "%s: src is %s, self is %s", op, to_string(src->scalar_type()),
                           to_string(self->scalar_type()));
  ES_CHECK_OR_RETURN_ERROR(self->scalar_type() == out->scalar_type(), Error::InvalidProgram,
                           "%s: output dtype %s differs from input dtype %s", op,
                           to_string(out->scalar_type()), to_string(self->scalar_type()));
  ES_RETURN_IF_ERROR(resize_output(*out, self->sizes(), op));
  const Tensor* inputs[] = {src};
  ES_ASSIGN_OR_RETURN(Broadcast walk, Broadcast::make(*out, inputs, 1, op));
  const size_t elem = element_size(out->scalar_type());
  auto* dst = static_cast<uint8_t*>(out->mutable_data());
  const auto* from = static_cast<const uint8_t*>(src->const_data());
  if (dst == from) return Status();
  walk.for_each([&](size_t i, const size_t* offsets) {
    std::memcpy(dst + i * elem, from + offsets[0] * elem, elem);
  });
  return Status();
}

const bool registered = [] {
  bool ok = register_kernel("aten::index_put", index_put, 4).ok();
  ok &= register_kernel("aten::copy", copy, 3).ok();
  return ok;
}();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
