#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edgeshare/runtime/data_loader/buffer_data_loader.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"

namespace edgeshare {
namespace runtime {
namespace {

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteFile(const char* name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  return bytes;
}

// Runs the same contract checks on every loader kind.
class LoaderContractTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::unique_ptr<DataLoader> Open(const std::string& path) {
    const std::string kind = GetParam();
    if (kind == "file") {
      auto loader = FileDataLoader::from(path.c_str());
      EXPECT_TRUE(loader.ok()) << loader.status().message();
      return std::make_unique<FileDataLoader>(std::move(loader).get());
    }
    if (kind == "mmap") {
      auto loader = MmapDataLoader::from(path.c_str());
      EXPECT_TRUE(loader.ok()) << loader.status().message();
      return std::make_unique<MmapDataLoader>(std::move(loader).get());
    }
    storage_ = Pattern(bytes_);
    return std::make_unique<BufferDataLoader>(storage_.data(), storage_.size(), "buffer");
  }
  size_t bytes_ = 10000;  // more than two pages, so ranges straddle page boundaries
  std::vector<uint8_t> storage_;
};

TEST_P(LoaderContractTest, PartialReadsReturnExactlyTheRange) {
  const std::string path = WriteFile("pattern.bin", Pattern(bytes_));
  auto loader = Open(path);
  ASSERT_EQ(loader->size(), bytes_);
  const std::vector<uint8_t> expected = Pattern(bytes_);
  for (size_t offset : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{9000}}) {
    const size_t size = std::min<size_t>(777, bytes_ - offset);
    auto buffer = loader->load(offset, size);
    ASSERT_TRUE(buffer.ok()) << buffer.status().message();
    ASSERT_EQ(buffer->size(), size);
    EXPECT_EQ(std::memcmp(buffer->data(), expected.data() + offset, size), 0) << offset;
    std::vector<uint8_t> copy(size);
    ASSERT_TRUE(loader->load_into(offset, size, copy.data()).ok());
    EXPECT_EQ(std::memcmp(copy.data(), expected.data() + offset, size), 0);
    buffer->free();
    EXPECT_EQ(buffer->data(), nullptr);
  }
}

TEST_P(LoaderContractTest, OutOfRangeRequestsAreErrorsNotShortReads) {
  const std::string path = WriteFile("pattern.bin", Pattern(bytes_));
  auto loader = Open(path);
  EXPECT_EQ(loader->load(bytes_, 1).error(), Error::OutOfRange);
  EXPECT_EQ(loader->load(bytes_ - 10, 11).error(), Error::OutOfRange);
  EXPECT_EQ(loader->load(SIZE_MAX, 2).error(), Error::OutOfRange);
  EXPECT_EQ(loader->load(2, SIZE_MAX).error(), Error::OutOfRange);
  uint8_t byte = 0;
  EXPECT_EQ(loader->load_into(bytes_, 1, &byte).code(), Error::OutOfRange);
  EXPECT_TRUE(loader->load(bytes_, 0).ok());
}

INSTANTIATE_TEST_SUITE_P(AllLoaders, LoaderContractTest,
                         ::testing::Values("file", "mmap", "buffer"));

TEST(FileDataLoaderTest, MissingFileIsAnErrorNamingIt) {
  auto loader = FileDataLoader::from("/nonexistent/lora.pte");
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.error(), Error::AccessFailed);
  EXPECT_NE(std::strstr(loader.status().message(), "/nonexistent/lora.pte"), nullptr);
  auto mapped = MmapDataLoader::from("/nonexistent/foundation.ptd");
  ASSERT_FALSE(mapped.ok());
  EXPECT_NE(std::strstr(mapped.status().message(), "foundation.ptd"), nullptr);
}

TEST(FileDataLoaderTest, DirectoryIsNotAFile) {
  const char* dir = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(FileDataLoader::from(dir != nullptr ? dir : "/tmp").error(), Error::AccessFailed);
  EXPECT_EQ(MmapDataLoader::from(dir != nullptr ? dir : "/tmp").error(), Error::AccessFailed);
}

TEST(FileDataLoaderTest, EmptyFileLoadsNothing) {
  const std::string path = WriteFile("empty.bin", {});
  auto file = FileDataLoader::from(path.c_str());
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size(), 0u);
  EXPECT_EQ(file->load(0, 1).error(), Error::OutOfRange);
  auto mapped = MmapDataLoader::from(path.c_str());
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->load(0, 1).error(), Error::OutOfRange);
  EXPECT_TRUE(mapped->load(0, 0).ok());
}

TEST(MmapDataLoaderTest, ViewsOutliveTheLoader) {
  const std::string path = WriteFile("pattern.bin", Pattern(5000));
  FreeableBuffer view;
  {
    auto loader = MmapDataLoader::from(path.c_str());
    ASSERT_TRUE(loader.ok());
    auto loaded = loader->load(4000, 1000);
    ASSERT_TRUE(loaded.ok());
    view = std::move(loaded).get();
  }
  EXPECT_EQ(static_cast<const uint8_t*>(view.data())[0], Pattern(5000)[4000]);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
