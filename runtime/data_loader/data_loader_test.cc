#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
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

// The process's resident pages of the mapping that holds `data` (/proc/self/smaps: mincore would
// report the page cache, which keeps a file's pages whether or not this process maps them).
size_t ResidentPages(const void* data) {
  std::FILE* smaps = std::fopen("/proc/self/smaps", "r");
  EXPECT_NE(smaps, nullptr);
  if (smaps == nullptr) return SIZE_MAX;
  const uintptr_t address = reinterpret_cast<uintptr_t>(data);
  char line[512];
  bool inside = false;
  size_t kb = SIZE_MAX;
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line, "%lx-%lx ", &begin, &end) == 2) {
      inside = address >= begin && address < end;
    } else if (inside && std::sscanf(line, "Rss: %zu kB", &kb) == 1) {
      break;
    }
  }
  std::fclose(smaps);
  return kb == SIZE_MAX ? kb : kb * 1024 / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// A view read in full (as hashing it does) and released leaves the process's resident memory and
// still reads the file's bytes; heap copies and borrowed bytes are left alone.
TEST(MmapDataLoaderTest, ReleasedPagesLeaveResidentMemoryAndReadTheFileAgain) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const std::vector<uint8_t> pattern = Pattern(64 * page);
  const std::string path = WriteFile("release.bin", pattern);
  auto loader = MmapDataLoader::from(path.c_str());
  ASSERT_TRUE(loader.ok());
  auto view = loader->load(0, pattern.size());
  ASSERT_TRUE(view.ok());
  const auto* bytes = static_cast<const uint8_t*>(view->data());
  EXPECT_EQ(std::memcmp(bytes, pattern.data(), pattern.size()), 0);
  EXPECT_EQ(ResidentPages(bytes), 64u);
  view->release_resident_pages();
  EXPECT_EQ(ResidentPages(bytes), 0u);
  EXPECT_EQ(bytes[10 * page + 3], pattern[10 * page + 3]);
  // One read maps back its page and the kernel's fault-around neighbourhood, not the whole view.
  const size_t back = ResidentPages(bytes);
  EXPECT_GE(back, 1u);
  EXPECT_LE(back, 32u);
  EXPECT_EQ(std::memcmp(bytes, pattern.data(), pattern.size()), 0);

  auto copied = FileDataLoader::from(path.c_str());
  ASSERT_TRUE(copied.ok());
  auto copy = copied->load(0, pattern.size());
  ASSERT_TRUE(copy.ok());
  copy->release_resident_pages();
  EXPECT_EQ(std::memcmp(copy->data(), pattern.data(), pattern.size()), 0);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
