// Two threads generating at the same time with two adapters' programs (a.pte, b.pte) over one
// foundation.ptd: each thread's tokens equal the single-threaded run's and transformers' (the
// //testing:generation_files fixture). The programs share the process-wide weights cache and the
// data file; build with --config=tsan to check the locking.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/testing/test_files.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::DataFile;
using runtime::Method;
using runtime::MmapDataLoader;
using runtime::Program;
using runtime::Span;

constexpr int kRounds = 3;

std::string FixturePath(const char* name) {
  const std::string expected = fixtures::env_path("GENERATION_EXPECTED_TXT");
  return expected.substr(0, expected.rfind('/') + 1) + name;
}

// expected.txt: one "<name> <ids...>" line each for the prompt, a, b and foundation.
std::map<std::string, std::vector<int64_t>> ReadExpected() {
  std::map<std::string, std::vector<int64_t>> lines;
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

// A program loaded over the foundation with its "forward_cached" method; members destroyed in
// reverse order: the method before the program before the loader.
struct LoadedProgram {
  std::optional<MmapDataLoader> loader;
  std::optional<Program> program;
  std::optional<Method> method;
};

std::unique_ptr<LoadedProgram> Load(const std::string& path, const DataFile& foundation) {
  auto loaded = std::make_unique<LoadedProgram>();
  auto loader = MmapDataLoader::from(path.c_str());
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  if (!loader.ok()) return nullptr;
  loaded->loader.emplace(std::move(loader).get());
  auto program = Program::load(&*loaded->loader);
  EXPECT_TRUE(program.ok()) << program.status().message();
  if (!program.ok()) return nullptr;
  loaded->program.emplace(std::move(program).get());
  auto method = loaded->program->load_method("forward_cached", &foundation.map());
  EXPECT_TRUE(method.ok()) << method.status().message();
  if (!method.ok()) return nullptr;
  loaded->method.emplace(std::move(method).get());
  return loaded;
}

std::vector<int64_t> Generate(Generator& generator, const std::vector<int64_t>& prompt, size_t n) {
  auto out = generator.generate(Span<const int64_t>(prompt.data(), prompt.size()), n);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out->tokens : std::vector<int64_t>();
}

TEST(GeneratorThreads, two_adapters_generate_at_once_as_they_do_alone) {
  const std::map<std::string, std::vector<int64_t>> expected = ReadExpected();
  ASSERT_EQ(expected.count("prompt"), 1u) << "GENERATION_EXPECTED_TXT is unreadable";
  const std::vector<int64_t>& prompt = expected.at("prompt");
  const size_t n = expected.at("a").size();
  ASSERT_GT(n, 0u);
  ASSERT_NE(expected.at("a"), expected.at("b"));  // otherwise a mix-up would go unseen

  auto foundation = DataFile::open(FixturePath("foundation.ptd").c_str());
  ASSERT_TRUE(foundation.ok()) << foundation.status().message();
  std::unique_ptr<LoadedProgram> a = Load(FixturePath("a.pte"), **foundation);
  std::unique_ptr<LoadedProgram> b = Load(FixturePath("b.pte"), **foundation);
  ASSERT_TRUE(a && b);
  auto generator_a = Generator::create(&*a->method);
  auto generator_b = Generator::create(&*b->method);
  ASSERT_TRUE(generator_a.ok()) << generator_a.status().message();
  ASSERT_TRUE(generator_b.ok()) << generator_b.status().message();

  const std::vector<int64_t> alone_a = Generate(*generator_a, prompt, n);
  const std::vector<int64_t> alone_b = Generate(*generator_b, prompt, n);
  EXPECT_EQ(alone_a, expected.at("a"));
  EXPECT_EQ(alone_b, expected.at("b"));

  std::vector<std::vector<int64_t>> runs_a(kRounds), runs_b(kRounds);
  std::thread thread_a([&] {
    for (auto& run : runs_a) run = Generate(*generator_a, prompt, n);
  });
  std::thread thread_b([&] {
    for (auto& run : runs_b) run = Generate(*generator_b, prompt, n);
  });
  thread_a.join();
  thread_b.join();
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_EQ(runs_a[round], alone_a) << "round " << round;
    EXPECT_EQ(runs_b[round], alone_b) << "round " << round;
  }
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
