// DataFile opens each .ptd once per process; FlatTensorDataMap exposes what the exporter wrote.

#include "edgeshare/runtime/named_data/data_file.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/sha256.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace runtime {
namespace {

const char* Foundation() { return std::getenv("FOUNDATION_PTD"); }

TEST(DataFileTest, SameFileIsOpenedAndMappedOncePerProcess) {
  const size_t before = DataFile::open_count();
  auto first = DataFile::open(Foundation());
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto second = DataFile::open(Foundation());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(DataFile::open_count(), before + 1);

  // Another path to the same inode is the same file.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string link = std::string(tmp != nullptr ? tmp : "/tmp") + "/linked_foundation.ptd";
  ::unlink(link.c_str());
  char target[4096];
  ASSERT_NE(::realpath(Foundation(), target), nullptr);
  ASSERT_EQ(::symlink(target, link.c_str()), 0);
  auto third = DataFile::open(link.c_str());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->get(), first->get());
}

TEST(DataFileTest, LastHolderClosesTheFile) {
  const size_t before = DataFile::open_count();
  {
    auto file = DataFile::open(Foundation());
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(DataFile::open_count(), before + 1);
  }
  EXPECT_EQ(DataFile::open_count(), before);
}

TEST(DataFileTest, MissingFileIsAnErrorNamingIt) {
  auto file = DataFile::open("/nonexistent/foundation.ptd");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error(), Error::AccessFailed);
  EXPECT_NE(std::strstr(file.status().message(), "/nonexistent/foundation.ptd"), nullptr);
}

TEST(DataFileTest, EntriesHaveLayoutsContentDigestsAndZeroCopyData) {
  auto file = DataFile::open(Foundation());
  ASSERT_TRUE(file.ok());
  const NamedDataMap& map = (*file)->map();
  ASSERT_GT(map.get_num_keys(), 0u);
  for (size_t i = 0; i < map.get_num_keys(); ++i) {
    const char* key = *map.get_key(i);
    auto layout = map.get_tensor_layout(key);
    ASSERT_TRUE(layout.ok()) << key;
    EXPECT_EQ(layout->scalar_type, ScalarType::Float);
    auto data = map.get_data(key);
    ASSERT_TRUE(data.ok());
    EXPECT_EQ(data->size(), layout->nbytes());
    // Segments are page-aligned so mmapped views need no copy.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data->data()) % 4096, 0u) << key;
    // The recorded digest is the SHA-256 of exactly these bytes.
    auto digest = map.get_digest(key);
    ASSERT_TRUE(digest.ok());
    auto computed = sha256(data->data(), data->size());
    ASSERT_TRUE(computed.ok()) << computed.status().message();
    EXPECT_EQ(*computed, *digest) << key;
    EXPECT_NE(digest->bytes, Digest().bytes);
  }
  EXPECT_EQ(map.get_data("no.such.key").error(), Error::NotFound);
}

TEST(MergedDataMapTest, MissingKeyNamesEveryFile) {
  auto file = DataFile::open(Foundation());
  ASSERT_TRUE(file.ok());
  auto merged = MergedDataMap::create({&(*file)->map(), nullptr});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->get_num_keys(), (*file)->map().get_num_keys());
  auto missing = merged->get_data("layers.9.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::strstr(missing.status().message(), "layers.9.weight"), nullptr);
  EXPECT_NE(std::strstr(missing.status().message(), "foundation.ptd"), nullptr);
}

TEST(DataFileTest, IdentityIsTheDigestOfTheEntriesDigestsThatProgramsRecord) {
  auto file = DataFile::open(Foundation());
  ASSERT_TRUE(file.ok()) << file.status().message();
  const NamedDataMap& map = (*file)->map();
  std::vector<uint8_t> digests;
  for (size_t i = 0; i < map.get_num_keys(); ++i) {
    auto key = map.get_key(i);
    ASSERT_TRUE(key.ok());
    auto digest = map.get_digest(*key);
    ASSERT_TRUE(digest.ok());
    digests.insert(digests.end(), digest->bytes.begin(), digest->bytes.end());
  }
  auto want = sha256(digests.data(), digests.size());
  ASSERT_TRUE(want.ok());
  EXPECT_EQ((*file)->identity(), *want);
  EXPECT_EQ((*file)->foundation_digest(), nullptr);  // A foundation records none of its own.

  for (const char* env : {"LORA_A_PTE", "LORA_B_PTE"}) {
    auto loader = MmapDataLoader::from(std::getenv(env));
    ASSERT_TRUE(loader.ok());
    auto program = Program::load(&*loader);
    ASSERT_TRUE(program.ok()) << program.status().message();
    ASSERT_NE(program->foundation_digest(), nullptr) << env;
    EXPECT_EQ(*program->foundation_digest(), (*file)->identity()) << env;
  }
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
