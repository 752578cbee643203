// What edgeshare::cached_attention and edgeshare::batched_attention share: the checks of a query
// and its key/value caches, and the call of the row kernel for either cache element type.
//
// The query is [1, heads, rows, head_dim] float32. The caches are [kv_heads, cache_rows, head_dim]
// after `leading` leading dimensions of size 1 (cached_attention's [1, kv_heads, positions,
// head_dim]: 1; batched_attention's slotted [kv_heads, slots * max_seq_len, head_dim]: 0), both
// float32 or both float16.
//
//   ES_ASSIGN_OR_RETURN(AttentionOperands shape, check_attention_operands(op, *q, *k, *v, 1));
//   ...
//   attend_row(kernels, shape.half, count, shape.head_dim, q_row, k, v, offset, scale, cap, out);
//
// Errors: InvalidProgram for shapes that do not fit (naming the operator), NotSupported for a
// cache of another element type or a head_dim past kMaxAttentionHeadDim.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_OPERANDS_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_OPERANDS_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {

struct AttentionOperands {
  size_t heads = 0, rows = 0, head_dim = 0, kv_heads = 0, cache_rows = 0;
  bool half = false;  // the caches are float16
};

inline Result<AttentionOperands> check_attention_operands(const char* op, const Tensor& q,
                                                          const Tensor& k, const Tensor& v,
                                                          size_t leading) {
  ES_CHECK_OR_RETURN_ERROR(q.dim() == 4 && q.size(0) == 1, Error::InvalidProgram,
                           "%s: the query must be [1, heads, rows, head_dim], got %zu dims", op,
                           q.dim());
  bool fits = k.dim() == 3 + leading;
  for (size_t d = 0; fits && d < leading; ++d) fits = k.size(d) == 1;
  ES_CHECK_OR_RETURN_ERROR(fits, Error::InvalidProgram,
                           "%s: the key cache must be [%skv_heads, rows, head_dim]", op,
                           leading > 0 ? "1, " : "");
  const ScalarType kv_type = k.scalar_type();
  ES_CHECK_OR_RETURN_ERROR(kv_type == ScalarType::Float || kv_type == ScalarType::Half,
                           Error::NotSupported, "%s: the cache is %s; Float or Half is supported",
                           op, to_string(kv_type));
  bool same = v.scalar_type() == kv_type && v.dim() == k.dim();
  for (size_t d = 0; same && d < k.dim(); ++d) same = v.size(d) == k.size(d);
  ES_CHECK_OR_RETURN_ERROR(same, Error::InvalidProgram,
                           "%s: the value cache's type and shape differ from the key cache's", op);
  AttentionOperands shape;
  shape.heads = q.size(1);
  shape.rows = q.size(2);
  shape.head_dim = q.size(3);
  shape.kv_heads = k.size(leading);
  shape.cache_rows = k.size(leading + 1);
  shape.half = kv_type == ScalarType::Half;
  ES_CHECK_OR_RETURN_ERROR(static_cast<size_t>(k.size(leading + 2)) == shape.head_dim,
                           Error::InvalidProgram,
                           "%s: the query's head_dim %zu differs from the cache's %d", op,
                           shape.head_dim, k.size(leading + 2));
  ES_CHECK_OR_RETURN_ERROR(shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0,
                           Error::InvalidProgram,
                           "%s: %zu query heads are not a multiple of %zu key/value heads", op,
                           shape.heads, shape.kv_heads);
  ES_CHECK_OR_RETURN_ERROR(shape.head_dim >= 1 && shape.head_dim <= kMaxAttentionHeadDim,
                           Error::NotSupported, "%s: head_dim %zu is outside 1..%zu", op,
                           shape.head_dim, kMaxAttentionHeadDim);
  return shape;
}

// One query row against `count` cached rows from element `offset` of the caches.
inline void attend_row(const AttentionRowKernels& kernels, bool half, size_t count, size_t head_dim,
                       const float* q, const void* k, const void* v, size_t offset, float scale,
                       float softcap, float* out) {
  if (half) {
    kernels.f16(count, head_dim, q, static_cast<const uint16_t*>(k) + offset,
                static_cast<const uint16_t*>(v) + offset, scale, softcap, out);
  } else {
    kernels.f32(count, head_dim, q, static_cast<const float*>(k) + offset,
                static_cast<const float*>(v) + offset, scale, softcap, out);
  }
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_OPERANDS_H_
