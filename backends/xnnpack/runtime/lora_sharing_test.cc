// The headline promise on real files: two LoRA programs exported over one foundation, loaded in one
// process, fetch and pack every foundation weight once, and both compute what torch computed; and a
// foundation.ptd changed after export (digests kept) fails to load instead of running.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/testing/test_files.h"
#include "edgeshare/tools/counting_data_map.h"
#include "edgeshare/tools/npy.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::DataFile;
using runtime::FileDataLoader;
using runtime::Method;
using runtime::Program;

struct Loaded {
  std::unique_ptr<FileDataLoader> loader;
  std::unique_ptr<Program> program;
};

Loaded Load(const char* path) {
  Loaded out;
  auto loader = FileDataLoader::from(path);
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  out.loader = std::make_unique<FileDataLoader>(std::move(loader).get());
  auto program = Program::load(out.loader.get());
  EXPECT_TRUE(program.ok()) << program.status().message();
  out.program = std::make_unique<Program>(std::move(program).get());
  return out;
}

void ExpectMatchesReference(Method& method, const char* input_env, const char* output_env) {
  auto input = tools::read_npy(fixtures::env_path(input_env));
  auto expected = tools::read_npy(fixtures::env_path(output_env));
  ASSERT_TRUE(input.ok() && expected.ok());
  ASSERT_TRUE(method.set_input(0, input->tensor()).ok());
  ASSERT_TRUE(method.execute().ok());
  auto out = method.output(0);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->nbytes(), expected->data.size());
  const float* want = reinterpret_cast<const float*>(expected->data.data());
  for (size_t i = 0; i < out->numel(); ++i) {
    ASSERT_NEAR(out->data<float>()[i], want[i], 1e-4f + 1e-4f * std::fabs(want[i])) << i;
  }
}

// Foundation keys are the .ptd's keys; the programs keep only adapter keys.
std::vector<std::string> FoundationKeys(const DataFile& file) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < file.map().get_num_keys(); ++i) keys.push_back(*file.map().get_key(i));
  return keys;
}

TEST(LoraSharingTest, two_programs_fetch_and_pack_the_foundation_once) {
  set_weight_sharing(true);
  reset_weights_cache_counters();
  auto foundation = DataFile::open(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  const std::vector<std::string> keys = FoundationKeys(**foundation);
  ASSERT_EQ(keys.size(), 6u);  // fc1..fc3, weight and bias each

  // Fetches counted where the bytes leave foundation.ptd, whoever fetches them.
  const tools::CountingDataMap counted((*foundation)->map());
  Loaded a = Load(fixtures::env_path("LORA_A_PTE"));
  Loaded b = Load(fixtures::env_path("LORA_B_PTE"));
  {
    auto method_a = a.program->load_method("forward", &counted);
    ASSERT_TRUE(method_a.ok()) << method_a.status().message();
    const WeightsCacheStats after_a = process_weights_cache_stats();
    auto method_b = b.program->load_method("forward", &counted);
    ASSERT_TRUE(method_b.ok()) << method_b.status().message();
    const WeightsCacheStats after_b = process_weights_cache_stats();

    for (const std::string& key : keys) {
      ASSERT_EQ(after_b.named_data_fetches.count(key), 1u) << key;
      EXPECT_EQ(after_b.named_data_fetches.at(key), 1u) << key << " fetched more than once";
    }
    std::map<std::string, size_t> at_map = counted.fetches();
    EXPECT_EQ(at_map.size(), keys.size());
    for (const std::string& key : keys) EXPECT_EQ(at_map[key], 1u) << key << " at the data map";
    // Loading the second program fetched only its adapter, never a foundation byte.
    uint64_t foundation_bytes = 0;
    for (const std::string& key : keys)
      foundation_bytes += (*(*foundation)->map().get_tensor_layout(key.c_str())).nbytes();
    EXPECT_LT(after_b.bytes_fetched - after_a.bytes_fetched, foundation_bytes / 10);
    // Packed foundation entries equal the foundation's linear layers, not twice that.
    const size_t foundation_linears = 3;
    const size_t adapter_matrices_per_program = 6;
    EXPECT_EQ(after_b.cache_hits - after_a.cache_hits, foundation_linears);
    EXPECT_EQ(after_b.num_packed_entries, foundation_linears + 2 * adapter_matrices_per_program);
    EXPECT_EQ(after_b.packs, foundation_linears + 2 * adapter_matrices_per_program);
    // Nothing unpacked is held after init: the mmapped foundation pages were given back.
    EXPECT_TRUE(after_b.unpacked_data_names.empty());

    ExpectMatchesReference(*method_a, "LORA_A_INPUT", "LORA_A_OUTPUT");
    ExpectMatchesReference(*method_b, "LORA_B_INPUT", "LORA_B_OUTPUT");
  }
  // Both methods are gone: every packed entry was released.
  EXPECT_EQ(process_weights_cache_stats().num_packed_entries, 0u);
}

TEST(LoraSharingTest, with_sharing_off_each_program_packs_its_own_foundation) {
  set_weight_sharing(false);
  reset_weights_cache_counters();
  auto foundation = DataFile::open(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_TRUE(foundation.ok());
  const tools::CountingDataMap counted((*foundation)->map());
  Loaded a = Load(fixtures::env_path("LORA_A_PTE"));
  Loaded b = Load(fixtures::env_path("LORA_B_PTE"));
  {
    auto method_a = a.program->load_method("forward", &counted);
    auto method_b = b.program->load_method("forward", &counted);
    ASSERT_TRUE(method_a.ok() && method_b.ok());
    const WeightsCacheStats stats = process_weights_cache_stats();
    EXPECT_EQ(stats.named_data_fetches.at("fc1.weight"), 2u);
    for (const std::string& key : FoundationKeys(**foundation)) {
      EXPECT_EQ(counted.fetches()[key], 2u) << key << " at the data map";
    }
    EXPECT_EQ(stats.cache_hits, 0u);
    ExpectMatchesReference(*method_b, "LORA_B_INPUT", "LORA_B_OUTPUT");
  }
  set_weight_sharing(true);
}

TEST(LoraSharingTest, FoundationWithAFlippedWeightByteFailsNamingTheKey) {
  set_weight_sharing(true);
  set_verify_content(true);
  reset_weights_cache_counters();
  auto foundation = DataFile::open(fixtures::env_path("FOUNDATION_PTD"));
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  // The largest entry is a weight; find its bytes in the file and flip one in a copy.
  const runtime::NamedDataMap& map = (*foundation)->map();
  std::string key;
  size_t key_bytes = 0;
  for (const std::string& k : FoundationKeys(**foundation)) {
    const size_t n = (*map.get_tensor_layout(k.c_str())).nbytes();
    if (n > key_bytes) key = k, key_bytes = n;
  }
  std::vector<uint8_t> file = fixtures::read_file(fixtures::env_path("FOUNDATION_PTD"));
  auto entry = map.get_data(key.c_str());
  ASSERT_TRUE(entry.ok()) << entry.status().message();
  const uint8_t* entry_bytes = static_cast<const uint8_t*>(entry->data());
  auto at = std::search(file.begin(), file.end(), entry_bytes, entry_bytes + entry->size());
  ASSERT_NE(at, file.end()) << key << " not found in the file";
  at[entry->size() / 2] ^= 0x40;
  entry->free();
  const std::string tmp =
      *fixtures::env_path("TEST_TMPDIR") != '\0' ? fixtures::env_path("TEST_TMPDIR") : "/tmp";
  const std::string tampered_path = tmp + "/tampered_foundation.ptd";
  std::FILE* out = std::fopen(tampered_path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(std::fwrite(file.data(), 1, file.size(), out), file.size());
  std::fclose(out);

  auto tampered = DataFile::open(tampered_path.c_str());
  ASSERT_TRUE(tampered.ok()) << tampered.status().message();  // Its digests are all still there.
  Loaded a = Load(fixtures::env_path("LORA_A_PTE"));
  {
    auto method = a.program->load_method("forward", &(*tampered)->map());
    ASSERT_FALSE(method.ok());
    EXPECT_EQ(method.status().code(), runtime::Error::InvalidData) << method.status().message();
    const std::string message = method.status().message();
    EXPECT_NE(message.find("'" + key + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("tampered_foundation.ptd"), std::string::npos) << message;
  }
  // The failed load holds nothing and left nothing for the honest file's load to hit.
  WeightsCacheStats stats = process_weights_cache_stats();
  EXPECT_EQ(stats.num_packed_entries, 0u);
  EXPECT_EQ(stats.verification_failures, 1u);
  EXPECT_TRUE(stats.unpacked_data_names.empty());
  auto method = a.program->load_method("forward", &(*foundation)->map());
  ASSERT_TRUE(method.ok()) << method.status().message();
  EXPECT_EQ(process_weights_cache_stats().verification_failures, 1u);
  ExpectMatchesReference(*method, "LORA_A_INPUT", "LORA_A_OUTPUT");
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
