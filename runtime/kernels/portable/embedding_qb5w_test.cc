// edgeshare::embedding_qb5w: the looked-up rows of a 5-bit table in blocks of 32, each value q times
// its block's half scale exactly, and a clear error for a bad index or a malformed table.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// One call of the operator over a table of `rows` x `width` signed 5-bit values (kept as `values`,
// stored as the canonical bytes) and half scales of `scales_shape`, gathering `indices`.
struct Gather {
  Gather(size_t rows, size_t width, std::vector<int32_t> scales_shape,
         std::vector<int64_t> indices, uint32_t seed)
      : values(rows * width),
        weight(rows * width * 5 / 8, 0),
        weight_shape{static_cast<int32_t>(rows), static_cast<int32_t>(width * 5 / 8)},
        scales_shape(std::move(scales_shape)),
        indices(std::move(indices)),
        indices_shape{static_cast<int32_t>(this->indices.size())},
        out(this->indices.size() * width, NAN),
        out_shape{static_cast<int32_t>(this->indices.size()), static_cast<int32_t>(width)} {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> value(-16, 15);
    std::uniform_real_distribution<float> scale(-0.5f, 0.5f);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < width; ++j) {
        const int v = value(rng);
        values[r * width + j] = v;
        if (width % 32 != 0) continue;  // A malformed table: its bytes are never read.
        // Per block of 32: u = v + 16's low nibbles two to a byte, then its fifth bits.
        const unsigned u = static_cast<unsigned>(v + 16);
        uint8_t* block = weight.data() + r * (width * 5 / 8) + j / 32 * 20;
        block[j % 32 / 2] |= static_cast<uint8_t>((u & 15) << (4 * (j % 2)));
        block[16 + j % 32 / 8] |= static_cast<uint8_t>((u >> 4) << (j % 8));
      }
    }
    size_t count = 1;
    for (int32_t d : this->scales_shape) count *= static_cast<size_t>(d);
    scales.resize(count);
    for (uint16_t& s : scales) s = kernels::float_to_half(scale(rng));
    if (!scales.empty()) scales[0] = 0x7bff;  // The largest half.
  }

  Status Run(ScalarType weight_type = ScalarType::Byte) {
    values_.clear();
    values_.emplace_back(
        Tensor(weight_type, Span<const int32_t>(weight_shape.data(), 2), weight.data()));
    values_.emplace_back(Tensor(ScalarType::Half,
                                Span<const int32_t>(scales_shape.data(), scales_shape.size()),
                                scales.data()));
    values_.emplace_back(
        Tensor(ScalarType::Long, Span<const int32_t>(indices_shape.data(), 1), indices.data()));
    values_.emplace_back(
        Tensor(ScalarType::Float, Span<const int32_t>(out_shape.data(), 2), out.data()));
    std::vector<EValue*> pointers;
    for (EValue& v : values_) pointers.push_back(&v);
    KernelFn fn = get_kernel("edgeshare::embedding_qb5w").fn;
    if (fn == nullptr) return Status::Format(Error::NotFound, "no kernel");
    return fn(Span<EValue* const>(pointers.data(), pointers.size()));
  }

  std::vector<int> values;
  std::vector<uint8_t> weight;
  std::vector<int32_t> weight_shape;
  std::vector<uint16_t> scales;
  std::vector<int32_t> scales_shape;
  std::vector<int64_t> indices;
  std::vector<int32_t> indices_shape;
  std::vector<float> out;
  std::vector<int32_t> out_shape;
  std::vector<EValue> values_;
};

TEST(EmbeddingQb5wTest, gathers_each_value_times_its_blocks_scale_exactly) {
  Gather g(5, 96, {5, 3}, {4, 0, 4, 2}, 7);
  ASSERT_TRUE(g.Run().ok());
  for (size_t i = 0; i < g.indices.size(); ++i) {
    const size_t row = static_cast<size_t>(g.indices[i]);
    for (size_t j = 0; j < 96; ++j) {
      const float want = static_cast<float>(g.values[row * 96 + j]) *
                         kernels::half_to_float(g.scales[row * 3 + j / 32]);
      EXPECT_EQ(g.out[i * 96 + j], want) << i << ", " << j;
    }
  }
}

TEST(EmbeddingQb5wTest, bad_indices_and_tables_are_errors) {
  EXPECT_EQ(Gather(5, 64, {5, 2}, {5}, 1).Run().code(), Error::OutOfRange);
  EXPECT_EQ(Gather(5, 64, {5, 2}, {-1}, 1).Run().code(), Error::OutOfRange);
  EXPECT_EQ(Gather(5, 64, {5, 2}, {0}, 1).Run(ScalarType::Char).code(), Error::InvalidProgram);
  EXPECT_EQ(Gather(5, 64, {4, 2}, {0}, 1).Run().code(), Error::InvalidProgram);
  EXPECT_EQ(Gather(5, 64, {5, 1}, {0}, 1).Run().code(), Error::InvalidProgram);
  // 48 values a row: 30 bytes, no whole number of blocks.
  EXPECT_EQ(Gather(5, 48, {5, 1}, {0}, 1).Run().code(), Error::InvalidProgram);
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
