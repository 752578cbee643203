// Which int8, int4 and 5-bit sets a CPU model gets, run under qemu-user's aarch64 models (the
// targets set QEMU_CPU and name the widest set the model has in EDGESHARE_EXPECT_ISA): the CPU's
// features as the process reads them, each kind's pick, and that pick's probe on that CPU (a set
// with an instruction the model lacks would stop the test with SIGILL here).

#include <gtest/gtest.h>

#include <cstdlib>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

using runtime::kernels::cpu_runs;
using runtime::kernels::isa_of_this_build;
using runtime::kernels::kNumIsas;
using runtime::kernels::to_string;

Isa widest_the_cpu_runs() {
  Isa widest = Isa::kScalar;
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    if (isa_of_this_build(isa) && cpu_runs(isa)) widest = isa;
  }
  return widest;
}

TEST(KernelSelection, the_cpu_runs_the_sets_of_its_model) {
  const char* want = std::getenv("EDGESHARE_EXPECT_ISA");
  ASSERT_NE(want, nullptr) << "the target names the model's widest set";
  EXPECT_STREQ(to_string(widest_the_cpu_runs()), want);
}

TEST(KernelSelection, every_quantized_kind_picks_the_widest_set_and_it_passes_its_probe) {
  const Isa widest = widest_the_cpu_runs();
  EXPECT_EQ(qs8_kernel_sets().best_isa(), widest);
  EXPECT_EQ(qb8_kernel_sets().best_isa(), widest);
  EXPECT_EQ(qc4_kernel_sets().best_isa(), widest);
  EXPECT_EQ(qb5_kernel_sets().best_isa(), widest);
  EXPECT_TRUE(qs8_matches_reference(qs8_kernel_sets().best()));
  EXPECT_TRUE(qb8_matches_reference(qb8_kernel_sets().best()));
  EXPECT_TRUE(qc4_matches_reference(qc4_kernel_sets().best()));
  EXPECT_TRUE(qb5_matches_reference(qb5_kernel_sets().best()));
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
