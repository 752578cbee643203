// Test helpers for the files a test gets through Bazel's `data` and `env` (testing/fixtures.bzl):
// the path an environment variable names, and a file's bytes, to mutate or copy.
//
//   std::vector<uint8_t> pte =
//   edgeshare::fixtures::read_file(edgeshare::fixtures::env_path("LORA_A_PTE"));
//   ASSERT_FALSE(pte.empty());
//
// Errors: none reported; an unset variable is "", an unreadable file is empty (tests assert on it).
// Thread-safety: both may be called from any thread. Ownership: the returned vector is the
// caller's.

#ifndef EDGESHARE_TESTING_TEST_FILES_H_
#define EDGESHARE_TESTING_TEST_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace edgeshare {
namespace fixtures {

// The value of environment variable `name`, or "" when it is not set.
const char* env_path(const char* name);

// Every byte of the file at `path`; empty if it cannot be opened or read.
std::vector<uint8_t> read_file(const std::string& path);

}  // namespace fixtures
}  // namespace edgeshare

#endif  // EDGESHARE_TESTING_TEST_FILES_H_
