// ProgramSet on the demo files: two LoRA programs over one foundation.ptd share its weights; seeded
// inputs are the same numbers every time; the cache's counters come out as JSON.

#include "edgeshare/tools/program_set.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace edgeshare {
namespace tools {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

TEST(ProgramSetTest, SecondProgramLoadsOverTheSameDataAndPacksNothingNew) {
  xnnpack::set_weight_sharing(true);
  auto set = ProgramSet::open({Env("FOUNDATION_PTD")});
  ASSERT_TRUE(set.ok()) << set.status().message();
  ASSERT_TRUE(set->add(Env("LORA_A_PTE")).ok());
  const uint64_t packs_after_first = xnnpack::process_weights_cache_stats().packs;
  const runtime::Status second = set->add(Env("LORA_B_PTE"));
  ASSERT_TRUE(second.ok()) << second.message();

  ASSERT_EQ(set->programs().size(), 2u);
  EXPECT_EQ(set->programs()[0].name, "lora_a");
  EXPECT_EQ(set->programs()[1].name, "lora_b");
  EXPECT_EQ(set->programs()[1].methods.size(), 1u);
  EXPECT_GT(set->programs()[1].load_ms, 0.0);
  // The foundation's packed weights are reused; only lora_b's own adapter weights are packed.
  const nlohmann::json stats = weights_cache_json(xnnpack::process_weights_cache_stats());
  EXPECT_GT(stats["cache_hits"].get<uint64_t>(), 0u);
  EXPECT_LT(stats["packs"].get<uint64_t>(), 2 * packs_after_first);
  for (const char* key : {"packs", "cache_hits", "bytes_fetched", "packed_entries"}) {
    EXPECT_TRUE(stats.contains(key)) << key;
  }
  // Counted at the data map both programs were given: each of the foundation's 6 keys (fc1..fc3,
  // weight and bias) left foundation.ptd once.
  const std::map<std::string, size_t> fetches = set->data_map_fetches();
  EXPECT_EQ(fetches.size(), 6u);
  for (const auto& [key, n] : fetches) EXPECT_EQ(n, 1u) << key;
  set->clear();
  EXPECT_TRUE(set->data_map_fetches().empty());
  EXPECT_EQ(xnnpack::process_weights_cache_stats().num_packed_entries, 0u);
}

TEST(ProgramSetTest, MissingProgramNamesTheFile) {
  auto set = ProgramSet::open({});
  ASSERT_TRUE(set.ok());
  const runtime::Status status = set->add("/nonexistent/lora_x.pte");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("/nonexistent/lora_x.pte"), std::string::npos);
}

TEST(ProgramSetTest, OnlyTheNamedMethodIsLoadedAndAnUnknownOneIsRefused) {
  auto set = ProgramSet::open({Env("FOUNDATION_PTD")});
  ASSERT_TRUE(set.ok());
  const runtime::Status chat = set->add(Env("LORA_A_PTE"), "chat");
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.code(), runtime::Error::InvalidArgument);
  EXPECT_EQ(std::string(chat.message()),
            Env("LORA_A_PTE") + " has no method 'chat' (methods: forward)");
  EXPECT_TRUE(set->programs().empty());
  ASSERT_TRUE(set->add(Env("LORA_A_PTE"), "forward").ok());
  ASSERT_EQ(set->programs().size(), 1u);
  ASSERT_EQ(set->programs()[0].methods.size(), 1u);
  EXPECT_STREQ(set->programs()[0].methods[0].name(), "forward");
}

TEST(ProgramSetTest, SeededInputsAreTheSameEveryRunAndTimedRunsAreCounted) {
  auto set = ProgramSet::open({Env("FOUNDATION_PTD")});
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(set->add(Env("LORA_A_PTE")).ok());
  runtime::Method& method = set->programs()[0].methods[0];
  std::vector<NpyArray> none;
  ASSERT_TRUE(seed_inputs(method, none, "lora_a").ok());
  auto input = method.input(0);
  ASSERT_TRUE(input.ok());
  const std::vector<float> first(input->data<float>(), input->data<float>() + input->numel());
  for (float v : first) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
  ASSERT_TRUE(seed_inputs(method, none, "lora_a").ok());
  EXPECT_EQ(first, std::vector<float>(input->data<float>(), input->data<float>() + input->numel()));

  auto samples = time_method(method, /*warmup=*/1, /*iterations=*/3);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  EXPECT_EQ(samples->size(), 3u);
}

}  // namespace
}  // namespace tools
}  // namespace edgeshare
