#include "run_lora.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace {

using edgeshare::runtime::DataFile;
using embed_example::LoraProgram;

TEST(RunLoraTest, BothAdaptersRunOverOneFoundationLoadedOnce) {
  const char* ptd = std::getenv("FOUNDATION_PTD");
  auto chat = LoraProgram::load(std::getenv("CHAT_PTE"), ptd);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  auto code = LoraProgram::load(std::getenv("CODE_PTE"), ptd);
  ASSERT_TRUE(code.ok()) << code.status().message();
  // Each program opened the foundation by its path: one file, mapped once, serves both.
  EXPECT_EQ(DataFile::open_count(), 1u);
  auto a = chat->run(5);
  auto b = code->run(5);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_TRUE(std::isfinite(*a) && std::isfinite(*b));
  EXPECT_NE(*a, *b);  // different adapters, different logits
  // Running again over the same loaded programs gives the same logits.
  auto again = chat->run(5);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *a);
}

TEST(RunLoraTest, TheFoundationClosesWithItsLastProgram) {
  {
    auto chat = LoraProgram::load(std::getenv("CHAT_PTE"), std::getenv("FOUNDATION_PTD"));
    ASSERT_TRUE(chat.ok()) << chat.status().message();
    EXPECT_EQ(DataFile::open_count(), 1u);
  }
  EXPECT_EQ(DataFile::open_count(), 0u);
}

TEST(RunLoraTest, MissingDataFileIsAClearError) {
  auto r = LoraProgram::load(std::getenv("CHAT_PTE"), "/nonexistent/foundation.ptd");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::strstr(r.status().message(), "/nonexistent/foundation.ptd"), nullptr);
}

}  // namespace
