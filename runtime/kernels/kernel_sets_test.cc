// KernelSets picks the widest set the CPU runs within EDGESHARE_ISA's cap that passes its check;
// tests see every set the CPU runs. Run three times: uncapped, capped at avx2 and with a bad cap.

#include "edgeshare/runtime/kernels/kernel_sets.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace edgeshare {
namespace runtime {
namespace kernels {
namespace {

struct Named {
  const char* name;
};

bool passes(const Named&) { return true; }
bool refuses_avx512(const Named& set) { return std::strncmp(set.name, "avx512", 6) != 0; }

KernelSets<Named> every_isa(KernelSets<Named>::Check check) {
  return KernelSets<Named>(
      {
          {{"scalar"}, Isa::kScalar},
          {{"avx2"}, Isa::kAvx2},
          {{"avxvnni"}, Isa::kAvxVnni},
          {{"avx512f"}, Isa::kAvx512f},
          {{"avx512vnni"}, Isa::kAvx512Vnni},
      },
      check);
}

// The widest Isa this CPU runs within `cap`.
Isa widest(Isa cap) {
  Isa best = Isa::kScalar;
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    if (isa <= cap && cpu_runs(isa)) best = isa;
  }
  return best;
}

TEST(KernelSetsTest, the_cap_is_what_edgeshare_isa_names) {
  const char* env = std::getenv("EDGESHARE_ISA");
  if (env == nullptr || std::string(env) == "avx3") {
    EXPECT_EQ(isa_cap(), Isa::kAvx512Vnni);
    EXPECT_EQ(isa_cap_error() != nullptr, env != nullptr);
  } else {
    EXPECT_STREQ(to_string(isa_cap()), env);
    EXPECT_EQ(isa_cap_error(), nullptr);
  }
}

TEST(KernelSetsTest, all_lists_every_set_the_cpu_runs_scalar_first_whatever_the_cap) {
  const KernelSets<Named> sets = every_isa(passes);
  size_t count = 0;
  const KernelSets<Named>::Candidate* all = sets.all(&count);
  ASSERT_GE(count, 1u);
  EXPECT_EQ(all[0].isa, Isa::kScalar);
  size_t expected = 0;
  for (int i = 0; i < kNumIsas; ++i) expected += cpu_runs(static_cast<Isa>(i)) ? 1 : 0;
  EXPECT_EQ(count, expected);
  for (size_t i = 0; i < count; ++i) {
    EXPECT_TRUE(cpu_runs(all[i].isa));
    EXPECT_STREQ(all[i].kernels.name, to_string(all[i].isa));
  }
}

TEST(KernelSetsTest, best_is_the_widest_set_within_the_cap) {
  const KernelSets<Named> sets = every_isa(nullptr);
  EXPECT_EQ(sets.best_isa(), widest(isa_cap()));
  EXPECT_STREQ(sets.best().name, to_string(widest(isa_cap())));
  EXPECT_TRUE(isa_runs(sets.best_isa()));
}

TEST(KernelSetsTest, a_set_failing_its_check_gives_way_to_the_next_narrower) {
  const KernelSets<Named> sets = every_isa(refuses_avx512);
  const Isa want = widest(isa_cap() < Isa::kAvx512f ? isa_cap() : Isa::kAvxVnni);
  EXPECT_EQ(sets.best_isa(), want);
  const KernelSets<Named> none = every_isa([](const Named&) { return false; });
  EXPECT_EQ(none.best_isa(), Isa::kScalar);  // The reference is never checked.
}

TEST(KernelSetsTest, up_to_forces_a_lesser_set_uncapped) {
  const KernelSets<Named> sets = every_isa(passes);
  EXPECT_EQ(sets.up_to(Isa::kScalar).isa, Isa::kScalar);
  EXPECT_EQ(sets.up_to(Isa::kAvx2).isa, widest(Isa::kAvx2));
  EXPECT_EQ(sets.up_to(Isa::kAvx512Vnni).isa, widest(Isa::kAvx512Vnni));
}

TEST(KernelSetsTest, a_cpu_without_an_isa_never_gets_its_set) {
  const KernelSets<Named> only_vnni({{{"scalar"}, Isa::kScalar}, {{"avxvnni"}, Isa::kAvxVnni}});
  size_t count = 0;
  only_vnni.all(&count);
  EXPECT_EQ(count, cpu_runs(Isa::kAvxVnni) ? 2u : 1u);
}

}  // namespace
}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare
