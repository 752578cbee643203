#include "edgeshare/generation/test_fixture.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <utility>

#include "edgeshare/runtime/core/span.h"
#include "edgeshare/testing/test_files.h"

namespace edgeshare {
namespace generation {

std::string FixturePath(const char* name) {
  const std::string expected = fixtures::env_path("GENERATION_EXPECTED_TXT");
  return expected.substr(0, expected.rfind('/') + 1) + name;
}

// expected.txt: one "<name> <ids...>" line each.
ExpectedTokens ReadExpectedTokens() {
  ExpectedTokens lines;
  const std::vector<uint8_t> bytes =
      fixtures::read_file(fixtures::env_path("GENERATION_EXPECTED_TXT"));
  const std::string text(bytes.begin(), bytes.end());
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    std::vector<int64_t>& ids = lines[line.substr(0, space)];
    const char* p = line.c_str() + space;
    char* next = nullptr;
    for (long long id = std::strtoll(p, &next, 10); next != p; id = std::strtoll(p, &next, 10)) {
      ids.push_back(id);
      p = next;
    }
  }
  return lines;
}

std::unique_ptr<LoadedMethod> LoadForwardCached(const std::string& path,
                                                const runtime::NamedDataMap& data,
                                                const runtime::Threads* threads) {
  return LoadMethod(path, data, "forward_cached", threads);
}

std::unique_ptr<LoadedMethod> LoadMethod(const std::string& path, const runtime::NamedDataMap& data,
                                         const char* name, const runtime::Threads* threads) {
  auto loaded = std::make_unique<LoadedMethod>();
  auto loader = runtime::MmapDataLoader::from(path.c_str());
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  if (!loader.ok()) return nullptr;
  loaded->loader.emplace(std::move(loader).get());
  auto program = runtime::Program::load(&*loaded->loader);
  EXPECT_TRUE(program.ok()) << program.status().message();
  if (!program.ok()) return nullptr;
  loaded->program.emplace(std::move(program).get());
  auto method = loaded->program->load_method(name, &data, threads);
  EXPECT_TRUE(method.ok()) << method.status().message();
  if (!method.ok()) return nullptr;
  loaded->method.emplace(std::move(method).get());
  return loaded;
}

std::vector<int64_t> GenerateOrFail(Generator& generator, const std::vector<int64_t>& prompt,
                                    size_t n) {
  auto out = generator.generate(runtime::Span<const int64_t>(prompt.data(), prompt.size()), n);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out->tokens : std::vector<int64_t>();
}

}  // namespace generation
}  // namespace edgeshare
