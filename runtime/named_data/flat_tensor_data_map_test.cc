// FlatTensorDataMap on .ptd files built here entry by entry, to reach the cases an exporter never
// writes: opaque entries, unsorted or duplicate keys, layouts that disagree with their segments.

#include "edgeshare/runtime/named_data/flat_tensor_data_map.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "edgeshare/runtime/data_loader/buffer_data_loader.h"
#include "edgeshare/schema/flat_tensor_generated.h"

namespace edgeshare {
namespace runtime {
namespace {

constexpr uint32_t kAlignment = 64;

struct Entry {
  std::string key;
  std::vector<uint8_t> bytes;
  bool has_layout = true;
  bool has_sizes = true;       // false: a layout whose sizes vector is absent
  bool has_dim_order = true;   // false: a layout whose dim_order vector is absent
  std::vector<int32_t> sizes;  // float32 layout
  size_t digest_size = 32;
};

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void PutU32(std::vector<uint8_t>& out, size_t at, uint32_t v) { std::memcpy(&out[at], &v, 4); }
void PutU64(std::vector<uint8_t>& out, size_t at, uint64_t v) { std::memcpy(&out[at], &v, 8); }

// A .ptd image: header, FlatTensor, segments (one per entry, in order).
std::vector<uint8_t> BuildPtd(const std::vector<Entry>& entries, uint64_t extra_segment_size = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<schema::DataSegment> segments;
  std::vector<flatbuffers::Offset<schema::NamedData>> named;
  uint64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    segments.emplace_back(offset, e.bytes.size() + (i == 0 ? extra_segment_size : 0));
    offset = AlignUp(offset + e.bytes.size(), kAlignment);
    flatbuffers::Offset<schema::TensorLayout> layout = 0;
    if (e.has_layout) {
      std::vector<uint8_t> order(e.sizes.size());
      for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<uint8_t>(d);
      layout = schema::CreateTensorLayoutDirect(fbb, schema::ScalarType_FLOAT,
                                                e.has_sizes ? &e.sizes : nullptr,
                                                e.has_dim_order ? &order : nullptr);
    }
    std::vector<uint8_t> digest(e.digest_size, static_cast<uint8_t>(i + 1));
    named.push_back(schema::CreateNamedDataDirect(fbb, e.key.c_str(), static_cast<uint32_t>(i),
                                                  layout, &digest));
  }
  // Not CreateFlatTensorDirect: it would sort the keyed entries, and these tests need any order.
  auto root = schema::CreateFlatTensor(fbb, 1, kAlignment, fbb.CreateVectorOfStructs(segments),
                                       fbb.CreateVector(named));
  schema::FinishFlatTensorBuffer(fbb, root);
  const uint64_t fb_offset = 48;
  const uint64_t base = AlignUp(fb_offset + fbb.GetSize(), kAlignment);
  std::vector<uint8_t> out(base + offset, 0);
  std::memcpy(out.data(), "ESTD", 4);
  PutU32(out, 4, 1);
  PutU32(out, 8, 48);
  PutU64(out, 16, fb_offset);
  PutU64(out, 24, fbb.GetSize());
  PutU64(out, 32, base);
  PutU64(out, 40, offset);
  std::memcpy(&out[fb_offset], fbb.GetBufferPointer(), fbb.GetSize());
  uint64_t at = base;
  for (const Entry& e : entries) {
    std::memcpy(&out[at], e.bytes.data(), e.bytes.size());
    at = AlignUp(at + e.bytes.size(), kAlignment);
  }
  return out;
}

Entry Weight(const char* key) {
  Entry e;
  e.key = key;
  e.sizes = {2, 2};
  e.bytes.resize(16);
  for (size_t i = 0; i < 16; ++i) e.bytes[i] = static_cast<uint8_t>(i);
  return e;
}

Entry Opaque(const char* key) {
  Entry e;
  e.key = key;
  e.has_layout = false;
  e.bytes = {1, 2, 3};
  return e;
}

Result<FlatTensorDataMap> Load(const std::vector<uint8_t>& bytes, BufferDataLoader* loader) {
  *loader = BufferDataLoader(bytes.data(), bytes.size(), "built.ptd");
  return FlatTensorDataMap::load(loader);
}

TEST(FlatTensorDataMapTest, OpaqueEntriesHaveDataButNoLayout) {
  const std::vector<uint8_t> bytes = BuildPtd({Opaque("blob"), Weight("w")});
  BufferDataLoader loader(nullptr, 0);
  auto map = Load(bytes, &loader);
  ASSERT_TRUE(map.ok()) << map.status().message();
  EXPECT_EQ(map->get_num_keys(), 2u);
  auto layout = map->get_tensor_layout("blob");
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.error(), Error::InvalidArgument);
  EXPECT_NE(std::strstr(layout.status().message(), "blob"), nullptr);
  auto blob = map->get_data("blob");
  ASSERT_TRUE(blob.ok());
  EXPECT_EQ(blob->size(), 3u);
  EXPECT_EQ(static_cast<const uint8_t*>(blob->data())[2], 3);
  auto w = map->get_tensor_layout("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->nbytes(), 16u);
  EXPECT_EQ(w->sizes.size(), 2u);
}

TEST(FlatTensorDataMapTest, DuplicateKeysAreRejected) {
  BufferDataLoader loader(nullptr, 0);
  const std::vector<uint8_t> bytes = BuildPtd({Weight("w"), Weight("w")});
  auto map = Load(bytes, &loader);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.error(), Error::InvalidData);
  EXPECT_NE(std::strstr(map.status().message(), "duplicate key 'w'"), nullptr)
      << map.status().message();
}

TEST(FlatTensorDataMapTest, UnsortedKeysAreRejected) {
  BufferDataLoader loader(nullptr, 0);
  const std::vector<uint8_t> bytes = BuildPtd({Weight("z"), Weight("a")});
  EXPECT_EQ(Load(bytes, &loader).error(), Error::InvalidData);
}

TEST(FlatTensorDataMapTest, LayoutMustMatchItsSegment) {
  BufferDataLoader loader(nullptr, 0);
  const std::vector<uint8_t> bytes = BuildPtd({Weight("w")}, /*extra_segment_size=*/4);
  auto map = Load(bytes, &loader);
  ASSERT_FALSE(map.ok());
  EXPECT_NE(std::strstr(map.status().message(), "layout of 16 bytes"), nullptr)
      << map.status().message();
}

// A crafted layout that drops one of its vectors (a rank-0 tensor: empty sizes, no dim_order) once
// crashed get_tensor_layout(); it is now refused at load, naming the file, the key and the field.
TEST(FlatTensorDataMapTest, LayoutWithoutSizesOrDimOrderIsRejected) {
  for (const bool sizes : {false, true}) {
    Entry e = Weight("w");
    e.sizes = {};
    e.bytes.resize(4);
    e.has_sizes = sizes;
    e.has_dim_order = false;
    const std::vector<uint8_t> bytes = BuildPtd({e});
    BufferDataLoader loader(nullptr, 0);
    auto map = Load(bytes, &loader);
    ASSERT_FALSE(map.ok());
    EXPECT_EQ(map.error(), Error::InvalidData);
    const std::string message = map.status().message();
    EXPECT_NE(message.find("built.ptd"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find(": w has"), std::string::npos) << message;
    EXPECT_NE(message.find(sizes ? "without dim_order" : "without sizes"), std::string::npos)
        << message;
  }
}

TEST(FlatTensorDataMapTest, RankZeroLayoutWithBothVectorsIsAScalar) {
  Entry e = Weight("w");
  e.sizes = {};
  e.bytes.resize(4);
  const std::vector<uint8_t> bytes = BuildPtd({e});
  BufferDataLoader loader(nullptr, 0);
  auto map = Load(bytes, &loader);
  ASSERT_TRUE(map.ok()) << map.status().message();
  auto layout = map->get_tensor_layout("w");
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->sizes.size(), 0u);
  EXPECT_EQ(layout->dim_order.size(), 0u);
}

TEST(FlatTensorDataMapTest, DigestMustBe32Bytes) {
  BufferDataLoader loader(nullptr, 0);
  Entry e = Weight("w");
  e.digest_size = 31;
  const std::vector<uint8_t> bytes = BuildPtd({e});
  EXPECT_EQ(Load(bytes, &loader).error(), Error::InvalidData);
}

TEST(FlatTensorDataMapTest, SegmentPastTheEndIsRejected) {
  BufferDataLoader loader(nullptr, 0);
  std::vector<uint8_t> bytes = BuildPtd({Weight("w")});
  // Claim less segment data than the entry needs.
  PutU64(bytes, 40, 8);
  bytes.resize(bytes.size() - 8);
  auto map = Load(bytes, &loader);
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.error(), Error::InvalidData);
}

TEST(FlatTensorDataMapTest, AProgramIsNotADataFile) {
  BufferDataLoader loader(nullptr, 0);
  std::vector<uint8_t> bytes = BuildPtd({Weight("w")});
  std::memcpy(bytes.data(), "ESPT", 4);
  auto map = Load(bytes, &loader);
  ASSERT_FALSE(map.ok());
  EXPECT_NE(std::strstr(map.status().message(), "bad magic"), nullptr);
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare
