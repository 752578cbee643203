// Adapter swap under generation: one loaded swappable lora.pte (the //testing:generation_files
// fixture's swap/ files) bound a -> c -> a -> c with Method::rebind_data; 32 greedy tokens after
// each swap equal transformers' with that adapter, nothing of the foundation is fetched or packed
// again, swapping back to an adapter whose file stayed open hashes nothing, and the method's
// remembered bindings fetch each file once.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/executor/external_constants.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::DataFile;
using runtime::MergedDataMap;

std::shared_ptr<const DataFile> Open(const char* name) {
  auto file = DataFile::open(FixturePath(name).c_str());
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? *file : nullptr;
}

TEST(GeneratorSwap, tokens_after_each_swap_equal_transformers_with_that_adapter) {
  const ExpectedTokens expected = ReadExpectedTokens();
  ASSERT_EQ(expected.count("c"), 1u) << "GENERATION_EXPECTED_TXT is unreadable";
  const std::vector<int64_t>& prompt = expected.at("prompt");
  const size_t n = expected.at("a").size();
  ASSERT_EQ(n, 32u);
  ASSERT_NE(expected.at("a"), expected.at("c"));

  std::shared_ptr<const DataFile> foundation = Open("swap/foundation.ptd");
  std::shared_ptr<const DataFile> a = Open("swap/a.ptd");
  std::shared_ptr<const DataFile> c = Open("swap/c.ptd");
  ASSERT_TRUE(foundation && a && c);
  auto merged = MergedDataMap::create({&foundation->map(), &a->map()});
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  std::unique_ptr<LoadedMethod> lora = LoadForwardCached(FixturePath("swap/lora.pte"), *merged);
  ASSERT_TRUE(lora);
  auto generator = Generator::create(&*lora->method);
  ASSERT_TRUE(generator.ok()) << generator.status().message();
  EXPECT_EQ(GenerateOrFail(*generator, prompt, n), expected.at("a"));

  const xnnpack::WeightsCacheStats packed = xnnpack::process_weights_cache_stats();
  const std::shared_ptr<const DataFile> order[] = {c, a, c, a, c};
  const char* const names[] = {"c", "a", "c", "a", "c"};
  for (size_t i = 0; i < 5; ++i) {
    if (i == 1) runtime::reset_external_constant_stats();
    // The method remembers each file's binding: a file bound before is switched to by pointer.
    const runtime::Status swapped = lora->method->rebind_data(
        std::shared_ptr<const runtime::NamedDataMap>(order[i], &order[i]->map()));
    ASSERT_TRUE(swapped.ok()) << swapped.message();
    EXPECT_EQ(GenerateOrFail(*generator, prompt, n), expected.at(names[i])) << "swap " << i;
  }
  // A generator made after the method ran (its input_ids hold the last run's sizes) still knows
  // the exported bound.
  auto fresh = Generator::create(&*lora->method);
  ASSERT_TRUE(fresh.ok()) << fresh.status().message();
  EXPECT_EQ(GenerateOrFail(*fresh, prompt, n), expected.at("c"));
  // a was checked at load and c at the first swap: every later swap hashed nothing, and only each
  // file's first remembered bind (c, then a) fetched.
  const runtime::ExternalConstantStats constants = runtime::external_constant_stats();
  EXPECT_EQ(constants.verifications, 0u);
  EXPECT_GT(constants.verifications_remembered, 0u);
  EXPECT_EQ(constants.fetches, constants.verifications_remembered);
  const xnnpack::WeightsCacheStats after = xnnpack::process_weights_cache_stats();
  EXPECT_EQ(after.packs, packed.packs);
  EXPECT_EQ(after.bytes_fetched, packed.bytes_fetched);
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
