// Portable kernels called through the registry, the way Method calls them, against hand-computed
// references. (Their agreement with torch on whole models is checked by //exir's end-to-end tests.)

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "edgeshare/runtime/kernels/kernel_registry.h"

namespace edgeshare {
namespace runtime {
namespace {

// Owns the tensors and values of one kernel call.
class Call {
 public:
  explicit Call(const char* op) : op_(op) {}

  Call& tensor(std::vector<int32_t> sizes, std::vector<float> data) {
    shapes_.push_back(std::move(sizes));
    floats_.push_back(std::move(data));
    kinds_.push_back(kFloatTensor);
    return *this;
  }
  Call& longs(std::vector<int32_t> sizes, std::vector<int64_t> data) {
    shapes_.push_back(std::move(sizes));
    longs_.push_back(std::move(data));
    kinds_.push_back(kLongTensor);
    return *this;
  }
  Call& output(std::vector<int32_t> sizes) {
    size_t n = 1;
    for (int32_t s : sizes) n *= s;
    return tensor(std::move(sizes), std::vector<float>(n, NAN));
  }
  Call& number(double v) {
    scalars_.push_back(EValue(v));
    kinds_.push_back(kScalar);
    return *this;
  }
  Call& integer(int64_t v) {
    scalars_.push_back(EValue(v));
    kinds_.push_back(kScalar);
    return *this;
  }
  Call& none() {
    scalars_.push_back(EValue());
    kinds_.push_back(kScalar);
    return *this;
  }
  Call& text(const char* s) {
    scalars_.push_back(EValue(s));
    kinds_.push_back(kScalar);
    return *this;
  }
  Call& list(std::vector<int64_t> v) {
    lists_.push_back(std::move(v));
    kinds_.push_back(kList);
    return *this;
  }

  Status Run() {
    KernelFn fn = get_kernel(op_).fn;
    if (fn == nullptr) return Status::Format(Error::NotFound, "no kernel %s", op_);
    values_.clear();
    size_t t = 0, f = 0, l = 0, s = 0, li = 0;
    for (Kind kind : kinds_) {
      switch (kind) {
        case kFloatTensor:
          values_.emplace_back(Tensor(ScalarType::Float,
                                      Span<const int32_t>(shapes_[t].data(), shapes_[t].size()),
                                      floats_[f].data()));
          ++t;
          ++f;
          break;
        case kLongTensor:
          values_.emplace_back(Tensor(ScalarType::Long,
                                      Span<const int32_t>(shapes_[t].data(), shapes_[t].size()),
                                      longs_[l].data()));
          ++t;
          ++l;
          break;
        case kScalar:
          values_.push_back(scalars_[s++]);
          break;
        case kList:
          values_.emplace_back(Span<const int64_t>(lists_[li].data(), lists_[li].size()));
          ++li;
          break;
      }
    }
    pointers_.clear();
    for (EValue& v : values_) pointers_.push_back(&v);
    return fn(Span<EValue* const>(pointers_.data(), pointers_.size()));
  }

  // The last float tensor (the output, by convention of these tests).
  const std::vector<float>& out() const { return floats_.back(); }
  // The i-th float tensor, inputs and outputs in the order they were added.
  const std::vector<float>& float_tensor(size_t i) const { return floats_.at(i); }

 private:
  enum Kind { kFloatTensor, kLongTensor, kScalar, kList };
  const char* op_;
  std::vector<Kind> kinds_;
  std::vector<std::vector<int32_t>> shapes_;
  std::vector<std::vector<float>> floats_;
  std::vector<std::vector<int64_t>> longs_;
  std::vector<EValue> scalars_;
  std::vector<std::vector<int64_t>> lists_;
  std::vector<EValue> values_;
  std::vector<EValue*> pointers_;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "at " << i;
}

TEST(PortableKernelsTest, AddBroadcastsAndScalesOther) {
  Call call("aten::add.Tensor");
  call.tensor({2, 3}, {1, 2, 3, 4, 5, 6}).tensor({3}, {10, 20, 30}).number(2.0).output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  ExpectNear(call.out(), {21, 42, 63, 24, 45, 66});
}

TEST(PortableKernelsTest, MulBroadcastsBothWays) {
  Call call("aten::mul.Tensor");
  call.tensor({2, 1}, {2, 3}).tensor({1, 3}, {1, 10, 100}).output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  ExpectNear(call.out(), {2, 20, 200, 3, 30, 300});
}

TEST(PortableKernelsTest, SubAndDivTakeScalarOperands) {
  Call sub("aten::sub.Tensor");
  sub.tensor({3}, {1, 2, 3}).number(1.0).number(1.0).output({3});
  ASSERT_TRUE(sub.Run().ok());
  ExpectNear(sub.out(), {0, 1, 2});
  Call div("aten::div.Tensor");
  div.tensor({2}, {3, 6}).number(3.0).output({2});
  ASSERT_TRUE(div.Run().ok());
  ExpectNear(div.out(), {1, 2});
}

TEST(PortableKernelsTest, NumberAsFirstOperandAndRsubScalesSelf) {
  // The edge dialect writes `3 - 2 * x` as sub.Tensor(3, x, alpha=2).
  Call sub("aten::sub.Tensor");
  sub.number(3.0).tensor({3}, {1, 2, 3}).number(2.0).output({3});
  ASSERT_TRUE(sub.Run().ok());
  ExpectNear(sub.out(), {1, -1, -3});
  // rsub(self, other, alpha) = other - alpha * self.
  Call rsub("aten::rsub.Scalar");
  rsub.tensor({3}, {1, 2, 3}).number(10.0).number(2.0).output({3});
  ASSERT_TRUE(rsub.Run().ok());
  ExpectNear(rsub.out(), {8, 6, 4});
  Call both("aten::mul.Tensor");
  both.number(2.0).number(3.0).output({1});
  EXPECT_EQ(both.Run().code(), Error::InvalidProgram);
}

TEST(PortableKernelsTest, ClampFollowsTorchWhenMinExceedsMax) {
  // torch.clamp(x, 0.5, -0.5) is -0.5 everywhere; NaN stays NaN.
  Call call("aten::clamp");
  call.tensor({4}, {-1.0f, 0.0f, 1.0f, NAN}).number(0.5).number(-0.5).output({4});
  ASSERT_TRUE(call.Run().ok());
  ExpectNear({call.out()[0], call.out()[1], call.out()[2]}, {-0.5f, -0.5f, -0.5f});
  EXPECT_TRUE(std::isnan(call.out()[3]));
}

TEST(PortableKernelsTest, EluLeakyReluReciprocal) {
  Call elu("aten::elu");
  elu.tensor({3}, {-1.0f, 0.0f, 2.0f}).number(0.5).number(1.0).number(1.0).output({3});
  ASSERT_TRUE(elu.Run().ok());
  ExpectNear(elu.out(), {0.5f * std::expm1(-1.0f), 0.0f, 2.0f});
  Call leaky("aten::leaky_relu");
  leaky.tensor({2}, {-2.0f, 3.0f}).number(0.25).output({2});
  ASSERT_TRUE(leaky.Run().ok());
  ExpectNear(leaky.out(), {-0.5f, 3.0f});
  Call reciprocal("aten::reciprocal");
  reciprocal.tensor({2}, {4.0f, -0.5f}).output({2});
  ASSERT_TRUE(reciprocal.Run().ok());
  ExpectNear(reciprocal.out(), {0.25f, -2.0f});
}

TEST(PortableKernelsTest, SumAndMeanOverDims) {
  // x [2, 3]
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  Call rows("aten::sum.dim_IntList");
  rows.tensor({2, 3}, x).list({-1}).integer(0).none().output({2});
  ASSERT_TRUE(rows.Run().ok());
  ExpectNear(rows.out(), {6, 15});
  Call cols("aten::mean.dim");
  cols.tensor({2, 3}, x).list({0}).integer(1).none().output({1, 3});
  ASSERT_TRUE(cols.Run().ok());
  ExpectNear(cols.out(), {2.5, 3.5, 4.5});
  Call all("aten::sum.dim_IntList");
  all.tensor({2, 3}, x).none().integer(0).none().output({});
  ASSERT_TRUE(all.Run().ok());
  ExpectNear(all.out(), {21});
  Call wrong("aten::sum.dim_IntList");
  wrong.tensor({2, 3}, x).list({0}).integer(0).none().output({2});
  EXPECT_EQ(wrong.Run().code(), Error::InvalidProgram);
}

TEST(PortableKernelsTest, NonBroadcastableShapesAreAnError) {
  Call call("aten::mul.Tensor");
  call.tensor({2, 3}, std::vector<float>(6, 1)).tensor({2}, {1, 2}).output({2, 3});
  EXPECT_EQ(call.Run().code(), Error::InvalidProgram);
}

TEST(PortableKernelsTest, ActivationsMatchTheirFormulas) {
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.5f, 2.0f};
  std::vector<float> relu, sigmoid, tanh_v, silu, gelu, gelu_tanh;
  for (float v : x) {
    relu.push_back(v > 0 ? v : 0);
    sigmoid.push_back(1 / (1 + std::exp(-v)));
    tanh_v.push_back(std::tanh(v));
    silu.push_back(v / (1 + std::exp(-v)));
    gelu.push_back(0.5f * v * (1 + std::erf(v / std::sqrt(2.0f))));
    gelu_tanh.push_back(0.5f * v *
                        (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715f * v * v * v))));
  }
  struct {
    const char* op;
    const std::vector<float>* want;
  } cases[] = {{"aten::relu", &relu},
               {"aten::sigmoid", &sigmoid},
               {"aten::tanh", &tanh_v},
               {"aten::silu", &silu}};
  for (const auto& c : cases) {
    Call call(c.op);
    call.tensor({5}, x).output({5});
    ASSERT_TRUE(call.Run().ok()) << c.op;
    ExpectNear(call.out(), *c.want);
  }
  Call exact("aten::gelu");
  exact.tensor({5}, x).text("none").output({5});
  ASSERT_TRUE(exact.Run().ok());
  ExpectNear(exact.out(), gelu);
  Call approx("aten::gelu");
  approx.tensor({5}, x).text("tanh").output({5});
  ASSERT_TRUE(approx.Run().ok());
  ExpectNear(approx.out(), gelu_tanh);
}

TEST(PortableKernelsTest, LinearAddmmMmBmm) {
  // x [2, 3] @ w[2, 3]^T + b
  Call linear("aten::linear");
  linear.tensor({2, 3}, {1, 2, 3, 4, 5, 6})
      .tensor({2, 3}, {1, 0, 1, 0, 1, 0})
      .tensor({2}, {10, 20})
      .output({2, 2});
  ASSERT_TRUE(linear.Run().ok());
  ExpectNear(linear.out(), {14, 22, 20, 25});
  Call no_bias("aten::linear");
  no_bias.tensor({1, 3}, {1, 2, 3}).tensor({1, 3}, {1, 1, 1}).none().output({1, 1});
  ASSERT_TRUE(no_bias.Run().ok());
  ExpectNear(no_bias.out(), {6});
  Call mm("aten::mm");
  mm.tensor({2, 2}, {1, 2, 3, 4}).tensor({2, 2}, {5, 6, 7, 8}).output({2, 2});
  ASSERT_TRUE(mm.Run().ok());
  ExpectNear(mm.out(), {19, 22, 43, 50});
  Call addmm("aten::addmm");
  addmm.tensor({2}, {1, 1})
      .tensor({2, 2}, {1, 2, 3, 4})
      .tensor({2, 2}, {5, 6, 7, 8})
      .number(2)
      .number(1)
      .output({2, 2});
  ASSERT_TRUE(addmm.Run().ok());
  ExpectNear(addmm.out(), {21, 24, 45, 52});
  Call bmm("aten::bmm");
  bmm.tensor({2, 1, 2}, {1, 2, 3, 4}).tensor({2, 2, 1}, {1, 1, 2, 2}).output({2, 1, 1});
  ASSERT_TRUE(bmm.Run().ok());
  ExpectNear(bmm.out(), {3, 14});
  Call bad("aten::mm");
  bad.tensor({2, 3}, std::vector<float>(6)).tensor({2, 2}, std::vector<float>(4)).output({2, 2});
  EXPECT_EQ(bad.Run().code(), Error::InvalidProgram);
}

TEST(PortableKernelsTest, SoftmaxRowsSumToOneAlongAnyDim) {
  Call last("aten::_softmax");
  last.tensor({2, 3}, {1, 2, 3, 1, 1, 1}).integer(-1).number(0).output({2, 3});
  ASSERT_TRUE(last.Run().ok());
  const float e1 = std::exp(-2.0f), e2 = std::exp(-1.0f), s = e1 + e2 + 1;
  ExpectNear(last.out(), {e1 / s, e2 / s, 1 / s, 1 / 3.f, 1 / 3.f, 1 / 3.f});
  Call first("aten::_softmax");
  first.tensor({2, 2}, {0, 0, 0, 0}).integer(0).number(0).output({2, 2});
  ASSERT_TRUE(first.Run().ok());
  ExpectNear(first.out(), {0.5f, 0.5f, 0.5f, 0.5f});
}

TEST(PortableKernelsTest, LayerNormNormalisesTheLastDims) {
  Call call("aten::native_layer_norm");
  call.tensor({2, 2}, {1, 3, 0, 4})
      .list({2})
      .tensor({2}, {2, 2})
      .tensor({2}, {1, 1})
      .number(0.0)
      .output({2, 2})
      .output({2, 1})
      .output({2, 1});
  ASSERT_TRUE(call.Run().ok());
  // Row 0: mean 2, std 1; row 1: mean 2, std 2. Both normalise to (-1, 1), then * 2 + 1.
  ExpectNear(call.float_tensor(3), {-1, 3, -1, 3});
  ExpectNear(call.float_tensor(4), {2, 2});     // mean
  ExpectNear(call.float_tensor(5), {1, 0.5f});  // rstd
  Call simple("aten::layer_norm");
  simple.tensor({1, 4}, {1, 2, 3, 4})
      .list({4})
      .none()
      .none()
      .number(1e-5)
      .integer(1)
      .output({1, 4});
  ASSERT_TRUE(simple.Run().ok());
  const float inv = 1.0f / std::sqrt(1.25f + 1e-5f);
  ExpectNear(simple.out(), {-1.5f * inv, -0.5f * inv, 0.5f * inv, 1.5f * inv});
}

TEST(PortableKernelsTest, PermuteTransposeExpandSliceSelect) {
  Call permute("aten::permute");
  permute.tensor({2, 3}, {1, 2, 3, 4, 5, 6}).list({1, 0}).output({3, 2});
  ASSERT_TRUE(permute.Run().ok());
  ExpectNear(permute.out(), {1, 4, 2, 5, 3, 6});
  Call transpose("aten::transpose.int");
  transpose.tensor({1, 2, 2}, {1, 2, 3, 4}).integer(-1).integer(-2).output({1, 2, 2});
  ASSERT_TRUE(transpose.Run().ok());
  ExpectNear(transpose.out(), {1, 3, 2, 4});
  Call expand("aten::expand");
  expand.tensor({1, 2}, {7, 8}).list({3, 2}).integer(0).output({3, 2});
  ASSERT_TRUE(expand.Run().ok());
  ExpectNear(expand.out(), {7, 8, 7, 8, 7, 8});
  Call slice("aten::slice.Tensor");
  slice.tensor({5}, {0, 1, 2, 3, 4}).integer(0).integer(1).integer(100).integer(2).output({2});
  ASSERT_TRUE(slice.Run().ok());
  ExpectNear(slice.out(), {1, 3});
  Call select("aten::select.int");
  select.tensor({2, 3}, {1, 2, 3, 4, 5, 6}).integer(1).integer(-1).output({2});
  ASSERT_TRUE(select.Run().ok());
  ExpectNear(select.out(), {3, 6});
  Call view("aten::view");
  view.tensor({2, 3}, {1, 2, 3, 4, 5, 6}).list({3, 2}).output({3, 2});
  ASSERT_TRUE(view.Run().ok());
  ExpectNear(view.out(), {1, 2, 3, 4, 5, 6});
  Call bad_view("aten::view");
  bad_view.tensor({2, 3}, std::vector<float>(6)).list({4}).output({4});
  EXPECT_EQ(bad_view.Run().code(), Error::InvalidProgram);
}

TEST(PortableKernelsTest, EmbeddingGathersRowsAndRejectsBadIndices) {
  Call call("aten::embedding");
  call.tensor({3, 2}, {0, 1, 10, 11, 20, 21})
      .longs({2}, {2, 0})
      .integer(-1)
      .integer(0)
      .integer(0)
      .output({2, 2});
  ASSERT_TRUE(call.Run().ok());
  ExpectNear(call.out(), {20, 21, 0, 1});
  Call bad("aten::embedding");
  bad.tensor({3, 2}, std::vector<float>(6))
      .longs({1}, {3})
      .integer(-1)
      .integer(0)
      .integer(0)
      .output({1, 2});
  EXPECT_EQ(bad.Run().code(), Error::OutOfRange);
}

TEST(PortableKernelsTest, WrongArgumentCountIsAnErrorNamingTheOperator) {
  Call call("aten::relu");
  call.tensor({1}, {1});
  Status s = call.Run();
  EXPECT_EQ(s.code(), Error::InvalidProgram);
  EXPECT_NE(std::strstr(s.message(), "aten::relu"), nullptr);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
