// edgeshare::embedding_qc4w and its row kernels: every instruction set this CPU runs writes the
// scalar reference's bits (which are q * scale exactly), and the operator gathers only valid rows
// of a well-formed table.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Table {
  size_t rows, width, group;
  std::vector<uint8_t> packed;
  std::vector<uint16_t> scales;
};

Table random_table(size_t rows, size_t width, size_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.5f, 0.5f);
  Table t{rows, width, group, std::vector<uint8_t>(rows * width / 2),
          std::vector<uint16_t>(rows * (width / group))};
  for (uint8_t& b : t.packed) b = static_cast<uint8_t>(byte(rng));
  for (uint16_t& s : t.scales) s = kernels::float_to_half(scale(rng));
  // Extremes: -8 and 7 at the ends, and the largest and a subnormal half scale.
  t.packed[0] = 0x78;
  t.scales[0] = 0x7bff;
  if (t.scales.size() > 1) t.scales[1] = 0x0001;
  return t;
}

// Element j of a row, from the packing's definition rather than the kernels' code.
float element(const Table& t, size_t row, size_t j) {
  const uint8_t b = t.packed[row * t.width / 2 + j / 2];
  const int n = j % 2 ? b >> 4 : b & 0xF;
  const double q = n >= 8 ? n - 16 : n;
  return static_cast<float>(q * kernels::half_to_float(t.scales[row * (t.width / t.group) + j / t.group]));
}

TEST(DequantizeQc4wRowTest, every_instruction_set_writes_q_times_scale_exactly) {
  size_t count = 0;
  const auto* all = dequantize_qc4w_row_sets().all(&count);
  ASSERT_GE(count, 1u);
  EXPECT_EQ(all[0].isa, kernels::Isa::kScalar);
  EXPECT_EQ(dequantize_qc4w_row_kernel().row, dequantize_qc4w_row_sets().best().row);
  // Groups of the exporter (32, 64, 128) and others the operator admits (tails in every set).
  const size_t shapes[][2] = {{32, 32}, {1024, 32}, {1024, 64}, {1024, 128}, {96, 48}, {40, 20}, {6, 2}};
  for (const auto& shape : shapes) {
    const Table t = random_table(3, shape[0], shape[1], static_cast<uint32_t>(shape[0] + shape[1]));
    for (size_t k = 0; k < count; ++k) {
      for (size_t r = 0; r < t.rows; ++r) {
        std::vector<float> out(t.width, NAN);
        all[k].kernels.row(t.width, t.group, t.packed.data() + r * t.width / 2,
                       t.scales.data() + r * (t.width / t.group), out.data());
        for (size_t j = 0; j < t.width; ++j) {
          const float want = element(t, r, j);
          ASSERT_EQ(std::memcmp(&out[j], &want, sizeof(float)), 0)
              << to_string(all[k].isa) << " width " << t.width << " group " << t.group << " row " << r
              << " element " << j << ": " << out[j] << " vs " << want;
        }
      }
    }
  }
}

// One kernel call: weight uint8 [rows, width / 2], scales half [rows, groups], indices, out.
class Gather {
 public:
  Gather(const Table& t, std::vector<int32_t> scales_shape, std::vector<int64_t> indices)
      : t_(t),
        weight_shape_{static_cast<int32_t>(t.rows), static_cast<int32_t>(t.width / 2)},
        scales_shape_(std::move(scales_shape)),
        indices_(std::move(indices)),
        indices_shape_{1, static_cast<int32_t>(indices_.size())},
        out_(indices_.size() * t.width, NAN),
        out_shape_{1, static_cast<int32_t>(indices_.size()), static_cast<int32_t>(t.width)} {}

  Status Run(ScalarType weight_type = ScalarType::Byte) {
    values_.clear();
    values_.emplace_back(Tensor(weight_type, Span<const int32_t>(weight_shape_.data(), 2),
                                t_.packed.data()));
    values_.emplace_back(Tensor(ScalarType::Half,
                                Span<const int32_t>(scales_shape_.data(), scales_shape_.size()),
                                t_.scales.data()));
    values_.emplace_back(Tensor(ScalarType::Long, Span<const int32_t>(indices_shape_.data(), 2),
                                indices_.data()));
    values_.emplace_back(Tensor(ScalarType::Float, Span<const int32_t>(out_shape_.data(), 3),
                                out_.data()));
    pointers_.clear();
    for (EValue& v : values_) pointers_.push_back(&v);
    KernelFn fn = get_kernel("edgeshare::embedding_qc4w").fn;
    if (fn == nullptr) return Status::Format(Error::NotFound, "no kernel");
    return fn(Span<EValue* const>(pointers_.data(), pointers_.size()));
  }
  const std::vector<float>& out() const { return out_; }

 private:
  Table t_;
  std::vector<int32_t> weight_shape_, scales_shape_;
  std::vector<int64_t> indices_;
  std::vector<int32_t> indices_shape_;
  std::vector<float> out_;
  std::vector<int32_t> out_shape_;
  std::vector<EValue> values_;
  std::vector<EValue*> pointers_;
};

TEST(EmbeddingQc4wTest, gathers_the_looked_up_rows_dequantized) {
  const Table t = random_table(5, 64, 32, 7);
  const std::vector<int64_t> indices = {4, 0, 4, 2};
  Gather gather(t, {5, 2}, indices);
  ASSERT_TRUE(gather.Run().ok());
  for (size_t i = 0; i < indices.size(); ++i) {
    for (size_t j = 0; j < t.width; ++j) {
      EXPECT_EQ(gather.out()[i * t.width + j], element(t, indices[i], j)) << i << ", " << j;
    }
  }
}

TEST(EmbeddingQc4wTest, bad_indices_and_tables_are_errors) {
  const Table t = random_table(5, 64, 32, 8);
  EXPECT_EQ(Gather(t, {5, 2}, {5}).Run().code(), Error::OutOfRange);
  EXPECT_EQ(Gather(t, {5, 2}, {-1}).Run().code(), Error::OutOfRange);
  EXPECT_EQ(Gather(t, {5, 2}, {0}).Run(ScalarType::Char).code(), Error::InvalidProgram);
  EXPECT_EQ(Gather(t, {4, 2}, {0}).Run().code(), Error::InvalidProgram);  // a row without scales
  EXPECT_EQ(Gather(t, {5, 3}, {0}).Run().code(), Error::InvalidProgram);  // 64 is not 3 groups
  EXPECT_EQ(Gather(t, {10}, {0}).Run().code(), Error::InvalidProgram);
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
