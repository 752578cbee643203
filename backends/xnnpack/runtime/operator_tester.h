// Fluent testers for the XNNPACK delegate's operators, in the shape of XNNPACK's own operator
// testers: configure one node, Test() builds its graph, loads it as TWO delegate handles (two
// "programs"), runs both against a naive C++ reference, and checks the weights cache's counters
// for the chosen sharing mode.
//
//   LinearTester().input_channels(64).output_channels(32).batch_size(5).has_bias(true)
//       .share_weights(true).Test();
//   LinearTester().input_channels(64).output_channels(32).weight_dtype_fp16(true).Test();
//   BinaryTester(schema::OpKind_ADD).a_shape({2, 3, 4}).b_shape({4}).b_named(true).Test();
//   UnaryTester(schema::OpKind_ELU).shape({3, 7}).alpha(0.5f).share_weights(false).Test();
//   UnaryTester(schema::OpKind_MEAN_LAST_DIM).shape({3, 7}).output_shape({3}).Test();
//
// Each op kind's reference is one row: find_binary_reference() and find_unary_reference().
// Uses gtest assertions; leaves weight sharing on and the cache empty when it returns.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_OPERATOR_TESTER_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_OPERATOR_TESTER_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/graph_builder.h"
#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/test_delegate.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"

namespace edgeshare {
namespace xnnpack {

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// IEEE half <-> float, round to nearest even (the f16 path's reference and its test data).
inline uint16_t half_from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): value / 2^-24, rounded to nearest even.
    float a;
    std::memcpy(&a, &abs, sizeof(a));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t rounded = abs + 0x0FFFu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

inline float float_from_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    magnitude = mant == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -magnitude : magnitude;
}

inline float round_to_half(float f) { return float_from_half(half_from_float(f)); }

// Half values packed two per float, as InMemoryDataMap stores float vectors: the map then hands
// out exactly the half bytes (plus two zero bytes when the count is odd).
inline std::vector<float> pack_halves(const std::vector<float>& values) {
  std::vector<uint16_t> halves(values.size() + values.size() % 2, 0);
  for (size_t i = 0; i < values.size(); ++i) halves[i] = half_from_float(values[i]);
  std::vector<float> packed(halves.size() / 2);
  std::memcpy(packed.data(), halves.data(), halves.size() * sizeof(uint16_t));
  return packed;
}

inline void expect_near_relative(const std::vector<float>& got, const std::vector<float>& want,
                                 const std::string& what, float relative = 1e-4f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tolerance = relative * std::max(1.0f, std::fabs(want[i]));
    ASSERT_NEAR(got[i], want[i], tolerance) << what << " at element " << i;
  }
}

inline size_t numel_of(const std::vector<uint32_t>& dims) {
  size_t n = 1;
  for (uint32_t d : dims) n *= d;
  return n;
}

inline std::vector<int32_t> to_int_dims(const std::vector<uint32_t>& dims) {
  return std::vector<int32_t>(dims.begin(), dims.end());
}

// Each of `keys` fetched exactly `times` (in the cache's counters and at the map), and no other
// key fetched at all: a check that cannot pass when nothing was fetched or a key came twice.
inline void expect_fetches(const WeightsCacheStats& stats, const InMemoryDataMap& map,
                           const std::vector<std::string>& keys, size_t times, const char* when) {
  EXPECT_EQ(stats.named_data_fetches.size(), keys.size()) << "keys fetched " << when;
  for (const std::string& key : keys) {
    const auto it = stats.named_data_fetches.find(key);
    EXPECT_EQ(it == stats.named_data_fetches.end() ? 0 : it->second, times)
        << "fetches of " << key << " " << when;
    EXPECT_EQ(map.get_data_calls(key), times) << "get_data calls for " << key << " " << when;
  }
  EXPECT_EQ(map.get_data_calls(), keys.size() * times) << "get_data calls " << when;
}

// Loads `blob` twice over `map`, runs both handles on `input`, compares with `want`, and checks the
// cache counters after each init. The first handle misses: each of `named_keys` fetched once,
// `packs_per_handle` operators packed, `retained_per_handle` raw constants retained, no hit. With
// sharing the second fetches and packs nothing and hits once per packed operator and retained
// constant; without, it fetches and packs its own copies and never hits. The cache is empty after
// both handles go.
inline void run_two_handles(const std::vector<uint8_t>& blob, const InMemoryDataMap& map,
                            const std::vector<std::string>& named_keys, size_t packs_per_handle,
                            size_t retained_per_handle, bool share,
                            const std::vector<HostTensor>& inputs,
                            const std::vector<uint32_t>& output_dims,
                            const std::vector<float>& want, float relative_tolerance = 1e-4f) {
  set_weight_sharing(share);
  reset_weights_cache_counters();
  {
    auto first = TestDelegate::init(blob, &map, "program_a");
    ASSERT_TRUE(first.ok()) << first.status().message();
    const WeightsCacheStats once = process_weights_cache_stats();
    expect_fetches(once, map, named_keys, 1, "after the first init");
    EXPECT_EQ(once.packs, packs_per_handle);
    EXPECT_EQ(once.num_packed_entries, packs_per_handle);
    EXPECT_EQ(once.retained_data_names.size(), retained_per_handle);
    EXPECT_EQ(once.cache_hits, 0u) << "the first handle found something in an empty cache";

    auto second = TestDelegate::init(blob, &map, "program_b");
    ASSERT_TRUE(second.ok()) << second.status().message();
    WeightsCacheStats stats = process_weights_cache_stats();
    const size_t copies = share ? 1 : 2;
    expect_fetches(stats, map, named_keys, copies, "after the second init");
    EXPECT_EQ(stats.packs, packs_per_handle * copies);
    EXPECT_EQ(stats.num_packed_entries, packs_per_handle * copies);
    EXPECT_EQ(stats.cache_hits, share ? packs_per_handle + retained_per_handle : 0u);
    EXPECT_TRUE(stats.unpacked_data_names.empty());

    for (TestDelegate* d : {&*first, &*second}) {
      std::vector<HostTensor> in = inputs;
      std::vector<HostTensor*> in_ptrs;
      for (HostTensor& t : in) in_ptrs.push_back(&t);
      HostTensor out{to_int_dims(output_dims), std::vector<float>(numel_of(output_dims), NAN)};
      // Twice: the second run must not depend on state left by the first.
      for (int run = 0; run < 2; ++run) {
        auto status = d->run(in_ptrs, {&out});
        ASSERT_TRUE(status.ok()) << status.message();
        expect_near_relative(out.data, want, share ? "shared" : "private", relative_tolerance);
      }
    }
  }
  WeightsCacheStats after = process_weights_cache_stats();
  EXPECT_EQ(after.num_packed_entries, 0u);
  EXPECT_TRUE(after.packed_data_names.empty());
  EXPECT_TRUE(after.retained_data_names.empty());
  // Every buffer the delegate fetched was given back (packed ones right after packing).
  EXPECT_EQ(map.live_buffers(), 0u);
  set_weight_sharing(true);
}

class LinearTester {
 public:
  LinearTester& input_channels(size_t n) {
    input_channels_ = n;
    return *this;
  }
  LinearTester& output_channels(size_t n) {
    output_channels_ = n;
    return *this;
  }
  LinearTester& batch_size(size_t n) {
    batch_dims_ = {static_cast<uint32_t>(n)};
    return *this;
  }
  // Leading dimensions of a rank > 2 input, e.g. {2, 3} for x [2, 3, in].
  LinearTester& batch_dims(std::vector<uint32_t> dims) {
    batch_dims_ = dims;
    return *this;
  }
  LinearTester& has_bias(bool b) {
    has_bias_ = b;
    return *this;
  }
  LinearTester& share_weights(bool b) {
    share_ = b;
    return *this;
  }
  LinearTester& output_range(float lo, float hi) {
    min_ = lo;
    max_ = hi;
    return *this;
  }
  // Weight and bias as IEEE half constants ("<key>.fp16", dtype HALF), as the exporter's
  // fc_weight_dtype="fp16" writes them: the delegate runs its f32 x f16w kernels (activations
  // stay f32, so the reference rounds only the weight and bias to half).
  LinearTester& weight_dtype_fp16(bool v) {
    fp16_ = v;
    return *this;
  }

  // The weight as int8 per output row with float scales (QC8W: "<key>.qc8w" and
  // "<key>.qc8w.scales", as the exporter's quantize="int8" writes them): the delegate runs its
  // int8 kernels, compared with the same computation here (activations quantized in blocks of 32
  // inputs, each on its own, an exact integer dot per block fused into a float accumulator with
  // the block's scale, then the weight scale and the bias).
  LinearTester& weight_int8(bool v) {
    int8_ = v;
    return *this;
  }

  // The weight as int4 in groups of `group` inputs with float16 scales (QC4W: "<key>.qc4w" and
  // "<key>.qc4w.scales", as the exporter's quantize="int4" writes them): the delegate runs its
  // int4 kernels, compared with the same computation here (activations in blocks of 32, an exact
  // integer sum per block, one fused multiply-add per block with the activation and group scales'
  // product, then the bias).
  LinearTester& weight_int4(size_t group) {
    int4_group_ = group;
    return *this;
  }

  void Test() const {
    InMemoryDataMap map("foundation.ptd");
    std::vector<float> w = random_floats(output_channels_ * input_channels_, -1, 1, 1);
    std::vector<float> b = random_floats(output_channels_, -1, 1, 2);
    const bool int4 = int4_group_ > 0;
    const std::string suffix = fp16_ ? ".fp16" : int8_ ? ".qc8w" : int4 ? ".qc4w" : "";
    const std::string wkey = "linear.weight" + suffix;
    const std::string bkey = std::string("linear.bias") + (fp16_ ? ".fp16" : "");
    if (fp16_) {
      for (float& v : w) v = round_to_half(v);
      for (float& v : b) v = round_to_half(v);
    }
    GraphBuilder g;
    std::vector<uint32_t> x_dims = batch_dims_, y_dims = batch_dims_;
    x_dims.push_back(input_channels_);
    y_dims.push_back(output_channels_);
    const uint32_t x = g.input(x_dims);
    std::vector<int8_t> q;
    std::vector<float> scales;
    if (int8_) quantize_rows(w, output_channels_, input_channels_, &q, &scales);
    if (int4) quantize_groups(w, &q, &scales);
    const uint32_t wid = g.named(
        wkey, {static_cast<uint32_t>(output_channels_), static_cast<uint32_t>(input_channels_)},
        map.add(wkey, fp16_   ? pack_halves(w)
                      : int8_ ? pack_bytes(q)
                      : int4  ? pack_bytes(pack_nibbles(q))
                              : w));
    if (fp16_) g.set_dtype(wid, edgeshare::schema::ScalarType_HALF);
    std::vector<uint32_t> ins = {x, wid};
    std::vector<std::string> keys = {wkey};
    if (int8_) {
      const std::string skey = "linear.weight.qc8w.scales";
      g.set_qc8w(wid, skey, map.add(skey, scales));
      keys.push_back(skey);
    }
    if (int4) {
      const std::string skey = "linear.weight.qc4w.scales";
      g.set_qc4w(wid, skey, map.add(skey, pack_halves(scales)), static_cast<uint32_t>(int4_group_));
      keys.push_back(skey);
    }
    if (has_bias_) {
      const uint32_t bid = g.named(bkey, {static_cast<uint32_t>(output_channels_)},
                                   map.add(bkey, fp16_ ? pack_halves(b) : b));
      if (fp16_) g.set_dtype(bid, edgeshare::schema::ScalarType_HALF);
      ins.push_back(bid);
      keys.push_back(bkey);
    }
    const uint32_t y = g.output(y_dims);
    g.node(schema::OpKind_FULLY_CONNECTED, ins, {y}, min_, max_);

    const size_t batch = numel_of(batch_dims_);
    const std::vector<float> input = random_floats(batch * input_channels_, -1, 1, 3);
    const std::vector<float> want = int8_  ? int8_reference(input, q, scales, b, batch)
                                    : int4 ? int4_reference(input, q, scales, b, batch)
                                           : reference(input, w, b, batch);
    run_two_handles(g.build(), map, keys, /*packs_per_handle=*/1, /*retained_per_handle=*/0, share_,
                    {HostTensor{to_int_dims(x_dims), input}}, y_dims, want,
                    int8_ || int4 ? 1e-6f : 1e-4f);
  }

 private:
  // Symmetric int8 per row of k values, round half to even: the exporter's scheme (weights) and
  // the kernels' (activations: x * (127 / max|x|)).
  static void quantize_rows(const std::vector<float>& x, size_t rows, size_t k,
                            std::vector<int8_t>* q, std::vector<float>* scales) {
    q->assign(rows * k, 0);
    scales->assign(rows, 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      float amax = 0.0f;
      for (size_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[r * k + i]));
      (*scales)[r] = amax / 127.0f;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (size_t i = 0; i < k; ++i) {
        const float v = std::min(127.0f, std::max(-127.0f, x[r * k + i] * inv));
        (*q)[r * k + i] = static_cast<int8_t>(std::nearbyint(v));
      }
    }
  }
  // Symmetric int4 per group of int4_group_ inputs: scale = half(max|w| / 7.5), q = clamp(round(w /
  // scale), -8, 7) (0 for a zero scale); scales [out, in / group] as floats half holds exactly.
  void quantize_groups(const std::vector<float>& w, std::vector<int8_t>* q,
                       std::vector<float>* scales) const {
    const size_t groups = input_channels_ / int4_group_;
    q->assign(w.size(), 0);
    scales->assign(output_channels_ * groups, 0.0f);
    for (size_t o = 0; o < output_channels_; ++o) {
      for (size_t g = 0; g < groups; ++g) {
        const size_t at = o * input_channels_ + g * int4_group_;
        float amax = 0.0f;
        for (size_t i = 0; i < int4_group_; ++i) amax = std::max(amax, std::fabs(w[at + i]));
        const float s = round_to_half(amax / 7.5f);
        (*scales)[o * groups + g] = s;
        if (s == 0.0f) continue;
        for (size_t i = 0; i < int4_group_; ++i) {
          const float v = std::min(7.0f, std::max(-8.0f, std::nearbyint(w[at + i] / s)));
          (*q)[at + i] = static_cast<int8_t>(v);
        }
      }
    }
  }
  // Two int4 values a byte, element 2j in the low nibble of byte j (the file's canonical layout).
  static std::vector<int8_t> pack_nibbles(const std::vector<int8_t>& q) {
    std::vector<int8_t> out(q.size() / 2);
    for (size_t j = 0; j < out.size(); ++j) {
      out[j] = static_cast<int8_t>((q[2 * j] & 0x0F) | ((q[2 * j + 1] & 0x0F) << 4));
    }
    return out;
  }
  // Activations as the kernels quantize them: each row in blocks of kBlock inputs (the last one
  // padded with zeros), each block by its own max |x|; q is rows x blocks * kBlock.
  static constexpr size_t kBlock = 32;
  static size_t blocks_of(size_t k) { return (k + kBlock - 1) / kBlock; }
  static void quantize_blocks(const std::vector<float>& x, size_t rows, size_t k,
                              std::vector<int8_t>* q, std::vector<float>* scales) {
    const size_t blocks = blocks_of(k);
    std::vector<float> padded(rows * blocks * kBlock, 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      std::copy(x.begin() + r * k, x.begin() + (r + 1) * k, padded.begin() + r * blocks * kBlock);
    }
    quantize_rows(padded, rows * blocks, kBlock, q, scales);
  }
  // The int4 fully connected as the delegate computes it (kernels/kernels.h).
  std::vector<float> int4_reference(const std::vector<float>& input, const std::vector<int8_t>& q,
                                    const std::vector<float>& scales, const std::vector<float>& b,
                                    size_t batch) const {
    std::vector<int8_t> qx;
    std::vector<float> xs;
    quantize_blocks(input, batch, input_channels_, &qx, &xs);
    const size_t groups = input_channels_ / int4_group_, blocks = blocks_of(input_channels_);
    std::vector<float> want(batch * output_channels_);
    for (size_t n = 0; n < batch; ++n) {
      for (size_t o = 0; o < output_channels_; ++o) {
        float acc = 0.0f;
        for (size_t blk = 0; blk < blocks; ++blk) {
          int32_t sum = 0;
          for (size_t i = blk * kBlock; i < (blk + 1) * kBlock; ++i) {
            sum += int32_t(qx[n * blocks * kBlock + i]) * int32_t(q[o * input_channels_ + i]);
          }
          const float scale = xs[n * blocks + blk] * scales[o * groups + blk * kBlock / int4_group_];
          acc = std::fma(static_cast<float>(sum), scale, acc);
        }
        const float y = acc + (has_bias_ ? b[o] : 0.0f);
        want[n * output_channels_ + o] = std::min(max_, std::max(min_, y));
      }
    }
    return want;
  }
  // Bytes carried in floats (InMemoryDataMap holds float entries); a multiple of 4 bytes here.
  static std::vector<float> pack_bytes(const std::vector<int8_t>& bytes) {
    std::vector<float> out((bytes.size() + 3) / 4, 0.0f);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  // The int8 fully connected as the delegate computes it: per block acc = fma(float(dot), xs, acc),
  // then y = fma(acc, ws, b).
  std::vector<float> int8_reference(const std::vector<float>& input, const std::vector<int8_t>& q,
                                    const std::vector<float>& scales, const std::vector<float>& b,
                                    size_t batch) const {
    std::vector<int8_t> qx;
    std::vector<float> xs;
    quantize_blocks(input, batch, input_channels_, &qx, &xs);
    const size_t blocks = blocks_of(input_channels_);
    std::vector<float> want(batch * output_channels_);
    for (size_t n = 0; n < batch; ++n) {
      for (size_t o = 0; o < output_channels_; ++o) {
        float acc = 0.0f;
        for (size_t blk = 0; blk < blocks; ++blk) {
          int32_t dot = 0;
          for (size_t i = blk * kBlock; i < (blk + 1) * kBlock && i < input_channels_; ++i) {
            dot += int32_t(qx[n * blocks * kBlock + i]) * int32_t(q[o * input_channels_ + i]);
          }
          acc = std::fma(static_cast<float>(dot), xs[n * blocks + blk], acc);
        }
        const float y = std::fma(acc, scales[o], has_bias_ ? b[o] : 0.0f);
        want[n * output_channels_ + o] = std::min(max_, std::max(min_, y));
      }
    }
    return want;
  }

  // y = x w^T + b in double (w and b already half-rounded on the f16 path), clamped.
  std::vector<float> reference(const std::vector<float>& input, const std::vector<float>& w,
                               const std::vector<float>& b, size_t batch) const {
    std::vector<float> want(batch * output_channels_);
    for (size_t n = 0; n < batch; ++n) {
      for (size_t o = 0; o < output_channels_; ++o) {
        double acc = has_bias_ ? b[o] : 0.0;
        for (size_t i = 0; i < input_channels_; ++i) {
          const float xi = input[n * input_channels_ + i];
          acc += double(xi) * w[o * input_channels_ + i];
        }
        want[n * output_channels_ + o] = std::min(max_, std::max(min_, float(acc)));
      }
    }
    return want;
  }

  size_t input_channels_ = 1;
  size_t output_channels_ = 1;
  std::vector<uint32_t> batch_dims_ = {1};
  bool has_bias_ = true;
  bool share_ = true;
  bool fp16_ = false;
  bool int8_ = false;
  size_t int4_group_ = 0;  // 0: not int4
  float min_ = -std::numeric_limits<float>::infinity();
  float max_ = std::numeric_limits<float>::infinity();
};

// The reference of each binary op kind: one row per kind (a kind without a row fails its test).
struct BinaryReference {
  schema::OpKind op;
  float (*apply)(float a, float b);
};

inline const BinaryReference* find_binary_reference(schema::OpKind op) {
  static const BinaryReference kRows[] = {
      {schema::OpKind_ADD, [](float a, float b) { return a + b; }},
      {schema::OpKind_SUBTRACT, [](float a, float b) { return a - b; }},
      {schema::OpKind_MULTIPLY, [](float a, float b) { return a * b; }},
      {schema::OpKind_DIVIDE, [](float a, float b) { return a / b; }},
      {schema::OpKind_MAXIMUM, [](float a, float b) { return std::max(a, b); }},
      {schema::OpKind_MINIMUM, [](float a, float b) { return std::min(a, b); }},
  };
  for (const BinaryReference& row : kRows) {
    if (row.op == op) return &row;
  }
  return nullptr;
}

// The numpy broadcast of two shapes (assumed compatible).
inline std::vector<uint32_t> broadcast_dims(const std::vector<uint32_t>& a,
                                            const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const uint32_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = std::max(da, db);
  }
  return out;
}

// The offset in a tensor of `shape` of the element broadcast to `index` of `out_dims`.
inline size_t broadcast_offset(const std::vector<uint32_t>& shape, const std::vector<size_t>& index,
                               const std::vector<uint32_t>& out_dims) {
  size_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    const size_t i = index[out_dims.size() - shape.size() + d];
    offset = offset * shape[d] + (shape[d] == 1 ? 0 : i);
  }
  return offset;
}

// y = op(a, b) with broadcasting, clamped to [lo, hi].
inline std::vector<float> binary_reference(const BinaryReference& ref, const std::vector<float>& a,
                                           const std::vector<uint32_t>& a_dims,
                                           const std::vector<float>& b,
                                           const std::vector<uint32_t>& b_dims, float lo,
                                           float hi) {
  const std::vector<uint32_t> out_dims = broadcast_dims(a_dims, b_dims);
  std::vector<float> want(numel_of(out_dims));
  std::vector<size_t> index(out_dims.size());
  for (size_t flat = 0; flat < want.size(); ++flat) {
    size_t rem = flat;
    for (size_t d = out_dims.size(); d-- > 0;) {
      index[d] = rem % out_dims[d];
      rem /= out_dims[d];
    }
    const float r = ref.apply(a[broadcast_offset(a_dims, index, out_dims)],
                              b[broadcast_offset(b_dims, index, out_dims)]);
    want[flat] = std::min(hi, std::max(lo, r));
  }
  return want;
}

class BinaryTester {
 public:
  explicit BinaryTester(schema::OpKind op) : op_(op) {}
  BinaryTester& a_shape(std::vector<uint32_t> s) {
    a_ = s;
    return *this;
  }
  BinaryTester& b_shape(std::vector<uint32_t> s) {
    b_ = s;
    return *this;
  }
  // b as a named constant from the data map (retained by the cache) instead of an input.
  BinaryTester& b_named(bool v) {
    b_named_ = v;
    return *this;
  }
  // b as an inline constant in the graph.
  BinaryTester& b_inline(bool v) {
    b_inline_ = v;
    return *this;
  }
  BinaryTester& share_weights(bool v) {
    share_ = v;
    return *this;
  }
  BinaryTester& output_range(float lo, float hi) {
    min_ = lo;
    max_ = hi;
    return *this;
  }

  void Test() const {
    const BinaryReference* ref = find_binary_reference(op_);
    ASSERT_NE(ref, nullptr) << "no reference row for " << schema::EnumNameOpKind(op_);
    const std::vector<uint32_t> out_dims = broadcast_dims(a_, b_);
    const std::vector<float> a = random_floats(numel_of(a_), -2, 2, 4);
    // Divisors away from zero.
    const std::vector<float> b = random_floats(numel_of(b_), 0.5f, 2, 5);
    InMemoryDataMap map("adapter.ptd");
    GraphBuilder g;
    const uint32_t ia = g.input(a_);
    uint32_t ib;
    std::vector<std::string> keys;
    std::vector<HostTensor> inputs = {HostTensor{to_int_dims(a_), a}};
    if (b_named_) {
      ib = g.named("scale", b_, map.add("scale", b));
      keys.push_back("scale");
    } else if (b_inline_) {
      ib = g.inline_constant(b_, b);
    } else {
      ib = g.input(b_);
      inputs.push_back(HostTensor{to_int_dims(b_), b});
    }
    const uint32_t y = g.output(out_dims);
    g.node(op_, {ia, ib}, {y}, min_, max_);
    run_two_handles(g.build(), map, keys, /*packs_per_handle=*/0,
                    /*retained_per_handle=*/b_named_ ? 1 : 0, share_, inputs, out_dims,
                    binary_reference(*ref, a, a_, b, b_, min_, max_));
  }

 private:
  schema::OpKind op_;
  std::vector<uint32_t> a_ = {4};
  std::vector<uint32_t> b_ = {4};
  bool b_named_ = false;
  bool b_inline_ = false;
  bool share_ = true;
  float min_ = -std::numeric_limits<float>::infinity();
  float max_ = std::numeric_limits<float>::infinity();
};

// The reference of each unary op kind: one row per kind (a kind without a row fails its test).
// Elementwise kinds give `elementwise`; kinds that work on rows of the last dimension give
// `per_row` (writing n outputs, or one when the row is reduced).
struct UnaryReference {
  schema::OpKind op;
  float input_lo, input_hi;  // Where the test draws inputs (in the op's domain).
  float (*elementwise)(float x, float alpha);
  void (*per_row)(const float* x, size_t n, float* y);
  bool reduces_row;
};

inline void softmax_row(const float* x, size_t n, float* y) {
  float m = -INFINITY;
  for (size_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  double sum = 0;
  for (size_t j = 0; j < n; ++j) sum += std::exp(double(x[j]) - m);
  for (size_t j = 0; j < n; ++j) y[j] = float(std::exp(double(x[j]) - m) / sum);
}

inline void mean_row(const float* x, size_t n, float* y) {
  double sum = 0;
  for (size_t j = 0; j < n; ++j) sum += x[j];
  *y = float(sum / double(n));
}

inline const UnaryReference* find_unary_reference(schema::OpKind op) {
  using F = float (*)(float, float);
  static const UnaryReference kRows[] = {
      {schema::OpKind_CLAMP, -4, 4, F([](float v, float) { return v; }), nullptr, false},
      {schema::OpKind_SIGMOID, -4, 4,
       F([](float v, float) { return 1.0f / (1.0f + std::exp(-v)); }), nullptr, false},
      {schema::OpKind_SILU, -4, 4, F([](float v, float) { return v / (1.0f + std::exp(-v)); }),
       nullptr, false},
      {schema::OpKind_SOFTMAX, -4, 4, nullptr, softmax_row, false},
      {schema::OpKind_HARDSWISH, -4, 4,
       F([](float v, float) { return v * std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f; }),
       nullptr, false},
      {schema::OpKind_LEAKY_RELU, -4, 4, F([](float v, float a) { return v > 0 ? v : v * a; }),
       nullptr, false},
      {schema::OpKind_ELU, -4, 4, F([](float v, float a) { return v > 0 ? v : a * std::expm1(v); }),
       nullptr, false},
      {schema::OpKind_ABS, -4, 4, F([](float v, float) { return std::fabs(v); }), nullptr, false},
      {schema::OpKind_NEGATE, -4, 4, F([](float v, float) { return -v; }), nullptr, false},
      {schema::OpKind_SQUARE, -4, 4, F([](float v, float) { return v * v; }), nullptr, false},
      {schema::OpKind_SQRT, 0, 4, F([](float v, float) { return std::sqrt(v); }), nullptr, false},
      {schema::OpKind_COPY, -4, 4, F([](float v, float) { return v; }), nullptr, false},
      {schema::OpKind_FLOOR, -4, 4, F([](float v, float) { return std::floor(v); }), nullptr,
       false},
      {schema::OpKind_CEILING, -4, 4, F([](float v, float) { return std::ceil(v); }), nullptr,
       false},
      {schema::OpKind_RSQRT, 0.05f, 4, F([](float v, float) { return 1.0f / std::sqrt(v); }),
       nullptr, false},
      {schema::OpKind_MEAN_LAST_DIM, -4, 4, nullptr, mean_row, true},
  };
  for (const UnaryReference& row : kRows) {
    if (row.op == op) return &row;
  }
  return nullptr;
}

// y for x (rows of `row` elements), clamped to [lo, hi].
inline std::vector<float> unary_reference(const UnaryReference& ref, const std::vector<float>& x,
                                          size_t row, float alpha, float lo, float hi) {
  std::vector<float> want(ref.reduces_row ? x.size() / row : x.size());
  if (ref.elementwise != nullptr) {
    for (size_t i = 0; i < x.size(); ++i) want[i] = ref.elementwise(x[i], alpha);
  } else {
    for (size_t start = 0; start < x.size(); start += row) {
      ref.per_row(&x[start], row, &want[ref.reduces_row ? start / row : start]);
    }
  }
  for (float& v : want) v = std::min(hi, std::max(lo, v));
  return want;
}

class UnaryTester {
 public:
  explicit UnaryTester(schema::OpKind op) : op_(op) {}
  UnaryTester& shape(std::vector<uint32_t> s) {
    shape_ = s;
    return *this;
  }
  // COPY: the reshaped output; MEAN_LAST_DIM: [..., 1] (the default) or [...].
  UnaryTester& output_shape(std::vector<uint32_t> s) {
    out_shape_ = s;
    return *this;
  }
  UnaryTester& alpha(float a) {
    alpha_ = a;
    return *this;
  }
  UnaryTester& share_weights(bool v) {
    share_ = v;
    return *this;
  }
  UnaryTester& output_range(float lo, float hi) {
    min_ = lo;
    max_ = hi;
    return *this;
  }

  void Test() const {
    const UnaryReference* ref = find_unary_reference(op_);
    ASSERT_NE(ref, nullptr) << "no reference row for " << schema::EnumNameOpKind(op_);
    const std::vector<float> x = random_floats(numel_of(shape_), ref->input_lo, ref->input_hi, 6);
    std::vector<uint32_t> out_dims = out_shape_.empty() ? shape_ : out_shape_;
    if (out_shape_.empty() && ref->reduces_row && !out_dims.empty()) out_dims.back() = 1;
    InMemoryDataMap map("unused.ptd");
    GraphBuilder g;
    const uint32_t in = g.input(shape_);
    const uint32_t y = g.output(out_dims);
    g.node(op_, {in}, {y}, min_, max_, alpha_);
    const size_t row = shape_.empty() ? 1 : shape_.back();
    run_two_handles(g.build(), map, {}, /*packs_per_handle=*/0, /*retained_per_handle=*/0, share_,
                    {HostTensor{to_int_dims(shape_), x}}, out_dims,
                    unary_reference(*ref, x, row, alpha_, min_, max_));
  }

 private:
  schema::OpKind op_;
  std::vector<uint32_t> shape_ = {4};
  std::vector<uint32_t> out_shape_;
  float alpha_ = 0.0f;
  bool share_ = true;
  float min_ = -std::numeric_limits<float>::infinity();
  float max_ = std::numeric_limits<float>::infinity();
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_OPERATOR_TESTER_H_
