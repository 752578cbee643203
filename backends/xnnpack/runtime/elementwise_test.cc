// Elementwise binary (with broadcasting) and unary ops through the delegate, shared and private.

#include <gtest/gtest.h>

#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"

namespace edgeshare {
namespace xnnpack {
namespace {

class Elementwise : public ::testing::TestWithParam<bool> {};

const schema::OpKind kBinaryOps[] = {schema::OpKind_ADD,      schema::OpKind_SUBTRACT,
                                     schema::OpKind_MULTIPLY, schema::OpKind_DIVIDE,
                                     schema::OpKind_MAXIMUM,  schema::OpKind_MINIMUM};

TEST_P(Elementwise, binary_same_shape) {
  for (schema::OpKind op : kBinaryOps) {
    SCOPED_TRACE(schema::EnumNameOpKind(op));
    BinaryTester(op).a_shape({3, 5}).b_shape({3, 5}).share_weights(GetParam()).Test();
  }
}

TEST_P(Elementwise, binary_broadcasts_both_ways) {
  for (schema::OpKind op : kBinaryOps) {
    SCOPED_TRACE(schema::EnumNameOpKind(op));
    BinaryTester(op).a_shape({2, 3, 4}).b_shape({4}).share_weights(GetParam()).Test();
    BinaryTester(op).a_shape({2, 1, 4}).b_shape({3, 1}).share_weights(GetParam()).Test();
  }
}

TEST_P(Elementwise, binary_with_scalar_operands) {
  // The exporter writes Python scalars as inline [1] constants; torch scalars are rank 0.
  BinaryTester(schema::OpKind_MULTIPLY)
      .a_shape({2, 3})
      .b_shape({1})
      .b_inline(true)
      .share_weights(GetParam())
      .Test();
  BinaryTester(schema::OpKind_SUBTRACT)
      .a_shape({2, 3})
      .b_shape({})
      .b_inline(true)
      .share_weights(GetParam())
      .Test();
  BinaryTester(schema::OpKind_ADD).a_shape({}).b_shape({}).share_weights(GetParam()).Test();
}

TEST_P(Elementwise, binary_with_named_constant_fetches_it_once_when_shared) {
  BinaryTester(schema::OpKind_MULTIPLY)
      .a_shape({4, 8})
      .b_shape({8})
      .b_named(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(Elementwise, binary_with_inline_constant) {
  BinaryTester(schema::OpKind_ADD)
      .a_shape({4, 8})
      .b_shape({1})
      .b_inline(true)
      .share_weights(GetParam())
      .Test();
}

TEST_P(Elementwise, binary_output_range_is_applied) {
  for (schema::OpKind op : kBinaryOps) {
    SCOPED_TRACE(schema::EnumNameOpKind(op));
    BinaryTester(op)
        .a_shape({6})
        .b_shape({6})
        .output_range(-0.5f, 0.5f)
        .share_weights(GetParam())
        .Test();
  }
}

TEST_P(Elementwise, clamp_as_relu_and_hardtanh) {
  UnaryTester(schema::OpKind_CLAMP)
      .shape({3, 7})
      .output_range(0.0f, INFINITY)
      .share_weights(GetParam())
      .Test();
  UnaryTester(schema::OpKind_CLAMP)
      .shape({3, 7})
      .output_range(-1.0f, 1.0f)
      .share_weights(GetParam())
      .Test();
}

TEST_P(Elementwise, unary_ops) {
  const schema::OpKind ops[] = {schema::OpKind_SIGMOID, schema::OpKind_SILU,
                                schema::OpKind_SOFTMAX, schema::OpKind_HARDSWISH,
                                schema::OpKind_ABS,     schema::OpKind_NEGATE,
                                schema::OpKind_SQUARE,  schema::OpKind_SQRT};
  for (schema::OpKind op : ops) {
    SCOPED_TRACE(schema::EnumNameOpKind(op));
    UnaryTester(op).shape({5, 9}).share_weights(GetParam()).Test();
  }
}

TEST_P(Elementwise, unary_ops_with_alpha) {
  UnaryTester(schema::OpKind_LEAKY_RELU)
      .shape({4, 6})
      .alpha(0.01f)
      .share_weights(GetParam())
      .Test();
  UnaryTester(schema::OpKind_ELU).shape({4, 6}).alpha(0.7f).share_weights(GetParam()).Test();
}

TEST_P(Elementwise, unary_with_fused_output_range) {
  UnaryTester(schema::OpKind_SILU)
      .shape({16})
      .output_range(-0.1f, 2.0f)
      .share_weights(GetParam())
      .Test();
  UnaryTester(schema::OpKind_SIGMOID)
      .shape({16})
      .output_range(0.2f, 0.8f)
      .share_weights(GetParam())
      .Test();
}

TEST_P(Elementwise, copy_reshapes) {
  UnaryTester(schema::OpKind_COPY)
      .shape({2, 3, 4})
      .output_shape({6, 4})
      .share_weights(GetParam())
      .Test();
}

TEST_P(Elementwise, floor_and_ceiling_round_toward_minus_and_plus_infinity) {
  for (schema::OpKind op : {schema::OpKind_FLOOR, schema::OpKind_CEILING}) {
    SCOPED_TRACE(schema::EnumNameOpKind(op));
    UnaryTester(op).shape({5, 9}).share_weights(GetParam()).Test();
    UnaryTester(op).shape({2, 3, 4}).output_range(-1.0f, 2.0f).share_weights(GetParam()).Test();
  }
}

TEST_P(Elementwise, rsqrt_is_one_over_square_root) {
  UnaryTester(schema::OpKind_RSQRT).shape({5, 9}).share_weights(GetParam()).Test();
  UnaryTester(schema::OpKind_RSQRT).shape({}).share_weights(GetParam()).Test();
  UnaryTester(schema::OpKind_RSQRT)
      .shape({16})
      .output_range(0.0f, 1.5f)
      .share_weights(GetParam())
      .Test();
}

TEST_P(Elementwise, mean_last_dim_keeps_or_drops_the_reduced_dimension) {
  UnaryTester(schema::OpKind_MEAN_LAST_DIM).shape({3, 7}).share_weights(GetParam()).Test();
  UnaryTester(schema::OpKind_MEAN_LAST_DIM)
      .shape({2, 3, 5})
      .output_shape({2, 3})
      .share_weights(GetParam())
      .Test();
  UnaryTester(schema::OpKind_MEAN_LAST_DIM)
      .shape({64})
      .output_shape({})
      .share_weights(GetParam())
      .Test();
  UnaryTester(schema::OpKind_MEAN_LAST_DIM).shape({4, 1}).share_weights(GetParam()).Test();
}

TEST_P(Elementwise, mean_last_dim_applies_its_output_range) {
  UnaryTester(schema::OpKind_MEAN_LAST_DIM)
      .shape({8, 3})
      .output_range(-0.5f, 0.5f)
      .share_weights(GetParam())
      .Test();
}

INSTANTIATE_TEST_SUITE_P(SharingOnAndOff, Elementwise, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "shared" : "private";
                         });

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
