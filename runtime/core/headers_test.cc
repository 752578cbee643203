// The core headers are meant for small targets: they may include only small standard headers.
// This test reads each public header and fails on any other #include <...>.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "edgeshare/runtime/core/data_loader.h"
#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/log.h"
#include "edgeshare/runtime/core/named_data_map.h"

namespace {

const char* const kHeaders[] = {
    "runtime/core/data_loader.h", "runtime/core/error.h",
    "runtime/core/evalue.h",      "runtime/core/freeable_buffer.h",
    "runtime/core/log.h",         "runtime/core/named_data_map.h",
    "runtime/core/result.h",      "runtime/core/scalar_type.h",
    "runtime/core/sha256.h",      "runtime/core/span.h",
    "runtime/core/status.h",      "runtime/core/tensor.h",
    "runtime/core/threads.h",
};

const char* const kAllowed[] = {"<array>",   "<cstddef>",  "<cstdint>",     "<new>",
                                "<utility>", "<optional>", "<type_traits>", "<initializer_list>"};

TEST(HeadersTest, CoreHeadersIncludeOnlySmallStandardHeaders) {
  for (const char* header : kHeaders) {
    std::FILE* f = std::fopen(header, "r");
    ASSERT_NE(f, nullptr) << header;
    char line[1024];
    int includes = 0;
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::strncmp(line, "#include <", 10) != 0) continue;
      ++includes;
      bool allowed = false;
      for (const char* ok : kAllowed) allowed |= std::strstr(line, ok) == line + 9;
      EXPECT_TRUE(allowed) << header << ": " << line;
    }
    std::fclose(f);
  }
}

}  // namespace
