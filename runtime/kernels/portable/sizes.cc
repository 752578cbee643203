// Size kernels: the sizes a program learns only at run time (aten::sym_size.int reads a dim of a
// tensor) and the arithmetic the exporter writes for Python operators on them (sym::add,
// sym::floordiv, ...). They register KernelOutputs::kInts: their one output is an Int value,
// written in place with EValue::set_int.

#include <cstdint>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

Status set_output(Args args, size_t i, int64_t value, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size() && args[i]->is_int(), Error::InvalidProgram,
                           "%s: argument %zu (the output) must be an int", op, i);
  args[i]->set_int(value);
  return Status();
}

// sym_size.int(self, dim) -> self.size(dim)
Status sym_size(Args args) {
  const char* op = "aten::sym_size.int";
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t dim_value, int_arg(args, 1, op));
  ES_CHECK_OR_RETURN_ERROR(self->dim() > 0, Error::InvalidProgram, "%s: self is rank 0", op);
  ES_ASSIGN_OR_RETURN(const size_t dim, dim_arg(dim_value, self->dim(), op));
  return set_output(args, 2, self->size(dim), op);
}

// Python's // and % on ints: the quotient rounds toward negative infinity and the remainder
// takes the divisor's sign. Division by zero is an error, as in Python.
Result<int64_t> floor_div(int64_t a, int64_t b, const char* op) {
  ES_CHECK_OR_RETURN_ERROR(b != 0, Error::InvalidArgument, "%s: division by zero", op);
  ES_CHECK_OR_RETURN_ERROR(!(a == INT64_MIN && b == -1), Error::InvalidArgument, "%s: overflow",
                           op);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

enum class SizeOp { Add, Sub, Mul, FloorDiv, Mod, Max, Min };

// (a, b, out) -> out = a (op) b
Status binary_size(Args args, SizeOp kind, const char* op) {
  ES_RETURN_IF_ERROR(expect_args(args, 3, op));
  ES_ASSIGN_OR_RETURN(const int64_t a, int_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const int64_t b, int_arg(args, 1, op));
  // Wrapping arithmetic: sizes never get near 2^63, and a hostile program must not reach UB.
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  int64_t value = 0;
  switch (kind) {
    case SizeOp::Add:
      value = static_cast<int64_t>(ua + ub);
      break;
    case SizeOp::Sub:
      value = static_cast<int64_t>(ua - ub);
      break;
    case SizeOp::Mul:
      value = static_cast<int64_t>(ua * ub);
      break;
    case SizeOp::FloorDiv: {
      ES_ASSIGN_OR_RETURN(value, floor_div(a, b, op));
      break;
    }
    case SizeOp::Mod: {
      ES_ASSIGN_OR_RETURN(const int64_t q, floor_div(a, b, op));
      value = static_cast<int64_t>(ua - static_cast<uint64_t>(q) * ub);
      break;
    }
    case SizeOp::Max:
      value = a > b ? a : b;
      break;
    case SizeOp::Min:
      value = a < b ? a : b;
      break;
  }
  return set_output(args, 2, value, op);
}

Status add(Args a) { return binary_size(a, SizeOp::Add, "sym::add"); }
Status sub(Args a) { return binary_size(a, SizeOp::Sub, "sym::sub"); }
Status mul(Args a) { return binary_size(a, SizeOp::Mul, "sym::mul"); }
Status floordiv(Args a) { return binary_size(a, SizeOp::FloorDiv, "sym::floordiv"); }
Status mod(Args a) { return binary_size(a, SizeOp::Mod, "sym::mod"); }
Status max(Args a) { return binary_size(a, SizeOp::Max, "sym::max"); }
Status min(Args a) { return binary_size(a, SizeOp::Min, "sym::min"); }

// (a, out) -> out = -a
Status neg(Args args) {
  const char* op = "sym::neg";
  ES_RETURN_IF_ERROR(expect_args(args, 2, op));
  ES_ASSIGN_OR_RETURN(const int64_t a, int_arg(args, 0, op));
  return set_output(args, 1, static_cast<int64_t>(0 - static_cast<uint64_t>(a)), op);
}

// Input counts: aten::sym_size.int's schema arguments; the sym:: ops take their Python
// operator's operands (kernel_inputs_test checks both).
const KernelEntry kKernels[] = {
    {"aten::sym_size.int", sym_size, 2},
    {"sym::add", add, 2},
    {"sym::sub", sub, 2},
    {"sym::mul", mul, 2},
    {"sym::floordiv", floordiv, 2},
    {"sym::mod", mod, 2},
    {"sym::max", max, 2},
    {"sym::min", min, 2},
    {"sym::neg", neg, 1},
};
const bool registered = register_kernels(kKernels, KernelOutputs::kInts);

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
