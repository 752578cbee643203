// KernelSets picks the widest set the CPU runs within EDGESHARE_ISA's cap that passes its check;
// tests see every set the CPU runs. Run four times: uncapped, capped at avx2, capped at neondot
// (on each architecture one of the two is the other architecture's, which caps nothing) and with
// a bad cap.

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
// Refuses each architecture's widest sets.
bool refuses_widest(const Named& set) {
  return std::strncmp(set.name, "avx512", 6) != 0 && std::strcmp(set.name, "neoni8mm") != 0;
}

KernelSets<Named> every_isa(KernelSets<Named>::Check check) {
  return KernelSets<Named>(
      {
          {{"scalar"}, Isa::kScalar},
          {{"avx2"}, Isa::kAvx2},
          {{"avxvnni"}, Isa::kAvxVnni},
          {{"avx512f"}, Isa::kAvx512f},
          {{"avx512vnni"}, Isa::kAvx512Vnni},
          {{"neon"}, Isa::kNeon},
          {{"neondot"}, Isa::kNeonDot},
          {{"neoni8mm"}, Isa::kNeonI8mm},
      },
      check);
}

// The widest Isa this CPU runs within `cap` whose set `check` passes.
Isa widest(Isa cap, KernelSets<Named>::Check check = nullptr) {
  Isa best = Isa::kScalar;
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    const Named set{to_string(isa)};
    if (isa <= cap && cpu_runs(isa) && (check == nullptr || check(set))) best = isa;
  }
  return best;
}

TEST(KernelSetsTest, the_cap_is_what_edgeshare_isa_names_if_this_build_has_it) {
  const char* env = std::getenv("EDGESHARE_ISA");
  bool names_a_set_here = false;
  for (int i = 0; env != nullptr && i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    names_a_set_here |= std::string(env) == to_string(isa) && isa_of_this_build(isa);
  }
  if (names_a_set_here) {
    EXPECT_STREQ(to_string(isa_cap()), env);
    EXPECT_EQ(isa_cap_error(), nullptr);
  } else {
    EXPECT_EQ(isa_cap(), kWidestIsa);
    EXPECT_EQ(isa_cap_error() != nullptr, env != nullptr);
  }
}

TEST(KernelSetsTest, a_cpu_runs_scalar_and_sets_of_its_build_only) {
  EXPECT_TRUE(cpu_runs(Isa::kScalar));
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    if (!isa_of_this_build(isa)) {
      EXPECT_FALSE(cpu_runs(isa)) << to_string(isa);
    }
  }
#if defined(__aarch64__)
  // Every aarch64 CPU has NEON; each wider set needs the one before it.
  EXPECT_TRUE(cpu_runs(Isa::kNeon));
  EXPECT_TRUE(!cpu_runs(Isa::kNeonI8mm) || cpu_runs(Isa::kNeonDot));
#endif
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
  const KernelSets<Named> sets = every_isa(refuses_widest);
  EXPECT_EQ(sets.best_isa(), widest(isa_cap(), refuses_widest));
  const KernelSets<Named> none = every_isa([](const Named&) { return false; });
  EXPECT_EQ(none.best_isa(), Isa::kScalar);  // The reference is never checked.
}

TEST(KernelSetsTest, up_to_forces_a_lesser_set_uncapped) {
  const KernelSets<Named> sets = every_isa(passes);
  EXPECT_EQ(sets.up_to(Isa::kScalar).isa, Isa::kScalar);
  EXPECT_EQ(sets.up_to(Isa::kAvx2).isa, widest(Isa::kAvx2));
  EXPECT_EQ(sets.up_to(Isa::kAvx512Vnni).isa, widest(Isa::kAvx512Vnni));
  EXPECT_EQ(sets.up_to(Isa::kNeon).isa, widest(Isa::kNeon));
  EXPECT_EQ(sets.up_to(Isa::kNeonDot).isa, widest(Isa::kNeonDot));
  EXPECT_EQ(sets.up_to(Isa::kNeonI8mm).isa, widest(Isa::kNeonI8mm));
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
