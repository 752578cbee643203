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

// One operand of a binary op: a float tensor or a number.
struct Operand {
  const Tensor* tensor = nullptr;
  float value = 0.0f;
};

Result<Operand> operand(Args args, size_t i, const char* name) {
  ES_CHECK_OR_RETURN_ERROR(i < args.size(), Error::InvalidProgram, "%s: missing argument %zu", name,
                           i);
  Operand o;
  if (args[i]->is_tensor()) {
    ES_ASSIGN_OR_RETURN(Tensor * t, float_arg(args, i, name));
    o.tensor = t;
  } else {
    ES_ASSIGN_OR_RETURN(const double v, scalar_arg(args, i, name));
    o.value = static_cast<float>(v);
  }
  return o;
}

// out = self (op) alpha * other (reverse, for rsub: out = other (op) alpha * self). Either operand
// may be a number (the edge dialect writes `2 - x` as sub.Tensor(2, x)), not both.
Status binary(Args args, Binary op, bool has_alpha, bool reverse, const char* name) {
  ES_RETURN_IF_ERROR(expect_args(args, has_alpha ? 4 : 3, name));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, args.size() - 1, name));
  ES_ASSIGN_OR_RETURN(const Operand self, operand(args, 0, name));
  ES_ASSIGN_OR_RETURN(const Operand other, operand(args, 1, name));
  ES_CHECK_OR_RETURN_ERROR(self.tensor != nullptr || other.tensor != nullptr, Error::InvalidProgram,
                           "%s: needs at least one tensor operand", name);
  float alpha = 1.0f;
  if (has_alpha) {
    ES_ASSIGN_OR_RETURN(const double a, scalar_arg(args, 2, name));
    alpha = static_cast<float>(a);
  }
  // lhs (op) alpha * rhs
  const Operand& lhs = reverse ? other : self;
  const Operand& rhs = reverse ? self : other;
  const Tensor* inputs[2];
  size_t count = 0;
  if (lhs.tensor != nullptr) inputs[count++] = lhs.tensor;
  if (rhs.tensor != nullptr) inputs[count++] = rhs.tensor;
  ES_ASSIGN_OR_RETURN(Broadcast b, Broadcast::make(*out, inputs, count, name));
  const float* l = lhs.tensor != nullptr ? lhs.tensor->data<float>() : &lhs.value;
  const float* r = rhs.tensor != nullptr ? rhs.tensor->data<float>() : &rhs.value;
  const size_t li = lhs.tensor != nullptr ? 0 : Broadcast::kMaxInputs;
  const size_t ri = rhs.tensor != nullptr ? count - 1 : Broadcast::kMaxInputs;
  float* y = out->data<float>();
  b.for_each([&](size_t i, const size_t* o) {
    const float a = l[li == Broadcast::kMaxInputs ? 0 : o[li]];
    const float c = r[ri == Broadcast::kMaxInputs ? 0 : o[ri]];
    y[i] = apply(op, a, has_alpha ? alpha * c : c);
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
const bool registered = [] {
  struct {
    const char* name;
    KernelFn fn;
    size_t num_inputs;
  } const kernels[] = {
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
  bool ok = true;
  for (const auto& k : kernels) ok &= register_kernel(k.name, k.fn, k.num_inputs).ok();
  return ok;
}();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
