// edgeshare::cached_attention and its row kernels: every instruction set this CPU runs against a
// double-precision reference (float and half caches, head sizes with and without a vector tail,
// runs of keys across the kernels' blocks), the operator's implied causal and sliding-window masks
// and grouped heads, the same bits at one and two threads, and its errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// softmax(scale * q.k, capped) . v in double precision over `count` keys.
std::vector<double> reference_row(size_t count, size_t head_dim, const float* q, const float* k,
                                  const float* v, double scale, double softcap) {
  std::vector<double> scores(count);
  double max = -INFINITY;
  for (size_t j = 0; j < count; ++j) {
    double s = 0;
    for (size_t d = 0; d < head_dim; ++d) s += double(q[d]) * k[j * head_dim + d];
    s *= scale;
    if (softcap > 0) s = softcap * std::tanh(s / softcap);
    scores[j] = s;
    max = std::max(max, s);
  }
  double sum = 0;
  for (double& s : scores) sum += (s = std::exp(s - max));
  std::vector<double> out(head_dim, 0.0);
  for (size_t j = 0; j < count; ++j)
    for (size_t d = 0; d < head_dim; ++d) out[d] += scores[j] / sum * v[j * head_dim + d];
  return out;
}

void expect_near(const float* got, const std::vector<double>& want, const char* what) {
  for (size_t d = 0; d < want.size(); ++d) {
    ASSERT_NEAR(got[d], want[d], 2e-5 + 2e-5 * std::fabs(want[d])) << what << " element " << d;
  }
}

TEST(AttentionRowTest, every_instruction_set_matches_the_double_reference) {
  size_t sets = 0;
  const auto* all = attention_row_sets().all(&sets);
  ASSERT_GE(sets, 1u);
  EXPECT_EQ(all[0].isa, kernels::Isa::kScalar);
  EXPECT_EQ(attention_row_kernels().f32, attention_row_sets().best().f32);
  for (size_t head_dim : {1u, 7u, 16u, 40u, 64u, 80u, 256u}) {
    for (size_t count : {1u, 31u, 32u, 33u, 100u, 300u}) {
      for (float softcap : {0.0f, 4.0f}) {
        const auto q = random_floats(head_dim, 1 + head_dim);
        const auto k = random_floats(count * head_dim, 2 + count, 2.0f);
        const auto v = random_floats(count * head_dim, 3 + count);
        const float scale = 1.0f / std::sqrt(float(head_dim));
        const auto want = reference_row(count, head_dim, q.data(), k.data(), v.data(), scale, softcap);
        // The half path reads the cache rounded to half: compare it with the reference of those.
        std::vector<uint16_t> kh(k.size()), vh(v.size());
        std::vector<float> kr(k.size()), vr(v.size());
        for (size_t i = 0; i < k.size(); ++i) {
          kh[i] = kernels::float_to_half(k[i]);
          vh[i] = kernels::float_to_half(v[i]);
          kr[i] = kernels::half_to_float(kh[i]);
          vr[i] = kernels::half_to_float(vh[i]);
        }
        const auto want_half =
            reference_row(count, head_dim, q.data(), kr.data(), vr.data(), scale, softcap);
        for (size_t s = 0; s < sets; ++s) {
          std::vector<float> out(head_dim, NAN);
          all[s].kernels.f32(count, head_dim, q.data(), k.data(), v.data(), scale, softcap,
                             out.data());
          expect_near(out.data(), want, to_string(all[s].isa));
          all[s].kernels.f16(count, head_dim, q.data(), kh.data(), vh.data(), scale, softcap,
                             out.data());
          expect_near(out.data(), want_half, to_string(all[s].isa));
        }
      }
    }
  }
}

// One operator call through the registry, as Method makes it.
struct Call {
  size_t heads, kv_heads, rows, positions, head_dim;
  int64_t start, window = 0;
  double scale = 0.125, softcap = 0;
  std::vector<float> q, k, v, out;
  std::vector<int64_t> start_value;

  Call(size_t h, size_t kvh, size_t t, size_t s, size_t d, int64_t start_pos)
      : heads(h), kv_heads(kvh), rows(t), positions(s), head_dim(d), start(start_pos) {
    q = random_floats(h * t * d, 11);
    k = random_floats(kvh * s * d, 12);
    v = random_floats(kvh * s * d, 13);
    out.assign(t * h * d + 64, NAN);  // planned larger: the kernel resizes
    start_value = {start_pos};
  }

  Status run() {
    Tensor tq(ScalarType::Float, {1, int32_t(heads), int32_t(rows), int32_t(head_dim)}, q.data());
    Tensor tk(ScalarType::Float, {1, int32_t(kv_heads), int32_t(positions), int32_t(head_dim)},
              k.data());
    Tensor tv(ScalarType::Float, {1, int32_t(kv_heads), int32_t(positions), int32_t(head_dim)},
              v.data());
    Tensor ts(ScalarType::Long, Span<const int32_t>(), start_value.data());
    Tensor to(ScalarType::Float, {1, int32_t(rows + 1), int32_t(heads), int32_t(head_dim)},
              out.data());
    EValue values[] = {EValue(tq),           EValue(tk),      EValue(tv),     EValue(ts),
                       EValue(scale),        EValue(softcap), EValue(window), EValue(to)};
    EValue* args[8];
    for (int i = 0; i < 8; ++i) args[i] = &values[i];
    Kernel kernel = get_kernel("edgeshare::cached_attention");
    if (!kernel) return Status::Format(Error::NotFound, "no kernel");
    EXPECT_EQ(kernel.num_inputs, 7u);
    Status status = kernel.fn(Span<EValue* const>(args, 8));
    if (status.ok()) {
      const Tensor& result = values[7].to_tensor();
      EXPECT_EQ(result.size(1), int32_t(rows));
      EXPECT_EQ(result.size(2), int32_t(heads));
    }
    return status;
  }

  // Row i of head h attends to positions [begin, start + i] of its key/value head.
  void check() const {
    const size_t group = heads / kv_heads;
    for (size_t h = 0; h < heads; ++h) {
      for (size_t i = 0; i < rows; ++i) {
        const size_t position = start + i;
        const size_t begin =
            window > 0 && position + 1 > size_t(window) ? position + 1 - window : 0;
        const size_t offset = ((h / group) * positions + begin) * head_dim;
        const auto want = reference_row(position + 1 - begin, head_dim,
                                        &q[(h * rows + i) * head_dim], &k[offset], &v[offset],
                                        scale, softcap);
        expect_near(&out[(i * heads + h) * head_dim], want, "operator");
      }
    }
  }
};

TEST(CachedAttentionTest, reads_only_the_filled_positions_with_grouped_heads) {
  for (int64_t start : {0, 5, 40}) {
    Call call(/*heads=*/6, /*kv_heads=*/2, /*rows=*/7, /*positions=*/64, /*head_dim=*/16, start);
    // Positions past start + rows hold garbage the mask must never let through.
    for (size_t g = 0; g < 2; ++g)
      for (size_t p = start + 7; p < 64; ++p)
        for (size_t d = 0; d < 16; ++d) call.k[(g * 64 + p) * 16 + d] = 1e30f;
    ASSERT_TRUE(call.run().ok());
    call.check();
  }
}

TEST(CachedAttentionTest, a_sliding_window_and_a_softcap_apply) {
  Call call(4, 4, 9, 50, 8, 30);
  call.window = 5;
  call.softcap = 3.0;
  ASSERT_TRUE(call.run().ok());
  call.check();
}

TEST(CachedAttentionTest, two_threads_give_the_same_bits_as_one) {
  Call one(8, 2, 13, 40, 64, 3), two(8, 2, 13, 40, 64, 3);
  ASSERT_TRUE(one.run().ok());
  Result<Threads> threads = Threads::create(2);
  ASSERT_TRUE(threads.ok()) << threads.status().message();
  {
    const ThreadsScope scope(&*threads);
    ASSERT_TRUE(two.run().ok());
  }
  EXPECT_EQ(std::memcmp(one.out.data(), two.out.data(), one.out.size() * sizeof(float)), 0);
}

TEST(CachedAttentionTest, positions_past_the_cache_are_an_error) {
  Call call(2, 1, 4, 16, 8, 13);
  const Status status = call.run();
  EXPECT_EQ(status.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(status.message()).find("positions 13..16 are outside the cache of 16"),
            std::string::npos)
      << status.message();
  Call negative(2, 1, 1, 16, 8, -1);
  EXPECT_EQ(negative.run().code(), Error::InvalidArgument);
}

TEST(CachedAttentionTest, heads_that_are_not_a_multiple_of_the_cache_heads_are_an_error) {
  Call call(3, 2, 1, 8, 8, 0);
  EXPECT_EQ(call.run().code(), Error::InvalidProgram);
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
