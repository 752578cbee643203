// PackedOperator's runs over several rows on two threads: a weight whose slabs do not divide among
// the threads (one slab; three) is cut into parts that do, and every own-packing format gives the
// bits of the one-thread run, ragged last tile included.

#include "edgeshare/backends/xnnpack/runtime/packed_operator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/fc_format.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/runtime/core/scoped_threads.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::ScalarType;

constexpr size_t kIn = 128;
constexpr size_t kMaxRows = 9;

// Stored bytes of `count` random values of `dtype`: halves and floats of modest size, int8 in
// [-127, 127], any byte for packed values.
std::vector<uint8_t> random_values(ScalarType dtype, size_t count, float low, float high,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(low, high);
  std::vector<uint8_t> bytes;
  if (dtype == ScalarType::Half) {
    bytes.resize(count * 2);
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = runtime::kernels::float_to_half(real(rng));
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else if (dtype == ScalarType::Float) {
    bytes.resize(count * 4);
    for (size_t i = 0; i < count; ++i) {
      const float f = real(rng);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    }
  } else if (dtype == ScalarType::Char) {
    std::uniform_int_distribution<int> value(-127, 127);
    bytes.resize(count);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(static_cast<int8_t>(value(rng)));
  } else {
    std::uniform_int_distribution<int> value(0, 255);
    bytes.resize(count);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(value(rng));
  }
  return bytes;
}

struct Packed {
  std::unique_ptr<PackedOperator> op;
  QuantizedScratchLayout layout;
};

// An [out, kIn] weight with bias (and scales) of `format`, packed in slabs of `slab_bytes`.
Packed pack(const FcFormat& format, size_t out, size_t slab_bytes) {
  PackedOperator::Shape shape;
  shape.format = &format;
  shape.input_channels = kIn;
  shape.output_channels = out;
  shape.weight_key = "w";
  shape.group_size = format.group_bits != 0 ? 32 : 0;
  shape.slab_bytes = slab_bytes;
  const std::vector<uint8_t> weight =
      random_values(format.weight_dtype, out * format.stored_in(kIn), -1, 1, 1);
  const std::vector<uint8_t> bias = random_values(format.bias_dtype, out, -1, 1, 2);
  std::vector<uint8_t> scales;
  if (format.has_scales) {
    const size_t count = format.group_scales ? out * (kIn / shape.group_size) : out;
    scales = random_values(format.scales_dtype, count, 0.01f, 0.05f, 3);
  }
  Packed packed;
  packed.op = PackedOperator::plan(shape);
  for (size_t i = 0; i < packed.op->num_slabs(); ++i) {
    packed.op->pack_slab(i, weight.data(), bias.data(), scales.empty() ? nullptr : scales.data());
  }
  const runtime::Status sealed = packed.op->seal();
  EXPECT_TRUE(sealed.ok()) << format.name << ": " << sealed.message();
  if (format.scratch != nullptr) packed.layout = format.scratch(kMaxRows, packed.op->fc_shape());
  return packed;
}

// One run of `rows` rows on the current threads.
std::vector<float> run(Packed& packed, size_t rows) {
  const size_t out = packed.op->output_channels();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> real(-1, 1);
  std::vector<float> x(rows * kIn), y(rows * out, -7.0f);
  for (float& v : x) v = real(rng);
  void* scratch = nullptr;
  if (packed.layout.bytes > 0)
    scratch = std::aligned_alloc(64, (packed.layout.bytes + 63) / 64 * 64);
  const runtime::Status status =
      packed.op->run(rows, x.data(), y.data(), packed.layout, scratch, threadpool());
  std::free(scratch);
  EXPECT_TRUE(status.ok()) << status.message();
  return y;
}

TEST(PackedOperatorTest, one_slab_is_cut_in_two_for_two_threads_and_not_for_one) {
  size_t count = 0;
  const FcFormat* const* formats = fc_formats(&count);
  for (size_t f = 0; f < count; ++f) {
    if (!formats[f]->own_packing()) continue;
    Packed packed = pack(*formats[f], 192, /*slab_bytes=*/0);
    ASSERT_EQ(packed.op->num_slabs(), 1u) << formats[f]->name;
    FcSlab parts[64];
    ASSERT_EQ(packed.op->split_own(2, parts), 2u) << formats[f]->name;
    EXPECT_EQ(parts[0].first, 0u);
    EXPECT_EQ(parts[0].count, 96u);
    EXPECT_EQ(parts[1].first, 96u);
    EXPECT_EQ(parts[1].count, 96u);
    EXPECT_EQ(
        static_cast<const uint8_t*>(parts[1].packed) - static_cast<const uint8_t*>(parts[0].packed),
        static_cast<std::ptrdiff_t>(parts[0].packed_bytes))
        << formats[f]->name;
  }
}

// Two threads (one slab, or three: cut into parts) give the one-thread run's bits, every format
// that packs its own, the last tile ragged (200 = 6 x 32 + 8), one row and several.
TEST(PackedOperatorTest, parts_on_two_threads_give_the_bits_of_one_thread) {
  ASSERT_EQ(initialize_xnnpack(), xnn_status_success);
  size_t count = 0;
  const FcFormat* const* formats = fc_formats(&count);
  for (size_t f = 0; f < count; ++f) {
    const FcFormat& format = *formats[f];
    if (!format.own_packing()) continue;
    for (size_t out : {size_t{192}, size_t{200}}) {
      for (size_t slab_bytes : {size_t{0}, size_t{64} * kIn}) {
        Packed packed = pack(format, out, slab_bytes);
        for (size_t rows : {size_t{1}, size_t{2}, size_t{3}, size_t{8}, kMaxRows}) {
          std::vector<float> one, two;
          {
            const runtime::ScopedThreads threads(1);
            one = run(packed, rows);
          }
          {
            const runtime::ScopedThreads threads(2);
            two = run(packed, rows);
          }
          ASSERT_EQ(one.size(), two.size());
          EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
              << format.name << " out " << out << " slabs " << packed.op->num_slabs() << " rows "
              << rows;
        }
      }
    }
  }
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare
