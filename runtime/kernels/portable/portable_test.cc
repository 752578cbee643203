// Portable kernels called through the registry, the way Method calls them, against hand-computed
// references. (Their agreement with torch on whole models is checked by //exir's end-to-end tests.)

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
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
  Call& chars(std::vector<int32_t> sizes, std::vector<int8_t> data) {
    shapes_.push_back(std::move(sizes));
    chars_.push_back(std::move(data));
    kinds_.push_back(kCharTensor);
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
    size_t t = 0, f = 0, l = 0, c = 0, s = 0, li = 0;
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
        case kCharTensor:
          values_.emplace_back(Tensor(ScalarType::Char,
                                      Span<const int32_t>(shapes_[t].data(), shapes_[t].size()),
                                      chars_[c].data()));
          ++t;
          ++c;
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
  enum Kind { kFloatTensor, kLongTensor, kCharTensor, kScalar, kList };
  const char* op_;
  std::vector<Kind> kinds_;
  std::vector<std::vector<int32_t>> shapes_;
  std::vector<std::vector<float>> floats_;
  std::vector<std::vector<int64_t>> longs_;
  std::vector<std::vector<int8_t>> chars_;
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
  // The result [3] does not fit an output planned for [2]: the resize fails, naming the op.
  Call wrong("aten::sum.dim_IntList");
  wrong.tensor({2, 3}, x).list({0}).integer(0).none().output({2});
  const Status too_small = wrong.Run();
  EXPECT_EQ(too_small.code(), Error::InvalidArgument);
  EXPECT_NE(std::strstr(too_small.message(), "aten::sum.dim_IntList"), nullptr);
  // keepdim's rank-2 result does not fit a rank-1 output.
  Call wrong_rank("aten::sum.dim_IntList");
  wrong_rank.tensor({2, 3}, x).list({0}).integer(1).none().output({3});
  EXPECT_EQ(wrong_rank.Run().code(), Error::InvalidArgument);
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

TEST(PortableKernelsTest, EmbeddingQc8wWritesIntRowsTimesTheirScales) {
  Call call("edgeshare::embedding_qc8w");
  call.chars({3, 2}, {1, -2, 127, -127, 0, 5})
      .tensor({3}, {0.5f, 0.25f, 2.0f})
      .longs({1, 3}, {1, 2, 1})
      .output({1, 3, 2});
  ASSERT_TRUE(call.Run().ok());
  // Exact: an int8 times a power-of-two scale.
  const std::vector<float> want = {31.75f, -31.75f, 0.0f, 10.0f, 31.75f, -31.75f};
  ASSERT_EQ(call.out().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(call.out()[i], want[i]) << "at " << i;
  Call bad_index("edgeshare::embedding_qc8w");
  bad_index.chars({3, 2}, std::vector<int8_t>(6)).tensor({3}, {1, 1, 1}).longs({1}, {-1}).output({1, 2});
  EXPECT_EQ(bad_index.Run().code(), Error::OutOfRange);
  Call float_table("edgeshare::embedding_qc8w");
  float_table.tensor({3, 2}, std::vector<float>(6)).tensor({3}, {1, 1, 1}).longs({1}, {0}).output({1, 2});
  EXPECT_EQ(float_table.Run().code(), Error::InvalidProgram);
  Call few_scales("edgeshare::embedding_qc8w");
  few_scales.chars({3, 2}, std::vector<int8_t>(6)).tensor({2}, {1, 1}).longs({1}, {0}).output({1, 2});
  EXPECT_EQ(few_scales.Run().code(), Error::InvalidProgram);
}

TEST(PortableKernelsTest, WrongArgumentCountIsAnErrorNamingTheOperator) {
  Call call("aten::relu");
  call.tensor({1}, {1});
  Status s = call.Run();
  EXPECT_EQ(s.code(), Error::InvalidProgram);
  EXPECT_NE(std::strstr(s.message(), "aten::relu"), nullptr);
}

// Values of any kind for kernels on every dtype, lists and dynamic shapes: each value gets an id;
// a tensor's memory is fixed when it is added (its capacity), and the kernel may resize it.
class Values {
 public:
  size_t floats(std::vector<int32_t> sizes, std::vector<float> data) {
    return tensor(ScalarType::Float, sizes, data.data(), data.size() * sizeof(float));
  }
  size_t longs(std::vector<int32_t> sizes, std::vector<int64_t> data) {
    return tensor(ScalarType::Long, sizes, data.data(), data.size() * sizeof(int64_t));
  }
  size_t bools(std::vector<int32_t> sizes, std::vector<uint8_t> data) {
    return tensor(ScalarType::Bool, sizes, data.data(), data.size());
  }
  // An output planned at `capacity` sizes, filled with 0xff bytes.
  size_t output(ScalarType type, std::vector<int32_t> capacity) {
    size_t n = element_size(type);
    for (int32_t s : capacity) n *= static_cast<size_t>(s);
    std::vector<uint8_t> junk(n, 0xff);
    return tensor(type, capacity, junk.data(), n);
  }
  size_t integer(int64_t v) { return add(EValue(v)); }
  size_t number(double v) { return add(EValue(v)); }
  size_t flag(bool v) { return add(EValue(v)); }
  size_t none() { return add(EValue()); }
  size_t ints(std::vector<int64_t> v) {
    int_lists_.push_back(std::move(v));
    return add(EValue(Span<const int64_t>(int_lists_.back().data(), int_lists_.back().size())));
  }
  size_t list(std::vector<size_t> items) {
    std::vector<EValue*> pointers;
    for (size_t id : items) pointers.push_back(&values_[id]);
    lists_.push_back(std::move(pointers));
    return add(EValue(Span<EValue* const>(lists_.back().data(), lists_.back().size())));
  }

  Status Run(const char* op, std::vector<size_t> args) {
    KernelFn fn = get_kernel(op).fn;
    if (fn == nullptr) return Status::Format(Error::NotFound, "no kernel %s", op);
    std::vector<EValue*> pointers;
    for (size_t id : args) pointers.push_back(&values_[id]);
    return fn(Span<EValue* const>(pointers.data(), pointers.size()));
  }

  const EValue& value(size_t id) const { return values_[id]; }
  std::vector<int32_t> sizes(size_t id) const {
    const Span<const int32_t> s = values_[id].to_tensor().sizes();
    return std::vector<int32_t>(s.begin(), s.end());
  }
  template <typename T>
  std::vector<T> data(size_t id) const {
    const Tensor& t = values_[id].to_tensor();
    return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
  }

 private:
  size_t tensor(ScalarType type, const std::vector<int32_t>& sizes, const void* data,
                size_t bytes) {
    buffers_.emplace_back(bytes + 1);  // never empty, so data() is never null
    if (bytes > 0) std::memcpy(buffers_.back().data(), data, bytes);
    return add(EValue(
        Tensor(type, Span<const int32_t>(sizes.data(), sizes.size()), buffers_.back().data())));
  }
  size_t add(EValue v) {
    values_.push_back(v);
    return values_.size() - 1;
  }

  // deques: adding a value never moves the ones lists and tensors point at.
  std::deque<EValue> values_;
  std::deque<std::vector<uint8_t>> buffers_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<EValue*>> lists_;
};

using Sizes = std::vector<int32_t>;
using Floats = std::vector<float>;
using Longs = std::vector<int64_t>;
using Bools = std::vector<uint8_t>;

bool Mentions(const Status& s, const char* text) {
  return std::strstr(s.message(), text) != nullptr;
}

TEST(PortableResizeTest, OneOutputServesEveryLengthUpToItsCapacity) {
  // add.Tensor(x[T, 2], bias[2]) into an output planned for T <= 4.
  Values v;
  const size_t bias = v.floats({2}, {10, 20});
  const size_t alpha = v.integer(1);
  const size_t out = v.output(ScalarType::Float, {4, 2});
  const size_t x3 = v.floats({3, 2}, {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(v.Run("aten::add.Tensor", {x3, bias, alpha, out}).ok());
  EXPECT_EQ(v.sizes(out), Sizes({3, 2}));
  EXPECT_EQ(v.data<float>(out), Floats({11, 22, 13, 24, 15, 26}));
  const size_t x1 = v.floats({1, 2}, {7, 8});
  ASSERT_TRUE(v.Run("aten::add.Tensor", {x1, bias, alpha, out}).ok());
  EXPECT_EQ(v.sizes(out), Sizes({1, 2}));
  EXPECT_EQ(v.data<float>(out), Floats({17, 28}));
  const size_t x5 = v.floats({5, 2}, Floats(10, 1));
  const Status past = v.Run("aten::add.Tensor", {x5, bias, alpha, out});
  EXPECT_EQ(past.code(), Error::InvalidArgument);
  EXPECT_TRUE(Mentions(past, "aten::add")) << past.message();
  EXPECT_EQ(v.sizes(out), Sizes({1, 2}));  // unchanged by the failed resize
}

TEST(PortableResizeTest, ShapeKernelsFollowTheirInputs) {
  for (int32_t t : {2, 3}) {
    Values v;
    Floats data(static_cast<size_t>(t) * 4);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    const size_t x = v.floats({t, 4}, data);  // [T, 4]
    // view(x, [-1, 2, 2]) -> [T, 2, 2]
    const size_t view_out = v.output(ScalarType::Float, {3, 2, 2});
    ASSERT_TRUE(v.Run("aten::view", {x, v.ints({-1, 2, 2}), view_out}).ok());
    EXPECT_EQ(v.sizes(view_out), Sizes({t, 2, 2}));
    // permute -> [4, T]
    const size_t perm_out = v.output(ScalarType::Float, {4, 3});
    ASSERT_TRUE(v.Run("aten::permute", {x, v.ints({1, 0}), perm_out}).ok());
    EXPECT_EQ(v.sizes(perm_out), Sizes({4, t}));
    EXPECT_EQ(v.data<float>(perm_out)[1], 4.0f);
    // unsqueeze(x, 0) then expand to [2, -1, -1]
    const size_t unsq = v.output(ScalarType::Float, {1, 3, 4});
    ASSERT_TRUE(v.Run("aten::unsqueeze", {x, v.integer(0), unsq}).ok());
    const size_t expanded = v.output(ScalarType::Float, {2, 3, 4});
    ASSERT_TRUE(v.Run("aten::expand", {unsq, v.ints({2, -1, -1}), v.flag(false), expanded}).ok());
    EXPECT_EQ(v.sizes(expanded), Sizes({2, t, 4}));
    EXPECT_EQ(v.data<float>(expanded)[static_cast<size_t>(t) * 4], 0.0f);
    // slice(x, 0, 1, end=max) -> [T - 1, 4]
    const size_t sliced = v.output(ScalarType::Float, {3, 4});
    ASSERT_TRUE(v.Run("aten::slice.Tensor",
                      {x, v.integer(0), v.integer(1), v.integer(INT64_MAX), v.integer(1), sliced})
                    .ok());
    EXPECT_EQ(v.sizes(sliced), Sizes({t - 1, 4}));
    // softmax and linear keep T
    const size_t soft = v.output(ScalarType::Float, {3, 4});
    ASSERT_TRUE(v.Run("aten::_softmax", {x, v.integer(-1), v.flag(false), soft}).ok());
    EXPECT_EQ(v.sizes(soft), Sizes({t, 4}));
    const size_t w = v.floats({1, 4}, {1, 1, 1, 1});
    const size_t lin = v.output(ScalarType::Float, {3, 1});
    ASSERT_TRUE(v.Run("aten::linear", {x, w, v.none(), lin}).ok());
    EXPECT_EQ(v.sizes(lin), Sizes({t, 1}));
    EXPECT_EQ(v.data<float>(lin)[t - 1], static_cast<float>((t - 1) * 16 + 6));
    // embedding of T ids
    const size_t table = v.floats({3, 2}, {0, 1, 10, 11, 20, 21});
    const size_t ids = v.longs({1, t}, Longs(static_cast<size_t>(t), 2));
    const size_t emb = v.output(ScalarType::Float, {1, 3, 2});
    ASSERT_TRUE(
        v.Run("aten::embedding", {table, ids, v.integer(-1), v.flag(false), v.flag(false), emb})
            .ok());
    EXPECT_EQ(v.sizes(emb), Sizes({1, t, 2}));
    // layer norm's mean and rstd: [T, 1]
    const size_t norm = v.output(ScalarType::Float, {3, 4});
    const size_t mean = v.output(ScalarType::Float, {3, 1});
    const size_t rstd = v.output(ScalarType::Float, {3, 1});
    ASSERT_TRUE(v.Run("aten::native_layer_norm",
                      {x, v.ints({4}), v.none(), v.none(), v.number(1e-5), norm, mean, rstd})
                    .ok());
    EXPECT_EQ(v.sizes(norm), Sizes({t, 4}));
    EXPECT_EQ(v.sizes(rstd), Sizes({t, 1}));
    EXPECT_EQ(v.data<float>(mean)[t - 1], static_cast<float>((t - 1) * 4) + 1.5f);
    // bmm of [1, T, 4] and [1, 4, T] -> [1, T, T]; split_with_sizes along T.
    const size_t q = v.output(ScalarType::Float, {1, 3, 4});
    ASSERT_TRUE(v.Run("aten::unsqueeze", {x, v.integer(0), q}).ok());
    const size_t k = v.output(ScalarType::Float, {1, 4, 3});
    ASSERT_TRUE(v.Run("aten::transpose.int", {q, v.integer(1), v.integer(2), k}).ok());
    const size_t scores = v.output(ScalarType::Float, {1, 3, 3});
    ASSERT_TRUE(v.Run("aten::bmm", {q, k, scores}).ok());
    EXPECT_EQ(v.sizes(scores), Sizes({1, t, t}));
    const size_t head = v.output(ScalarType::Float, {1, 4});
    const size_t tail = v.output(ScalarType::Float, {3, 4});
    ASSERT_TRUE(
        v.Run("aten::split_with_sizes", {x, v.ints({1, t - 1}), v.integer(0), head, tail}).ok());
    EXPECT_EQ(v.sizes(tail), Sizes({t - 1, 4}));
  }
}

TEST(PortableDtypeTest, IntegerAndBoolArithmeticFollowsTorchPromotion) {
  Values v;
  const size_t pos = v.longs({3}, {0, 1, 2});
  const size_t offset = v.longs({}, {5});
  const size_t sum = v.output(ScalarType::Long, {3});
  ASSERT_TRUE(v.Run("aten::add.Tensor", {pos, offset, v.integer(2), sum}).ok());
  EXPECT_EQ(v.data<int64_t>(sum), Longs({10, 11, 12}));
  // int64 tensor * 0.5 is Float.
  const size_t half = v.output(ScalarType::Float, {3});
  ASSERT_TRUE(v.Run("aten::mul.Tensor", {pos, v.number(0.5), half}).ok());
  EXPECT_EQ(v.data<float>(half), Floats({0, 0.5f, 1}));
  // bool * bool is a logical and, bool + bool an or; bool * float is Float.
  const size_t a = v.bools({4}, {0, 0, 1, 1});
  const size_t b = v.bools({4}, {0, 1, 0, 1});
  const size_t both = v.output(ScalarType::Bool, {4});
  ASSERT_TRUE(v.Run("aten::mul.Tensor", {a, b, both}).ok());
  EXPECT_EQ(v.data<uint8_t>(both), Bools({0, 0, 0, 1}));
  const size_t either = v.output(ScalarType::Bool, {4});
  ASSERT_TRUE(v.Run("aten::add.Tensor", {a, b, v.integer(1), either}).ok());
  EXPECT_EQ(v.data<uint8_t>(either), Bools({0, 1, 1, 1}));
  const size_t scaled = v.output(ScalarType::Float, {4});
  ASSERT_TRUE(v.Run("aten::mul.Tensor", {a, v.floats({1}, {-2.5f}), scaled}).ok());
  EXPECT_EQ(v.data<float>(scaled), Floats({0, 0, -2.5f, -2.5f}));
  // int64 true division is Float.
  const size_t quotient = v.output(ScalarType::Float, {3});
  ASSERT_TRUE(v.Run("aten::div.Tensor", {pos, v.integer(2), quotient}).ok());
  EXPECT_EQ(v.data<float>(quotient), Floats({0, 0.5f, 1}));
  // torch refuses bool - bool.
  const Status sub =
      v.Run("aten::sub.Tensor", {a, b, v.integer(1), v.output(ScalarType::Bool, {4})});
  EXPECT_EQ(sub.code(), Error::NotSupported);
  EXPECT_TRUE(Mentions(sub, "aten::sub")) << sub.message();
  const Status neg = v.Run("aten::neg", {pos, v.output(ScalarType::Long, {3})});
  EXPECT_TRUE(neg.ok()) << neg.message();
}

TEST(PortableDtypeTest, ComparisonsMasksAndWhere) {
  Values v;
  const size_t x = v.floats({2, 2}, {-1, 0, 1, NAN});
  const size_t ids = v.longs({2}, {0, 3});
  // eq.Scalar on int64
  const size_t is_zero = v.output(ScalarType::Bool, {2});
  ASSERT_TRUE(v.Run("aten::eq.Scalar", {ids, v.integer(0), is_zero}).ok());
  EXPECT_EQ(v.data<uint8_t>(is_zero), Bools({1, 0}));
  // le.Tensor broadcasting int64 [2, 1] against int64 [2]: a causal mask.
  const size_t rows = v.longs({2, 1}, {0, 1});
  const size_t cols = v.longs({2}, {0, 1});
  const size_t causal = v.output(ScalarType::Bool, {2, 2});
  ASSERT_TRUE(v.Run("aten::le.Tensor", {cols, rows, causal}).ok());
  EXPECT_EQ(v.sizes(causal), Sizes({2, 2}));
  EXPECT_EQ(v.data<uint8_t>(causal), Bools({1, 0, 1, 1}));
  // Float against an int compares as float; NaN is unequal to everything.
  const size_t gt = v.output(ScalarType::Bool, {2, 2});
  ASSERT_TRUE(v.Run("aten::gt.Scalar", {x, v.integer(0), gt}).ok());
  EXPECT_EQ(v.data<uint8_t>(gt), Bools({0, 0, 1, 0}));
  const size_t ne = v.output(ScalarType::Bool, {2, 2});
  ASSERT_TRUE(v.Run("aten::ne.Tensor", {x, x, ne}).ok());
  EXPECT_EQ(v.data<uint8_t>(ne), Bools({0, 0, 0, 1}));
  // bitwise_and, logical_not, any.dim
  const size_t anded = v.output(ScalarType::Bool, {2, 2});
  ASSERT_TRUE(v.Run("aten::bitwise_and.Tensor", {causal, gt, anded}).ok());
  EXPECT_EQ(v.data<uint8_t>(anded), Bools({0, 0, 1, 0}));
  const size_t inverted = v.output(ScalarType::Bool, {2, 2});
  ASSERT_TRUE(v.Run("aten::logical_not", {causal, inverted}).ok());
  EXPECT_EQ(v.data<uint8_t>(inverted), Bools({0, 1, 0, 0}));
  const size_t any_row = v.output(ScalarType::Bool, {2, 1});
  ASSERT_TRUE(v.Run("aten::any.dim", {inverted, v.integer(-1), v.flag(true), any_row}).ok());
  EXPECT_EQ(v.data<uint8_t>(any_row), Bools({1, 0}));
  const size_t any_all = v.output(ScalarType::Bool, {});
  ASSERT_TRUE(v.Run("aten::any", {inverted, any_all}).ok());
  EXPECT_EQ(v.data<uint8_t>(any_all), Bools({1}));
  EXPECT_EQ(v.Run("aten::bitwise_and.Tensor", {x, x, v.output(ScalarType::Float, {2, 2})}).code(),
            Error::NotSupported);
  // where(causal, 0.0, -inf as a 0-dim tensor): the additive attention mask.
  const size_t zero = v.floats({}, {0.0f});
  const size_t minus_inf = v.floats({}, {-INFINITY});
  const size_t mask = v.output(ScalarType::Float, {2, 2});
  ASSERT_TRUE(v.Run("aten::where.self", {causal, zero, minus_inf, mask}).ok());
  EXPECT_EQ(v.data<float>(mask), Floats({0, -INFINITY, 0, 0}));
}

TEST(PortableDtypeTest, CreationAndConversion) {
  Values v;
  // arange(0, T) with T known only at run time, into an output planned for 8.
  const size_t positions = v.output(ScalarType::Long, {8});
  ASSERT_TRUE(v.Run("aten::arange.start_step", {v.integer(2), v.integer(5), v.integer(1), v.none(),
                                                v.none(), v.none(), v.none(), positions})
                  .ok());
  EXPECT_EQ(v.data<int64_t>(positions), Longs({2, 3, 4}));
  const size_t steps = v.output(ScalarType::Float, {8});
  ASSERT_TRUE(v.Run("aten::arange.start_step", {v.integer(0), v.number(1.0), v.number(0.25),
                                                v.integer(6), v.none(), v.none(), v.none(), steps})
                  .ok());
  EXPECT_EQ(v.data<float>(steps), Floats({0, 0.25f, 0.5f, 0.75f}));
  const size_t down = v.output(ScalarType::Long, {8});
  ASSERT_TRUE(v.Run("aten::arange.start_step", {v.integer(3), v.integer(-4), v.integer(-3),
                                                v.none(), v.none(), v.none(), v.none(), down})
                  .ok());
  EXPECT_EQ(v.data<int64_t>(down), Longs({3, 0, -3}));
  EXPECT_EQ(v.Run("aten::arange.start_step", {v.integer(0), v.integer(9), v.integer(1), v.none(),
                                              v.none(), v.none(), v.none(), positions})
                .code(),
            Error::InvalidArgument);
  // A dtype argument must agree with the planned output (6 is Float).
  EXPECT_EQ(
      v.Run("aten::arange.start_step", {v.integer(0), v.integer(2), v.integer(1), v.integer(6),
                                        v.none(), v.none(), v.none(), positions})
          .code(),
      Error::InvalidProgram);
  // full, full_like, scalar_tensor
  const size_t full = v.output(ScalarType::Bool, {2, 2});
  ASSERT_TRUE(v.Run("aten::full",
                    {v.ints({1, 2}), v.flag(true), v.none(), v.none(), v.none(), v.none(), full})
                  .ok());
  EXPECT_EQ(v.sizes(full), Sizes({1, 2}));
  EXPECT_EQ(v.data<uint8_t>(full), Bools({1, 1}));
  const size_t like = v.output(ScalarType::Long, {4});
  ASSERT_TRUE(v.Run("aten::full_like", {v.longs({3}, {0, 0, 0}), v.integer(-7), v.none(), v.none(),
                                        v.none(), v.none(), v.none(), like})
                  .ok());
  EXPECT_EQ(v.data<int64_t>(like), Longs({-7, -7, -7}));
  const size_t scalar = v.output(ScalarType::Float, {});
  ASSERT_TRUE(
      v.Run("aten::scalar_tensor", {v.number(-1.5), v.none(), v.none(), v.none(), v.none(), scalar})
          .ok());
  EXPECT_EQ(v.data<float>(scalar), Floats({-1.5f}));
  // _to_copy: float -> int64 truncates, -> bool is nonzero; bool -> float.
  const size_t x = v.floats({4}, {-1.7f, -0.2f, 0.0f, 2.9f});
  const size_t as_long = v.output(ScalarType::Long, {4});
  const size_t as_bool = v.output(ScalarType::Bool, {4});
  const size_t back = v.output(ScalarType::Float, {4});
  for (const auto& step :
       {std::make_pair(x, as_long), std::make_pair(x, as_bool), std::make_pair(as_bool, back)}) {
    ASSERT_TRUE(v.Run("aten::_to_copy", {step.first, v.none(), v.none(), v.none(), v.none(),
                                         v.flag(false), v.none(), step.second})
                    .ok());
  }
  EXPECT_EQ(v.data<int64_t>(as_long), Longs({-1, 0, 0, 2}));
  EXPECT_EQ(v.data<uint8_t>(as_bool), Bools({1, 1, 0, 1}));
  EXPECT_EQ(v.data<float>(back), Floats({1, 1, 0, 1}));
  // cumsum of bools counts them (as Long).
  const size_t counts = v.output(ScalarType::Long, {2, 2});
  ASSERT_TRUE(
      v.Run("aten::cumsum", {v.bools({2, 2}, {1, 1, 0, 1}), v.integer(1), v.none(), counts}).ok());
  EXPECT_EQ(v.data<int64_t>(counts), Longs({1, 2, 0, 1}));
}

TEST(PortableListTest, CatJoinsAlongDimAndSkipsEmptyOneDimTensors) {
  Values v;
  const size_t a = v.longs({2, 1}, {1, 2});
  const size_t b = v.longs({2, 2}, {3, 4, 5, 6});
  const size_t empty = v.longs({0}, {});
  const size_t out = v.output(ScalarType::Long, {2, 4});
  ASSERT_TRUE(v.Run("aten::cat", {v.list({empty, a, b}), v.integer(-1), out}).ok());
  EXPECT_EQ(v.sizes(out), Sizes({2, 3}));
  EXPECT_EQ(v.data<int64_t>(out), Longs({1, 3, 4, 2, 5, 6}));
  const size_t rows = v.output(ScalarType::Long, {4, 2});
  ASSERT_TRUE(v.Run("aten::cat", {v.list({b, b}), v.integer(0), rows}).ok());
  EXPECT_EQ(v.data<int64_t>(rows), Longs({3, 4, 5, 6, 3, 4, 5, 6}));
  // Mismatched sizes off the joined dim; a mixed-dtype list.
  EXPECT_EQ(v.Run("aten::cat", {v.list({a, b}), v.integer(0), rows}).code(), Error::InvalidProgram);
  const size_t f = v.floats({2, 1}, {0, 0});
  EXPECT_EQ(v.Run("aten::cat", {v.list({a, f}), v.integer(1), out}).code(), Error::NotSupported);
  // Past the planned capacity.
  EXPECT_EQ(v.Run("aten::cat", {v.list({b, b, b}), v.integer(1), out}).code(),
            Error::InvalidArgument);
}

TEST(PortableListTest, IndexFollowsTorchAdvancedIndexing) {
  Values v;
  Floats data(24);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  const size_t x = v.floats({2, 3, 4}, data);  // x[i, j, k] = 12 i + 4 j + k
  // x[rows[:, None], cols]: two broadcast index tensors at the front -> [2, 2, 4].
  const size_t rows = v.longs({2, 1}, {1, 0});
  const size_t cols = v.longs({2}, {0, -1});
  const size_t front = v.output(ScalarType::Float, {2, 2, 4});
  ASSERT_TRUE(v.Run("aten::index.Tensor", {x, v.list({rows, cols}), front}).ok());
  EXPECT_EQ(v.sizes(front), Sizes({2, 2, 4}));
  EXPECT_EQ(v.data<float>(front), Floats({12, 13, 14, 15, 20, 21, 22, 23,  //
                                          0, 1, 2, 3, 8, 9, 10, 11}));
  // x[:, idx]: a None keeps dim 0, the index replaces dim 1 in place -> [2, 1, 2, 4].
  const size_t idx = v.longs({1, 2}, {2, 0});
  const size_t middle = v.output(ScalarType::Float, {2, 1, 2, 4});
  ASSERT_TRUE(v.Run("aten::index.Tensor", {x, v.list({v.none(), idx}), middle}).ok());
  EXPECT_EQ(v.sizes(middle), Sizes({2, 1, 2, 4}));
  EXPECT_EQ(v.data<float>(middle)[0], 8.0f);
  EXPECT_EQ(v.data<float>(middle)[8], 20.0f);
  // x[i, :, k]: indices apart, so their shape goes first -> [2, 3].
  const size_t i = v.longs({2}, {0, 1});
  const size_t k = v.longs({2}, {3, 1});
  const size_t apart = v.output(ScalarType::Float, {2, 3});
  ASSERT_TRUE(v.Run("aten::index.Tensor", {x, v.list({i, v.none(), k}), apart}).ok());
  EXPECT_EQ(v.data<float>(apart), Floats({3, 7, 11, 13, 17, 21}));
  // Bool self works as any dtype does.
  const size_t flags = v.bools({3}, {0, 1, 0});
  const size_t picked = v.output(ScalarType::Bool, {2});
  ASSERT_TRUE(v.Run("aten::index.Tensor", {flags, v.list({v.longs({2}, {1, 2})}), picked}).ok());
  EXPECT_EQ(v.data<uint8_t>(picked), Bools({1, 0}));
  // Out of range; a boolean mask index.
  const Status out_of_range = v.Run("aten::index.Tensor", {x, v.list({v.longs({1}, {2})}),
                                                           v.output(ScalarType::Float, {1, 3, 4})});
  EXPECT_EQ(out_of_range.code(), Error::OutOfRange);
  EXPECT_TRUE(Mentions(out_of_range, "aten::index.Tensor")) << out_of_range.message();
  EXPECT_EQ(v.Run("aten::index.Tensor",
                  {x, v.list({v.bools({2}, {1, 0})}), v.output(ScalarType::Float, {1, 3, 4})})
                .code(),
            Error::NotSupported);
}

TEST(PortableSizesTest, SizeKernelsWriteIntsWithPythonSemantics) {
  EXPECT_EQ(get_kernel("aten::sym_size.int").outputs, KernelOutputs::kInts);
  EXPECT_EQ(get_kernel("sym::floordiv").outputs, KernelOutputs::kInts);
  EXPECT_EQ(get_kernel("sym::neg").num_inputs, 1u);
  Values v;
  const size_t x = v.floats({1, 5, 2}, Floats(10));
  const size_t size = v.integer(0);
  ASSERT_TRUE(v.Run("aten::sym_size.int", {x, v.integer(-2), size}).ok());
  EXPECT_EQ(v.value(size).to_int(), 5);
  struct {
    const char* op;
    int64_t a, b, want;
  } const cases[] = {
      {"sym::add", 5, 3, 8},      {"sym::sub", 5, 7, -2},       {"sym::mul", -4, 3, -12},
      {"sym::floordiv", 7, 2, 3}, {"sym::floordiv", -7, 2, -4}, {"sym::floordiv", 7, -2, -4},
      {"sym::mod", -7, 3, 2},     {"sym::mod", 7, -3, -2},      {"sym::max", 1, 128, 128},
      {"sym::min", 1, 128, 1},
  };
  for (const auto& c : cases) {
    const size_t result = v.integer(0);
    ASSERT_TRUE(v.Run(c.op, {v.integer(c.a), v.integer(c.b), result}).ok()) << c.op;
    EXPECT_EQ(v.value(result).to_int(), c.want) << c.op << "(" << c.a << ", " << c.b << ")";
  }
  const size_t negated = v.integer(0);
  ASSERT_TRUE(v.Run("sym::neg", {size, negated}).ok());
  EXPECT_EQ(v.value(negated).to_int(), -5);
  const Status by_zero = v.Run("sym::floordiv", {v.integer(1), v.integer(0), v.integer(0)});
  EXPECT_EQ(by_zero.code(), Error::InvalidArgument);
  EXPECT_TRUE(Mentions(by_zero, "sym::floordiv"));
  // The output must be an Int value.
  EXPECT_EQ(v.Run("sym::add", {v.integer(1), v.integer(1), v.none()}).code(),
            Error::InvalidProgram);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
