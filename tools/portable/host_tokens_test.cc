// Exported files are portable: the tiny Llama's a.pte and b.pte over one foundation.ptd, exported
// on the build machine at fp32, int8 and int4, generate here the greedy tokens the build machine's
// //tools:generate recorded for them (<bits>.json, BUILD.bazel), with the foundation's weights
// fetched once for both adapters. Built with --config=aarch64 this runs on aarch64 (qemu-user), so
// equal tokens mean the files and the runtime's arithmetic agree across the two CPUs.
//
// Argument: the rootpath of prompt.npy; the exports and the JSON files are beside it.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/npy.h"

namespace edgeshare {
namespace generation {
namespace {

std::string g_dir;  // The package's runfiles folder (prompt.npy's).

struct HostRun {
  std::vector<int64_t> a;
  std::vector<int64_t> b;
};

// <bits>.json: {"a": {"tokens": [...], ...}, "b": {...}}; empty runs if unreadable.
HostRun ReadHostRun(const std::string& bits) {
  HostRun run;
  std::ifstream in(g_dir + "/" + bits + ".json");
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("a") || !json.contains("b")) return run;
  for (const auto& [name, tokens] : {std::make_pair("a", &run.a), std::make_pair("b", &run.b)}) {
    const nlohmann::json& list = json[name]["tokens"];
    if (!list.is_array()) return HostRun();
    for (const nlohmann::json& t : list) tokens->push_back(t.get<int64_t>());
  }
  return run;
}

std::vector<int64_t> ReadPrompt() {
  auto array = tools::read_npy(g_dir + "/prompt.npy");
  EXPECT_TRUE(array.ok()) << array.status().message();
  if (!array.ok() || array->dtype != runtime::ScalarType::Long) return {};
  std::vector<int64_t> ids(array->data.size() / sizeof(int64_t));
  std::memcpy(ids.data(), array->data.data(), ids.size() * sizeof(int64_t));
  return ids;
}

class HostTokensTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HostTokensTest, both_adapters_generate_the_build_machines_tokens_over_one_foundation) {
  const std::string bits = GetParam();
  const HostRun host = ReadHostRun(bits);
  ASSERT_EQ(host.a.size(), 24u) << bits << ".json is unreadable or short";
  ASSERT_EQ(host.b.size(), 24u);
  ASSERT_NE(host.a, host.b);  // otherwise a mix-up of the adapters would go unseen
  const std::vector<int64_t> prompt = ReadPrompt();
  ASSERT_EQ(prompt.size(), 6u);

  auto foundation = runtime::DataFile::open((g_dir + "/" + bits + "/foundation.ptd").c_str());
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  xnnpack::reset_weights_cache_counters();
  std::unique_ptr<LoadedMethod> a =
      LoadForwardCached(g_dir + "/" + bits + "/a.pte", (*foundation)->map());
  ASSERT_TRUE(a);
  const std::map<std::string, size_t> after_a =
      xnnpack::process_weights_cache_stats().named_data_fetches;
  std::unique_ptr<LoadedMethod> b =
      LoadForwardCached(g_dir + "/" + bits + "/b.pte", (*foundation)->map());
  ASSERT_TRUE(b);
  // The foundation's weights are fetched (and packed) for a; b fetches only its own adapter's.
  const std::map<std::string, size_t> after_b =
      xnnpack::process_weights_cache_stats().named_data_fetches;
  EXPECT_FALSE(after_a.empty());
  EXPECT_GT(after_b.size(), after_a.size());
  for (const auto& [key, count] : after_b) EXPECT_EQ(count, 1u) << key;
  size_t foundation_keys = 0;
  for (const auto& [key, count] : after_a) {
    EXPECT_EQ(after_b.count(key), 1u) << key;
    if (key.find("lora_") == std::string::npos) ++foundation_keys;
  }
  EXPECT_GT(foundation_keys, 0u);

  auto generator_a = Generator::create(&*a->method);
  auto generator_b = Generator::create(&*b->method);
  ASSERT_TRUE(generator_a.ok()) << generator_a.status().message();
  ASSERT_TRUE(generator_b.ok()) << generator_b.status().message();
  EXPECT_EQ(GenerateOrFail(*generator_a, prompt, host.a.size()), host.a);
  EXPECT_EQ(GenerateOrFail(*generator_b, prompt, host.b.size()), host.b);
}

INSTANTIATE_TEST_SUITE_P(Widths, HostTokensTest, ::testing::Values("fp32", "int8", "int4"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace generation
}  // namespace edgeshare

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: host_tokens_test PROMPT_NPY (its folder holds the exports)\n");
    return 2;
  }
  const std::string path = argv[1];
  const size_t slash = path.rfind('/');
  edgeshare::generation::g_dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return RUN_ALL_TESTS();
}
