#include "run_lora.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace {

TEST(RunLoraTest, BothAdaptersRunOverTheSharedFoundation) {
  auto a = embed_example::run_lora(std::getenv("LORA_A_PTE"), std::getenv("FOUNDATION_PTD"));
  auto b = embed_example::run_lora(std::getenv("LORA_B_PTE"), std::getenv("FOUNDATION_PTD"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_NE(*a, *b);  // different adapters, different outputs
}

TEST(RunLoraTest, MissingDataFileIsAClearError) {
  auto r = embed_example::run_lora(std::getenv("LORA_A_PTE"), "/nonexistent/foundation.ptd");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::strstr(r.status().message(), "/nonexistent/foundation.ptd"), nullptr);
}

}  // namespace
