// The generation fixture (//testing:generation_files) seen from C++ tests: its files' paths, the
// tokens transformers generated (expected.txt), a program's "forward_cached" loaded over a data
// map, and a greedy run; failures are reported to gtest.
//
//   const ExpectedTokens expected = ReadExpectedTokens();   // expected.at("prompt"), .at("a"), ...
//   std::unique_ptr<LoadedMethod> a = LoadForwardCached(FixturePath("a.pte"), foundation->map());
//   auto generator = Generator::create(&*a->method);
//   EXPECT_EQ(GenerateOrFail(*generator, expected.at("prompt"), 32), expected.at("a"));
//
// Needs GENERATION_EXPECTED_TXT (the rootpath of //testing:generation/expected.txt) in the test's
// environment; test-only.

#ifndef EDGESHARE_GENERATION_TEST_FIXTURE_H_
#define EDGESHARE_GENERATION_TEST_FIXTURE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"

namespace edgeshare {
namespace generation {

// "prompt", "a", "b", "c", "foundation" -> token ids (empty map if the file is unreadable).
using ExpectedTokens = std::map<std::string, std::vector<int64_t>>;
ExpectedTokens ReadExpectedTokens();

// A file of the fixture, e.g. "foundation.ptd" or "swap/a.ptd".
std::string FixturePath(const char* name);

// A program's "forward_cached" method; members are destroyed in reverse order: the method before
// the program before the loader. The data map must outlive it.
struct LoadedMethod {
  std::optional<runtime::MmapDataLoader> loader;
  std::optional<runtime::Program> program;
  std::optional<runtime::Method> method;
};

// Null (and a failed test) if the program or its method does not load. The method loads and runs
// on `threads` (null: the caller's current Threads), which must outlive it.
std::unique_ptr<LoadedMethod> LoadMethod(const std::string& path, const runtime::NamedDataMap& data,
                                         const char* method,
                                         const runtime::Threads* threads = nullptr);

// LoadMethod of "forward_cached".
std::unique_ptr<LoadedMethod> LoadForwardCached(const std::string& path,
                                                const runtime::NamedDataMap& data,
                                                const runtime::Threads* threads = nullptr);

// generator.generate(prompt, n)'s tokens; an error fails the test and returns no tokens.
std::vector<int64_t> GenerateOrFail(Generator& generator, const std::vector<int64_t>& prompt,
                                    size_t n);

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_TEST_FIXTURE_H_
