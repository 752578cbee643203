// edgeshare::cached_attention: T new query rows attending to the first start_pos + T positions of a
// KV cache, the causal (and sliding-window) mask implied by the positions. Its cost follows the
// filled length, never the cache's bound; grouped-query heads read their key/value head in place.
// Work is split by (head, block of query rows) across the runtime's helper threads.
//
// cached_attention(q [1, H, T, D] float, k_cache [1, KVH, S, D] float|half, v_cache (as k_cache),
//                  start_pos int64 (one element), scale float, softcap float, window int)
//   -> out [1, T, H, D] float

#include <cstdint>

#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/attention_operands.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// Query rows per parallel item: enough work per item to hide the hand-out, items enough to
// balance two threads even at T = 1 (one item per head then).
constexpr size_t kRowsPerItem = 4;

struct Job {
  const AttentionRowKernels* kernels;
  bool half;
  const float* q;
  const void* k;
  const void* v;
  float* out;
  size_t heads, group, rows, positions, head_dim, start, window, blocks;
  float scale, softcap;
};

void attend(void* context, size_t item) {
  const Job& job = *static_cast<const Job*>(context);
  const size_t h = item / job.blocks;
  const size_t first = (item % job.blocks) * kRowsPerItem;
  const size_t last = first + kRowsPerItem < job.rows ? first + kRowsPerItem : job.rows;
  const size_t kv_head = h / job.group;
  const size_t cache_offset = kv_head * job.positions * job.head_dim;
  for (size_t i = first; i < last; ++i) {
    const size_t position = job.start + i;
    const size_t begin =
        job.window > 0 && position + 1 > job.window ? position + 1 - job.window : 0;
    const size_t count = position + 1 - begin;
    const float* q = job.q + (h * job.rows + i) * job.head_dim;
    float* out = job.out + (i * job.heads + h) * job.head_dim;
    const size_t offset = cache_offset + begin * job.head_dim;
    attend_row(*job.kernels, job.half, count, job.head_dim, q, job.k, job.v, offset, job.scale,
               job.softcap, out);
  }
}

Status cached_attention(Args args) {
  const char* op = "edgeshare::cached_attention";
  ES_RETURN_IF_ERROR(expect_args(args, 8, op));
  ES_ASSIGN_OR_RETURN(Tensor * q, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * k, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * v, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * start_pos, tensor_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(const double scale, scalar_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(const double softcap, scalar_arg(args, 5, op));
  ES_ASSIGN_OR_RETURN(const int64_t window, int_arg(args, 6, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 7, op));

  ES_ASSIGN_OR_RETURN(const AttentionOperands shape, check_attention_operands(op, *q, *k, *v, 1));
  const size_t heads = shape.heads, rows = shape.rows, head_dim = shape.head_dim;
  const size_t kv_heads = shape.kv_heads, positions = shape.cache_rows;
  ES_CHECK_OR_RETURN_ERROR(start_pos->scalar_type() == ScalarType::Long && start_pos->numel() == 1,
                           Error::InvalidProgram, "%s: the start position must be one int64", op);
  const int64_t start = start_pos->data<int64_t>()[0];
  ES_CHECK_OR_RETURN_ERROR(
      start >= 0 && static_cast<uint64_t>(start) + rows <= positions, Error::InvalidArgument,
      "%s: positions %lld..%lld are outside the cache of %zu positions", op,
      static_cast<long long>(start),
      static_cast<long long>(start) + static_cast<long long>(rows) - 1, positions);
  ES_CHECK_OR_RETURN_ERROR(softcap >= 0.0 && window >= 0, Error::InvalidProgram,
                           "%s: softcap %g and window %lld must not be negative", op, softcap,
                           static_cast<long long>(window));
  ES_RETURN_IF_ERROR(resize_output(
      *out,
      {1, static_cast<int32_t>(rows), static_cast<int32_t>(heads), static_cast<int32_t>(head_dim)},
      op));
  if (rows == 0) return Status();

  Job job;
  job.kernels = &attention_row_kernels();
  job.half = shape.half;
  job.q = q->data<float>();
  job.k = k->const_data();
  job.v = v->const_data();
  job.out = out->data<float>();
  job.heads = heads;
  job.group = heads / kv_heads;
  job.rows = rows;
  job.positions = positions;
  job.head_dim = head_dim;
  job.start = static_cast<size_t>(start);
  job.window = static_cast<size_t>(window);
  job.blocks = (rows + kRowsPerItem - 1) / kRowsPerItem;
  job.scale = static_cast<float>(scale);
  job.softcap = static_cast<float>(softcap);
  parallel_for(heads * job.blocks, attend, &job);
  return Status();
}

const bool registered = register_kernel("edgeshare::cached_attention", cached_attention, 7).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
