// Portable comparison and logical kernels (the masks decoder LLMs build): eq/ne/lt/le/gt/ge,
// bitwise_and/or, logical_not and where, with numpy broadcasting over Float, Long and Bool.

#include <type_traits>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

enum class Compare { Eq, Ne, Lt, Le, Gt, Ge };

template <typename T>
inline bool compare(Compare op, T a, T b) {
  switch (op) {
    case Compare::Eq:
      return a == b;
    case Compare::Ne:
      return a != b;
    case Compare::Lt:
      return a < b;
    case Compare::Le:
      return a <= b;
    case Compare::Gt:
      return a > b;
    case Compare::Ge:
      return a >= b;
  }
  return false;
}

// (self, other, out): out = self (op) other, compared in the operands' result type (so an int64
// tensor against 0.5 compares as float, as torch does); other is a tensor or a number.
Status comparison(Args args, Compare op, const char* name) {
  ES_RETURN_IF_ERROR(expect_args(args, 3, name));
  ES_ASSIGN_OR_RETURN(const Operand self, operand_arg(args, 0, name));
  ES_ASSIGN_OR_RETURN(const Operand other, operand_arg(args, 1, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, name));
  const Operand operands[2] = {self, other};
  return dispatch(promote(operands, 2), name, [&](auto zero) {
    using T = decltype(zero);
    return elementwise<T>(operands, 2, *out, name,
                          [op](const T* v) { return compare<T>(op, v[0], v[1]); });
  });
}

Status eq(Args a) { return comparison(a, Compare::Eq, "aten::eq"); }
Status ne(Args a) { return comparison(a, Compare::Ne, "aten::ne"); }
Status lt(Args a) { return comparison(a, Compare::Lt, "aten::lt"); }
Status le(Args a) { return comparison(a, Compare::Le, "aten::le"); }
Status gt(Args a) { return comparison(a, Compare::Gt, "aten::gt"); }
Status ge(Args a) { return comparison(a, Compare::Ge, "aten::ge"); }

// bitwise_and/or.Tensor(self, other): Bool or Long (torch refuses floating operands).
Status bitwise(Args args, bool is_and, const char* name) {
  ES_RETURN_IF_ERROR(expect_args(args, 3, name));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, name));
  ES_ASSIGN_OR_RETURN(Tensor * other, tensor_arg(args, 1, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 2, name));
  ES_RETURN_IF_ERROR(expect_types(*self, name, "self"));
  ES_RETURN_IF_ERROR(expect_types(*other, name, "other"));
  const Operand operands[2] = {Operand{self, Number()}, Operand{other, Number()}};
  const ScalarType type = promote(operands, 2);
  ES_CHECK_OR_RETURN_ERROR(type != ScalarType::Float, Error::NotSupported,
                           "%s: Float operands are not supported (%s, %s)", name,
                           to_string(self->scalar_type()), to_string(other->scalar_type()));
  if (type == ScalarType::Bool) {
    return elementwise<bool>(operands, 2, *out, name, [is_and](const bool* v) {
      return is_and ? (v[0] && v[1]) : (v[0] || v[1]);
    });
  }
  return elementwise<int64_t>(operands, 2, *out, name, [is_and](const int64_t* v) {
    return is_and ? (v[0] & v[1]) : (v[0] | v[1]);
  });
}

Status bitwise_and(Args a) { return bitwise(a, true, "aten::bitwise_and"); }
Status bitwise_or(Args a) { return bitwise(a, false, "aten::bitwise_or"); }

// logical_not(self): true where self is zero, for any supported self.
Status logical_not(Args args) {
  const char* op = "aten::logical_not";
  ES_RETURN_IF_ERROR(expect_args(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 1, op));
  ES_RETURN_IF_ERROR(expect_types(*self, op, "self"));
  const Operand operands[1] = {Operand{self, Number()}};
  return dispatch(self->scalar_type(), op, [&](auto zero) {
    using T = decltype(zero);
    return elementwise<T>(operands, 1, *out, op, [](const T* v) { return v[0] == T(0); });
  });
}

// where.self(condition, self, other): condition Bool, the values in their result type.
Status where(Args args) {
  const char* op = "aten::where";
  ES_RETURN_IF_ERROR(expect_args(args, 4, op));
  ES_ASSIGN_OR_RETURN(Tensor * condition, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(const Operand self, operand_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(const Operand other, operand_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 3, op));
  ES_CHECK_OR_RETURN_ERROR(condition->scalar_type() == ScalarType::Bool, Error::NotSupported,
                           "%s: condition is %s; only Bool is supported", op,
                           to_string(condition->scalar_type()));
  const Operand values[2] = {self, other};
  const Operand operands[3] = {Operand{condition, Number()}, self, other};
  return dispatch(promote(values, 2), op, [&](auto zero) {
    using T = decltype(zero);
    return elementwise<T>(operands, 3, *out, op,
                          [](const T* v) { return v[0] != T(0) ? v[1] : v[2]; });
  });
}

// Input counts are the schema's arguments (torch.ops.aten.<op>.<overload>._schema); the one
// output follows them.
const KernelEntry kKernels[] = {
    {"aten::eq.Scalar", eq, 2},
    {"aten::eq.Tensor", eq, 2},
    {"aten::ne.Scalar", ne, 2},
    {"aten::ne.Tensor", ne, 2},
    {"aten::lt.Scalar", lt, 2},
    {"aten::lt.Tensor", lt, 2},
    {"aten::le.Scalar", le, 2},
    {"aten::le.Tensor", le, 2},
    {"aten::gt.Scalar", gt, 2},
    {"aten::gt.Tensor", gt, 2},
    {"aten::ge.Scalar", ge, 2},
    {"aten::ge.Tensor", ge, 2},
    {"aten::bitwise_and.Tensor", bitwise_and, 2},
    {"aten::bitwise_or.Tensor", bitwise_or, 2},
    {"aten::logical_not", logical_not, 1},
    {"aten::where.self", where, 3},
};
const bool registered = register_kernels(kKernels);

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
