// Portable fp32 elementwise kernels: binary ops with numpy broadcasting (tensor or scalar other),
// and unary activations.

#include <cmath>
#include <cstring>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

enum class Binary { Add, Sub, Mul, Div, Max, Min, Pow };

inline float apply(Binary op, float a, float b) {
  switch (op) {
    case Binary::Add:
      return a + b;
    case Binary::Sub:
      return a - b;
    case Binary::Mul:
      return a * b;
    case Binary::Div:
      return a / b;
    case Binary::Max:
      return a > b || std::isnan(a) ? a : b;
    case Binary::Min:
      return a < b || std::isnan(a) ? a : b;
    case Binary::Pow:
      return std::pow(a, b);
  }
  return 0.0f;
}

// out = self (op) alpha * other, other a tensor or a number; `has_alpha` for add/sub's signature.
Status binary(Args args, Binary op, bool has_alpha, bool reverse, const char* name) {
  ES_RETURN_IF_ERROR(expect_args(args, has_alpha ? 4 : 3, name));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, args.size() - 1, name));
  float alpha = 1.0f;
  if (has_alpha) {
    ES_ASSIGN_OR_RETURN(const double a, scalar_arg(args, 2, name));
    alpha = static_cast<float>(a);
  }
  const float* x = self->data<float>();
  float* y = out->data<float>();
  if (args[1]->is_tensor()) {
    ES_ASSIGN_OR_RETURN(Tensor * other, float_arg(args, 1, name));
    const Tensor* inputs[] = {self, other};
    ES_ASSIGN_OR_RETURN(Broadcast b, Broadcast::make(*out, inputs, 2, name));
    const float* z = other->data<float>();
    b.for_each([&](size_t i, const size_t* o) {
      const float rhs = alpha * z[o[1]];
      y[i] = reverse ? apply(op, rhs, x[o[0]]) : apply(op, x[o[0]], rhs);
    });
    return Status();
  }
  ES_ASSIGN_OR_RETURN(const double other, scalar_arg(args, 1, name));
  const Tensor* inputs[] = {self};
  ES_ASSIGN_OR_RETURN(Broadcast b, Broadcast::make(*out, inputs, 1, name));
  const float rhs = alpha * static_cast<float>(other);
  b.for_each([&](size_t i, const size_t* o) {
    y[i] = reverse ? apply(op, rhs, x[o[0]]) : apply(op, x[o[0]], rhs);
  });
  return Status();
}

Status add(Args a) { return binary(a, Binary::Add, true, false, "aten::add"); }
Status sub(Args a) { return binary(a, Binary::Sub, true, false, "aten::sub"); }
Status rsub(Args a) { return binary(a, Binary::Sub, true, true, "aten::rsub"); }
Status mul(Args a) { return binary(a, Binary::Mul, false, false, "aten::mul"); }
Status div(Args a) { return binary(a, Binary::Div, false, false, "aten::div"); }
Status maximum(Args a) { return binary(a, Binary::Max, false, false, "aten::maximum"); }
Status minimum(Args a) { return binary(a, Binary::Min, false, false, "aten::minimum"); }
Status pow(Args a) { return binary(a, Binary::Pow, false, false, "aten::pow"); }

// out[i] = fn(self[i]) for ops whose only other arguments are handled by the caller.
template <typename Fn>
Status unary(Args args, size_t count, const char* name, Fn&& fn) {
  ES_RETURN_IF_ERROR(expect_args(args, count, name));
  ES_ASSIGN_OR_RETURN(Tensor * self, float_arg(args, 0, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, count - 1, name));
  ES_CHECK_OR_RETURN_ERROR(same_shape(*self, *out), Error::InvalidProgram,
                           "%s: output shape differs from input shape", name);
  const float* x = self->data<float>();
  float* y = out->data<float>();
  for (size_t i = 0; i < self->numel(); ++i) y[i] = fn(x[i]);
  return Status();
}

float sigmoid_of(float x) { return 1.0f / (1.0f + std::exp(-x)); }

Status relu(Args a) {
  return unary(a, 2, "aten::relu", [](float x) { return x > 0.0f ? x : 0.0f; });
}
Status sigmoid(Args a) { return unary(a, 2, "aten::sigmoid", sigmoid_of); }
Status tanh_kernel(Args a) {
  return unary(a, 2, "aten::tanh", [](float x) { return std::tanh(x); });
}
Status silu(Args a) {
  return unary(a, 2, "aten::silu", [](float x) { return x * sigmoid_of(x); });
}
Status neg(Args a) {
  return unary(a, 2, "aten::neg", [](float x) { return -x; });
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
  return unary(args, 3, "aten::gelu", [](float x) {
    return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
  });
}

Status hardtanh(Args args) {
  ES_ASSIGN_OR_RETURN(const double lo, scalar_arg(args, 1, "aten::hardtanh"));
  ES_ASSIGN_OR_RETURN(const double hi, scalar_arg(args, 2, "aten::hardtanh"));
  const float min = static_cast<float>(lo);
  const float max = static_cast<float>(hi);
  return unary(args, 4, "aten::hardtanh",
               [=](float x) { return x < min ? min : (x > max ? max : x); });
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
  return unary(args, 4, "aten::clamp", [=](float x) { return x < min ? min : (x > max ? max : x); });
}

const bool registered = [] {
  struct {
    const char* name;
    KernelFn fn;
  } const kernels[] = {
      {"aten::add.Tensor", add},         {"aten::add.Scalar", add},
      {"aten::sub.Tensor", sub},         {"aten::sub.Scalar", sub},
      {"aten::rsub.Scalar", rsub},       {"aten::mul.Tensor", mul},
      {"aten::mul.Scalar", mul},         {"aten::div.Tensor", div},
      {"aten::div.Scalar", div},         {"aten::maximum", maximum},
      {"aten::minimum", minimum},        {"aten::pow.Tensor_Scalar", pow},
      {"aten::pow.Tensor_Tensor", pow},  {"aten::relu", relu},
      {"aten::sigmoid", sigmoid},        {"aten::tanh", tanh_kernel},
      {"aten::silu", silu},              {"aten::neg", neg},
      {"aten::exp", exp_kernel},         {"aten::sqrt", sqrt_kernel},
      {"aten::rsqrt", rsqrt},            {"aten::abs", abs_kernel},
      {"aten::gelu", gelu},              {"aten::hardtanh", hardtanh},
      {"aten::clamp", clamp},
  };
  bool ok = true;
  for (const auto& k : kernels) ok &= register_kernel(k.name, k.fn).ok();
  return ok;
}();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
