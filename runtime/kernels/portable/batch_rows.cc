// edgeshare::batch_rows: the first call of a batched step. It checks every row's cache slot,
// position and adapter slot, and returns the row of the slotted KV cache each new key and value
// goes to (slot * max_seq_len + position). A step's cache writes all read its result, so a bad
// row fails the step here, before any sequence's cache is written: a position past the bound
// would otherwise land in the next slot's rows.
//
// batch_rows(slots int64 [N], positions int64 [N], adapters int64 [N], num_slots int,
//            max_seq_len int, adapter_slots int) -> rows int64 [N]

#include <cstdint>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

Status batch_rows(Args args) {
  const char* op = "edgeshare::batch_rows";
  ES_RETURN_IF_ERROR(expect_args(args, 7, op));
  ES_ASSIGN_OR_RETURN(Tensor * slots, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * positions, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * adapters, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(const int64_t num_slots, int_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(const int64_t max_seq_len, int_arg(args, 4, op));
  ES_ASSIGN_OR_RETURN(const int64_t adapter_slots, int_arg(args, 5, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 6, op));
  const size_t rows = slots->dim() == 1 ? static_cast<size_t>(slots->size(0)) : 0;
  for (const Tensor* t : {slots, positions, adapters}) {
    ES_CHECK_OR_RETURN_ERROR(t->scalar_type() == ScalarType::Long && t->dim() == 1 &&
                                 static_cast<size_t>(t->size(0)) == rows,
                             Error::InvalidProgram,
                             "%s: slots, positions and adapters must be int64 [rows] alike", op);
  }
  ES_CHECK_OR_RETURN_ERROR(out->scalar_type() == ScalarType::Long, Error::InvalidProgram,
                           "%s: the output must be int64", op);
  const int64_t* slot = slots->data<int64_t>();
  const int64_t* position = positions->data<int64_t>();
  const int64_t* adapter = adapters->data<int64_t>();
  struct Bound {
    const char* name;
    const int64_t* values;
    int64_t low, high;
  };
  const Bound bounds[] = {{"slot", slot, 0, num_slots},
                          {"position", position, 0, max_seq_len},
                          {"adapter slot", adapter, -1, adapter_slots}};
  for (const Bound& b : bounds) {
    for (size_t i = 0; i < rows; ++i) {
      ES_CHECK_OR_RETURN_ERROR(b.values[i] >= b.low && b.values[i] < b.high, Error::InvalidArgument,
                               "%s: row %zu's %s %lld is outside %lld..%lld", op, i, b.name,
                               static_cast<long long>(b.values[i]), static_cast<long long>(b.low),
                               static_cast<long long>(b.high - 1));
    }
  }
  ES_RETURN_IF_ERROR(resize_output(*out, {static_cast<int32_t>(rows)}, op));
  int64_t* row = out->data<int64_t>();
  for (size_t i = 0; i < rows; ++i) row[i] = slot[i] * max_seq_len + position[i];
  return Status();
}

const bool registered = register_kernel("edgeshare::batch_rows", batch_rows, 6).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
