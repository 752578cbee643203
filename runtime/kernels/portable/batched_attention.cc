// edgeshare::batched_attention: the query rows of a batched step, each attending to the keys of its
// own sequence's cache slot, positions 0..its position (the causal and sliding-window mask implied
// by the position). Rows of different sequences share the call but never each other's keys; a
// row's cost follows its own position. Work is split by (row, key/value head) across the runtime's
// helper threads, an item running the query heads that share its key/value head one after another:
// a decode row's keys and values come from memory once (the cache of many sequences is far larger
// than L2), and its other query heads read them from this core's caches.
//
// batched_attention(q [1, H, N, D] float, k_cache [KVH, slots * L, D] float|half, v_cache (as
//                   k_cache), slots int64 [N], positions int64 [N], max_seq_len L int,
//                   scale float, softcap float, window int) -> out [1, N, H, D] float
//
// Slot s holds cache rows s * L .. s * L + L - 1 of each key/value head, so one head's keys of one
// sequence are contiguous, as attention_row.h's kernels read them.

#include <cstdint>

#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/attention_operands.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Job {
  const AttentionRowKernels* kernels;
  bool half;
  const float* q;
  const void* k;
  const void* v;
  const int64_t* slots;
  const int64_t* positions;
  float* out;
  size_t heads, group, rows, cache_rows, max_seq_len, head_dim, window;
  float scale, softcap;
};

void attend(void* context, size_t item) {
  const Job& job = *static_cast<const Job*>(context);
  const size_t kv_heads = job.heads / job.group;
  const size_t i = item / kv_heads;
  const size_t kv_head = item % kv_heads;
  const size_t position = static_cast<size_t>(job.positions[i]);
  const size_t begin = job.window > 0 && position + 1 > job.window ? position + 1 - job.window : 0;
  const size_t count = position + 1 - begin;
  const size_t first_row = static_cast<size_t>(job.slots[i]) * job.max_seq_len + begin;
  const size_t offset = (kv_head * job.cache_rows + first_row) * job.head_dim;
  for (size_t h = kv_head * job.group; h < (kv_head + 1) * job.group; ++h) {
    const float* q = job.q + (h * job.rows + i) * job.head_dim;
    float* out = job.out + (i * job.heads + h) * job.head_dim;
    attend_row(*job.kernels, job.half, count, job.head_dim, q, job.k, job.v, offset, job.scale,
               job.softcap, out);
  }
}

Status batched_attention(Args args) {
  const char* op = "edgeshare::batched_attention";
  ES_RETURN_IF_ERROR(expect_args(args, 10, op));
  ES_ASSIGN_OR_RETURN(Tensor * q, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * k, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * v, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * slots, tensor_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * positions, tensor_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(const int64_t max_seq_len, int_arg(args, 5, op));
  ES_ASSIGN_OR_RETURN(const double scale, scalar_arg(args, 6, op));
  ES_ASSIGN_OR_RETURN(const double softcap, scalar_arg(args, 7, op));
  ES_ASSIGN_OR_RETURN(const int64_t window, int_arg(args, 8, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 9, op));

  ES_ASSIGN_OR_RETURN(const AttentionOperands shape, check_attention_operands(op, *q, *k, *v, 0));
  const size_t heads = shape.heads, rows = shape.rows, head_dim = shape.head_dim;
  const size_t kv_heads = shape.kv_heads, cache_rows = shape.cache_rows;
  ES_CHECK_OR_RETURN_ERROR(max_seq_len > 0 && cache_rows % static_cast<size_t>(max_seq_len) == 0,
                           Error::InvalidProgram,
                           "%s: the cache's %zu rows are not slots of %lld positions", op,
                           cache_rows, static_cast<long long>(max_seq_len));
  for (const Tensor* index : {slots, positions}) {
    ES_CHECK_OR_RETURN_ERROR(index->scalar_type() == ScalarType::Long && index->dim() == 1 &&
                                 static_cast<size_t>(index->size(0)) == rows,
                             Error::InvalidProgram,
                             "%s: slots and positions must be int64 [%zu], one per query row", op,
                             rows);
  }
  ES_CHECK_OR_RETURN_ERROR(softcap >= 0.0 && window >= 0, Error::InvalidProgram,
                           "%s: softcap %g and window %lld must not be negative", op, softcap,
                           static_cast<long long>(window));
  const size_t num_slots = cache_rows / static_cast<size_t>(max_seq_len);
  const int64_t* slot = slots->data<int64_t>();
  const int64_t* position = positions->data<int64_t>();
  for (size_t i = 0; i < rows; ++i) {
    ES_CHECK_OR_RETURN_ERROR(slot[i] >= 0 && static_cast<uint64_t>(slot[i]) < num_slots,
                             Error::InvalidArgument, "%s: row %zu's slot %lld is outside 0..%zu",
                             op, i, static_cast<long long>(slot[i]), num_slots - 1);
    ES_CHECK_OR_RETURN_ERROR(position[i] >= 0 && position[i] < max_seq_len, Error::InvalidArgument,
                             "%s: row %zu's position %lld is outside 0..%lld", op, i,
                             static_cast<long long>(position[i]),
                             static_cast<long long>(max_seq_len - 1));
  }
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
  job.slots = slot;
  job.positions = position;
  job.out = out->data<float>();
  job.heads = heads;
  job.group = heads / kv_heads;
  job.rows = rows;
  job.cache_rows = cache_rows;
  job.max_seq_len = static_cast<size_t>(max_seq_len);
  job.head_dim = head_dim;
  job.window = static_cast<size_t>(window);
  job.scale = static_cast<float>(scale);
  job.softcap = static_cast<float>(softcap);
  parallel_for(rows * kv_heads, attend, &job);
  return Status();
}

const bool registered = register_kernel("edgeshare::batched_attention", batched_attention, 9).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
