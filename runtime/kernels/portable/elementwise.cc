// Portable elementwise kernels: binary arithmetic with numpy broadcasting and torch's type
// promotion over Float, Long and Bool (tensor or number operands), and unary math ops.

#include <cmath>
#include <cstring>
#include <type_traits>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

enum class Binary { Add, Sub, Mul, Div, Max, Min, Pow };

// base ** exponent for integers, as torch computes it: negative exponents give 0 unless the base
// is 1 or -1 (torch refuses them for a number exponent; a tensor of them reaches here).
int64_t int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) != 0 ? -1 : 1;
    return 0;
  }
  // Unsigned, so overflow wraps as torch's does instead of being undefined.
  uint64_t result = 1;
  uint64_t b = static_cast<uint64_t>(base);
  while (exponent > 0) {
    if ((exponent & 1) != 0) result *= b;
    b *= b;
    exponent >>= 1;
  }
  return static_cast<int64_t>(result);
}

// In the compute type T: bool arithmetic goes through int and back, which makes add a logical
// or and mul a logical and, as in torch.
template <typename T>
inline T apply(Binary op, T a, T b) {
  switch (op) {
    case Binary::Add:
      return static_cast<T>(a + b);
    case Binary::Sub:
      return static_cast<T>(a - b);
    case Binary::Mul:
      return static_cast<T>(a * b);
    case Binary::Div:
      return static_cast<T>(a / b);  // only reached with T = float
    case Binary::Max:
      return a > b || a != a ? a : b;  // NaN wins, as in torch
    case Binary::Min:
      return a < b || a != a ? a : b;
    case Binary::Pow:
      if constexpr (std::is_floating_point<T>::value) {
        return std::pow(a, b);
      } else {
        return static_cast<T>(int_pow(static_cast<int64_t>(a), static_cast<int64_t>(b)));
      }
  }
  return T();
}

// out = self (op) alpha * other (reverse, for rsub: out = other (op) alpha * self). Either operand
// may be a number (the edge dialect writes `2 - x` as sub.Tensor(2, x)), not both. The compute
// type is torch's result type of the operands (Float for div, which is true division).
Status binary(Args args, Binary op, bool has_alpha, bool reverse, const char* name) {
  ES_RETURN_IF_ERROR(expect_args(args, has_alpha ? 4 : 3, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, args.size() - 1, name));
  ES_ASSIGN_OR_RETURN(const Operand self, operand_arg(args, 0, name));
  ES_ASSIGN_OR_RETURN(const Operand other, operand_arg(args, 1, name));
  Number alpha;
  alpha.i = 1;
  if (has_alpha) {
    ES_ASSIGN_OR_RETURN(alpha, number_arg(args, 2, name));
  }
  const Operand operands[2] = {reverse ? other : self, reverse ? self : other};
  const ScalarType type = op == Binary::Div ? ScalarType::Float : promote(operands, 2);
  ES_CHECK_OR_RETURN_ERROR(type != ScalarType::Bool || (op != Binary::Sub && op != Binary::Pow),
                           Error::NotSupported, "%s: Bool operands are not supported (%s, %s)",
                           name, to_string(operands[0].type()), to_string(operands[1].type()));
  return dispatch(type, name, [&](auto zero) {
    using T = decltype(zero);
    const T a = alpha.as<T>();
    return elementwise<T>(operands, 2, *out, name, [&](const T* v) {
      return apply<T>(op, v[0], has_alpha ? static_cast<T>(a * v[1]) : v[1]);
    });
  });
}

Status add(Args a) { return binary(a, Binary::Add, true, false, "aten::add"); }
Status sub(Args a) { return binary(a, Binary::Sub, true, false, "aten::sub"); }
Status rsub(Args a) { return binary(a, Binary::Sub, true, true, "aten::rsub"); }
Status mul(Args a) { return binary(a, Binary::Mul, false, false, "aten::mul"); }
Status div(Args a) { return binary(a, Binary::Div, false, false, "aten::div"); }
Status maximum(Args a) { return binary(a, Binary::Max, false, false, "aten::maximum"); }
Status minimum(Args a) { return binary(a, Binary::Min, false, false, "aten::minimum"); }
Status pow(Args a) { return binary(a, Binary::Pow, false, false, "aten::pow"); }

// out[i] = fn(self[i]) computed in float (an integer or bool self is converted, as torch's
// floating ops do), for ops whose only other arguments are handled by the caller.
template <typename Fn>
Status unary(Args args, size_t count, const char* name, Fn&& fn) {
  ES_RETURN_IF_ERROR(expect_args(args, count, name));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, count - 1, name));
  ES_RETURN_IF_ERROR(expect_types(*self, name, "self"));
  ES_RETURN_IF_ERROR(resize_output(*out, self->sizes(), name));
  float* y = out->data<float>();
  if (self->scalar_type() == ScalarType::Float) {
    const float* x = self->data<float>();
    for (size_t i = 0; i < self->numel(); ++i) y[i] = fn(x[i]);
    return Status();
  }
  const void* x = self->const_data();
  for (size_t i = 0; i < self->numel(); ++i) {
    y[i] = fn(load<float>(x, self->scalar_type(), i));
  }
  return Status();
}

float sigmoid_of(float x) { return 1.0f / (1.0f + std::exp(-x)); }

Status relu(Args a) {
  // NaN stays NaN, as in torch.
  return unary(a, 2, "aten::relu", [](float x) { return x > 0.0f || std::isnan(x) ? x : 0.0f; });
}
Status sigmoid(Args a) { return unary(a, 2, "aten::sigmoid", sigmoid_of); }
Status tanh_kernel(Args a) {
  return unary(a, 2, "aten::tanh", [](float x) { return std::tanh(x); });
}
Status silu(Args a) {
  return unary(a, 2, "aten::silu", [](float x) { return x * sigmoid_of(x); });
}
// neg keeps self's type (Float or Long; torch refuses Bool).
Status neg(Args args) {
  const char* op = "aten::neg";
  ES_RETURN_IF_ERROR(expect_args(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * self, tensor_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, tensor_arg(args, 1, op));
  ES_CHECK_OR_RETURN_ERROR(self->scalar_type() != ScalarType::Bool, Error::NotSupported,
                           "%s: Bool input is not supported", op);
  const Operand operands[1] = {Operand{self, Number()}};
  return dispatch(self->scalar_type(), op, [&](auto zero) {
    using T = decltype(zero);
    return elementwise<T>(operands, 1, *out, op,
                          [](const T* v) { return static_cast<T>(T(0) - v[0]); });
  });
}
Status cos_kernel(Args a) {
  return unary(a, 2, "aten::cos", [](float x) { return std::cos(x); });
}
Status sin_kernel(Args a) {
  return unary(a, 2, "aten::sin", [](float x) { return std::sin(x); });
}
Status exp_kernel(Args a) {
  return unary(a, 2, "aten::exp", [](float x) { return std::exp(x); });
}
Status sqrt_kernel(Args a) {
  return unary(a, 2, "aten::sqrt", [](float x) { return std::sqrt(x); });
}
Status rsqrt(Args a) {
  return unary(a, 2, "aten::rsqrt", [](float x) { return 1.0f / std::sqrt(x); });
}
Status abs_kernel(Args a) {
  return unary(a, 2, "aten::abs", [](float x) { return std::fabs(x); });
}
Status reciprocal(Args a) {
  return unary(a, 2, "aten::reciprocal", [](float x) { return 1.0f / x; });
}

// leaky_relu(self, negative_slope)
Status leaky_relu(Args args) {
  ES_ASSIGN_OR_RETURN(const double slope_arg, scalar_arg(args, 1, "aten::leaky_relu"));
  const float slope = static_cast<float>(slope_arg);
  return unary(args, 3, "aten::leaky_relu", [=](float x) { return x > 0.0f ? x : x * slope; });
}

// elu(self, alpha, scale, input_scale)
Status elu(Args args) {
  const char* op = "aten::elu";
  ES_ASSIGN_OR_RETURN(const double alpha_arg, scalar_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(const double scale_arg, scalar_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(const double input_scale_arg, scalar_arg(args, 3, op));
  const float alpha = static_cast<float>(alpha_arg);
  const float scale = static_cast<float>(scale_arg);
  const float input_scale = static_cast<float>(input_scale_arg);
  return unary(args, 5, op, [=](float x) {
    return x > 0.0f ? x * scale : std::expm1(x * input_scale) * alpha * scale;
  });
}

Status gelu(Args args) {
  ES_CHECK_OR_RETURN_ERROR(args.size() == 3 && args[1]->is_string(), Error::InvalidProgram,
                           "aten::gelu takes (self, approximate, out)");
  const char* approximate = args[1]->to_str();
  if (std::strcmp(approximate, "tanh") == 0) {
    return unary(args, 3, "aten::gelu", [](float x) {
      const float k = 0.7978845608028654f;  // sqrt(2 / pi)
      return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
    });
  }
  ES_CHECK_OR_RETURN_ERROR(std::strcmp(approximate, "none") == 0, Error::NotSupported,
                           "aten::gelu: approximate='%s' is not supported", approximate);
  return unary(args, 3, "aten::gelu",
               [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f)); });
}

// torch's clamp: min(max(x, lo), hi), so lo > hi gives hi everywhere; NaN stays NaN.
inline float clamp_value(float x, float lo, float hi) {
  if (std::isnan(x)) return x;
  return std::fmin(std::fmax(x, lo), hi);
}

Status hardtanh(Args args) {
  ES_ASSIGN_OR_RETURN(const double lo, scalar_arg(args, 1, "aten::hardtanh"));
  ES_ASSIGN_OR_RETURN(const double hi, scalar_arg(args, 2, "aten::hardtanh"));
  const float min = static_cast<float>(lo);
  const float max = static_cast<float>(hi);
  return unary(args, 4, "aten::hardtanh", [=](float x) { return clamp_value(x, min, max); });
}

Status clamp(Args args) {
  float min = -INFINITY;
  float max = INFINITY;
  if (args.size() > 1 && !args[1]->is_none()) {
    ES_ASSIGN_OR_RETURN(const double lo, scalar_arg(args, 1, "aten::clamp"));
    min = static_cast<float>(lo);
  }
  if (args.size() > 2 && !args[2]->is_none()) {
    ES_ASSIGN_OR_RETURN(const double hi, scalar_arg(args, 2, "aten::clamp"));
    max = static_cast<float>(hi);
  }
  return unary(args, 4, "aten::clamp", [=](float x) { return clamp_value(x, min, max); });
}

// Input counts are the schema's arguments (torch.ops.aten.<op>.<overload>._schema); the one
// output follows them.
const KernelEntry kKernels[] = {
    {"aten::add.Tensor", add, 3},
    {"aten::add.Scalar", add, 3},
    {"aten::sub.Tensor", sub, 3},
    {"aten::sub.Scalar", sub, 3},
    {"aten::rsub.Scalar", rsub, 3},
    {"aten::mul.Tensor", mul, 2},
    {"aten::mul.Scalar", mul, 2},
    {"aten::div.Tensor", div, 2},
    {"aten::div.Scalar", div, 2},
    {"aten::maximum", maximum, 2},
    {"aten::minimum", minimum, 2},
    {"aten::pow.Tensor_Scalar", pow, 2},
    {"aten::pow.Tensor_Tensor", pow, 2},
    {"aten::relu", relu, 1},
    {"aten::sigmoid", sigmoid, 1},
    {"aten::tanh", tanh_kernel, 1},
    {"aten::silu", silu, 1},
    {"aten::neg", neg, 1},
    {"aten::cos", cos_kernel, 1},
    {"aten::sin", sin_kernel, 1},
    {"aten::exp", exp_kernel, 1},
    {"aten::sqrt", sqrt_kernel, 1},
    {"aten::rsqrt", rsqrt, 1},
    {"aten::abs", abs_kernel, 1},
    {"aten::gelu", gelu, 2},
    {"aten::hardtanh", hardtanh, 3},
    {"aten::clamp", clamp, 3},
    {"aten::reciprocal", reciprocal, 1},
    {"aten::leaky_relu", leaky_relu, 2},
    {"aten::elu", elu, 4},
};
const bool registered = register_kernels(kKernels);

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
