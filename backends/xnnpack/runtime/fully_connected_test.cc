// FULLY_CONNECTED through the delegate, shared and private, against a naive reference.

#include <gtest/gtest.h>

#include "edgeshare/backends/xnnpack/runtime/operator_tester.h"

namespace edgeshare {
namespace xnnpack {
namespace {

class FullyConnected : public ::testing::TestWithParam<bool> {};

TEST_P(FullyConnected, with_bias) {
  LinearTester().input_channels(64).output_channels(32).batch_size(5).has_bias(true)
      .share_weights(GetParam()).Test();
}

TEST_P(FullyConnected, without_bias) {
  LinearTester().input_channels(23).output_channels(17).batch_size(3).has_bias(false)
      .share_weights(GetParam()).Test();
}

TEST_P(FullyConnected, batch_is_product_of_leading_dims) {
  LinearTester().input_channels(16).output_channels(8).batch_dims({2, 3}).has_bias(true)
      .share_weights(GetParam()).Test();
}

TEST_P(FullyConnected, batch_one) {
  LinearTester().input_channels(128).output_channels(64).batch_size(1)
      .share_weights(GetParam()).Test();
}

TEST_P(FullyConnected, output_clamp_is_applied_outside_the_shared_operator) {
  LinearTester().input_channels(32).output_channels(16).batch_size(4).output_range(0.0f, 0.5f)
      .share_weights(GetParam()).Test();
}

INSTANTIATE_TEST_SUITE_P(SharingOnAndOff, FullyConnected, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "shared" : "private";
                         });

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
