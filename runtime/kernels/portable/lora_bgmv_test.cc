// edgeshare::lora_bgmv: the bits of one product pair per chunk of rows on one adapter (gemm_nt
// over a, gemm_nn over b stored [rank, out]),
// the same bits with a two-thread Threads current, and a double reference; float and half
// factors, decode steps (one row per adapter), chunks of many rows (past the stack chunk at rank
// 150), rows on no adapter, leading dims; each call has the helpers warm the next call's factors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "edgeshare/runtime/core/scoped_threads.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// The operator's stack intermediate, in floats (lora_bgmv.cc): chunks are at most this / rank rows.
constexpr size_t kLowFloats = 4096;

struct Case {
  size_t leading, slots, rank, in, out;
  std::vector<int64_t> adapters;  // One per row.
  bool half;
};

struct Operands {
  std::vector<float> x, a, b;  // a, b as floats (the half case: the halves' values); b [rank, out].
  std::vector<uint16_t> ah, bh;
};

Operands make_operands(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.rank * 7 + c.in + c.adapters.size()));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Operands o;
  o.x.resize(c.leading * c.adapters.size() * c.in);
  o.a.resize(c.slots * c.rank * c.in);
  o.b.resize(c.slots * c.out * c.rank);
  for (float& v : o.x) v = dist(rng);
  for (std::vector<float>* f : {&o.a, &o.b}) {
    for (float& v : *f) v = 0.1f * dist(rng);
  }
  if (c.half) {
    for (auto [f, h] : {std::make_pair(&o.a, &o.ah), std::make_pair(&o.b, &o.bh)}) {
      h->resize(f->size());
      for (size_t i = 0; i < f->size(); ++i) {
        (*h)[i] = kernels::float_to_half((*f)[i]);
        (*f)[i] = kernels::half_to_float((*h)[i]);
      }
    }
  }
  return o;
}

// One call of the registered operator.
std::vector<float> run_operator(const Case& c, Operands& o) {
  const int32_t rows = static_cast<int32_t>(c.adapters.size());
  const ScalarType type = c.half ? ScalarType::Half : ScalarType::Float;
  void* a = c.half ? static_cast<void*>(o.ah.data()) : o.a.data();
  void* b = c.half ? static_cast<void*>(o.bh.data()) : o.b.data();
  std::vector<int64_t> adapters = c.adapters;
  std::vector<float> out(c.leading * c.adapters.size() * c.out, NAN);
  Tensor tx(ScalarType::Float, {int32_t(c.leading), rows, int32_t(c.in)}, o.x.data());
  Tensor ta(type, {int32_t(c.slots), int32_t(c.rank), int32_t(c.in)}, a);
  Tensor tb(type, {int32_t(c.slots), int32_t(c.rank), int32_t(c.out)}, b);
  Tensor tadapters(ScalarType::Long, {rows}, adapters.data());
  Tensor tout(ScalarType::Float, {int32_t(c.leading), rows, int32_t(c.out)}, out.data());
  EValue values[] = {EValue(tx), EValue(ta), EValue(tb), EValue(tadapters), EValue(tout)};
  EValue* args[5];
  for (int i = 0; i < 5; ++i) args[i] = &values[i];
  Kernel kernel = get_kernel("edgeshare::lora_bgmv");
  EXPECT_TRUE(static_cast<bool>(kernel));
  const Status status = kernel.fn(Span<EValue* const>(args, 5));
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

// One product pair per chunk: a run of rows on one adapter, cut every kLowFloats / rank rows;
// zeros on no adapter.
std::vector<float> by_chunks(const Case& c, const Operands& o) {
  const GemmNtKernels& gemm = gemm_nt_kernels();
  const size_t rows = c.adapters.size(), chunk_rows = kLowFloats / c.rank;
  std::vector<float> out(c.leading * rows * c.out), low(kLowFloats);
  for (size_t p = 0; p < c.leading; ++p) {
    for (size_t i = 0; i < rows;) {
      size_t end = i + 1;
      while (end < rows && c.adapters[end] == c.adapters[i] && end - i < chunk_rows) ++end;
      const size_t m = end - i, s = static_cast<size_t>(c.adapters[i]);
      const float* x = o.x.data() + (p * rows + i) * c.in;
      float* y = out.data() + (p * rows + i) * c.out;
      if (c.adapters[i] < 0) {
        std::fill(y, y + m * c.out, 0.0f);
      } else if (c.half) {
        gemm.f16(m, c.rank, c.in, x, o.ah.data() + s * c.rank * c.in, low.data());
        gemm.nn_f16(m, c.out, c.rank, low.data(), o.bh.data() + s * c.out * c.rank, y);
      } else {
        gemm.f32(m, c.rank, c.in, x, o.a.data() + s * c.rank * c.in, low.data());
        gemm.nn_f32(m, c.out, c.rank, low.data(), o.b.data() + s * c.out * c.rank, y);
      }
      i = end;
    }
  }
  return out;
}

void expect_near_reference(const Case& c, const Operands& o, const std::vector<float>& got) {
  const size_t rows = c.adapters.size();
  for (size_t p = 0; p < c.leading; ++p) {
    for (size_t i = 0; i < rows; ++i) {
      const int64_t s = c.adapters[i];
      std::vector<double> low(c.rank, 0.0);
      for (size_t r = 0; s >= 0 && r < c.rank; ++r) {
        for (size_t k = 0; k < c.in; ++k) {
          low[r] += double(o.x[(p * rows + i) * c.in + k]) * o.a[(s * c.rank + r) * c.in + k];
        }
      }
      for (size_t j = 0; j < c.out; ++j) {
        double want = 0.0;
        for (size_t r = 0; s >= 0 && r < c.rank; ++r) {
          want += low[r] * o.b[(s * c.rank + r) * c.out + j];
        }
        ASSERT_NEAR(got[(p * rows + i) * c.out + j], want, 1e-4 + 1e-4 * std::fabs(want))
            << "row " << i << " output " << j;
      }
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (bool half : {false, true}) {
    // A decode step: 8 rows, each on its own adapter, and one on none.
    all.push_back({1, 8, 16, 576, 576, {0, 1, 2, 3, 4, 5, 6, 7}, half});
    all.push_back({1, 8, 16, 576, 192, {3, -1, 0, 7, 7, 1, 2, 5}, half});
    // Prefill chunks past a piece (16 rows) and past a chunk (rank 150: 27 rows), mixed with
    // single rows and rows on none; odd sizes.
    std::vector<int64_t> mixed(40, 2);
    mixed.insert(mixed.end(), {0, -1, -1, 1, 1, 1});
    mixed.insert(mixed.end(), 70, 3);
    all.push_back({1, 4, 16, 33, 40, mixed, half});
    all.push_back({1, 4, 150, 17, 7, mixed, half});
    all.push_back({2, 4, 8, 64, 96, {1, 1, 1, 1, 1, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                      2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3},
                   half});
  }
  return all;
}

TEST(LoraBgmvTest, two_threads_give_the_bits_of_one_and_of_one_product_per_chunk) {
  Result<Threads> threads = Threads::create(2);
  ASSERT_TRUE(threads.ok()) << threads.status().message();
  for (const Case& c : cases()) {
    SCOPED_TRACE(testing::Message() << (c.half ? "half" : "float") << " rank " << c.rank << " in "
                                    << c.in << " out " << c.out << " rows " << c.adapters.size());
    Operands o = make_operands(c);
    const std::vector<float> one = run_operator(c, o);
    std::vector<float> two;
    {
      const ThreadsScope scope(&*threads);
      two = run_operator(c, o);
    }
    const std::vector<float> chunks = by_chunks(c, o);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(one.data(), chunks.data(), one.size() * sizeof(float)), 0);
    expect_near_reference(c, o, two);
  }
}

// Two calls a step, as a batch program's layers make them: from the second call on, each call
// has the helpers warm the other call's factors of its rows' slots (whole lines of each), and the
// results keep their bits.
TEST(LoraBgmvTest, each_call_warms_the_next_calls_factors_for_its_slots) {
  Result<Threads> threads = Threads::create(2);
  ASSERT_TRUE(threads.ok()) << threads.status().message();
  const Case first{1, 8, 16, 576, 576, {0, 1, 2, 5, 5, -1, 7, 7}, true};
  const Case second{1, 8, 16, 576, 192, {0, 1, 2, 5, 5, -1, 7, 7}, true};
  Operands o1 = make_operands(first), o2 = make_operands(second);
  const std::vector<float> want1 = run_operator(first, o1), want2 = run_operator(second, o2);
  // Slots 0, 1, 2, 5 and 7: their a and b factors, in half lines rounded up to whole lines.
  auto lines = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  const size_t first_bytes = 5 * (lines(16 * 576 * 2) + lines(576 * 16 * 2));
  const size_t second_bytes = 5 * (lines(16 * 576 * 2) + lines(192 * 16 * 2));
  const ThreadsScope scope(&*threads);
  size_t want = 0;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> got1 = run_operator(first, o1);
    if (step > 0) want += second_bytes;
    EXPECT_EQ(wait_for_warmed(*threads, want), want) << "step " << step;
    const std::vector<float> got2 = run_operator(second, o2);
    want += first_bytes;
    EXPECT_EQ(wait_for_warmed(*threads, want), want) << "step " << step;
    EXPECT_EQ(std::memcmp(got1.data(), want1.data(), got1.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(got2.data(), want2.data(), got2.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
