// What edgeshare::lora_bgmv costs in the decode step of a batch, measured (printed, never
// asserted): 8 rows, each on its own adapter slot of 8, through every LoRA target of the
// SmolLM2-135M shape's attention (30 layers of q, k, v, o: 576 inputs; 576, 192, 192, 576 outputs;
// rank 16), one call per target, as a batch program's step makes them. Per table dtype (fp32, fp16,
// int8) and thread count (1, 2):
//   hot:   one layer's four tables again and again (they stay in L2): the products' compute and
//          the calls' own costs;
//   cold:  every layer's tables in turn (29.5 MB at fp16), as a step reads them;
//   none:  every row on no adapter (-1): the calls' own costs alone.
// Times are per step (120 calls). Rounds interleave the cases so that other jobs on the shared
// machine slow all alike; the best and the median over rounds are printed.
//
//   ./bazelw run -c opt //runtime/kernels/portable:lora_bgmv_bench

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/kernels/half.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"

namespace edgeshare {
namespace runtime {
namespace {

constexpr int32_t kRows = 8, kSlots = 8, kRank = 16, kIn = 576, kLayers = 30;
constexpr int32_t kOut[4] = {576, 192, 192, 576};
constexpr int kRounds = 15;

enum class Dtype { kF32, kF16, kInt8 };

// One target's tables: a [slots, rank, in] and b [slots, rank, out] in `dtype`, and the int8
// tables' scales.
struct Tables {
  std::vector<uint8_t> a, b;
  std::vector<float> a_scales, b_scales;
  int32_t out = 0;
};

Tables make_tables(Dtype dtype, int32_t out, std::mt19937* rng) {
  std::uniform_real_distribution<float> real(-0.1f, 0.1f);
  std::uniform_int_distribution<int> byte(-127, 127);
  Tables t;
  t.out = out;
  const size_t a_count = size_t{kSlots} * kRank * kIn, b_count = size_t{kSlots} * out * kRank;
  for (auto [bytes, count] : {std::make_pair(&t.a, a_count), std::make_pair(&t.b, b_count)}) {
    if (dtype == Dtype::kF32) {
      std::vector<float> v(count);
      for (float& f : v) f = real(*rng);
      bytes->assign(reinterpret_cast<uint8_t*>(v.data()),
                    reinterpret_cast<uint8_t*>(v.data() + count));
    } else if (dtype == Dtype::kF16) {
      std::vector<uint16_t> v(count);
      for (uint16_t& h : v) h = kernels::float_to_half(real(*rng));
      bytes->assign(reinterpret_cast<uint8_t*>(v.data()),
                    reinterpret_cast<uint8_t*>(v.data() + count));
    } else {
      bytes->resize(count);
      for (uint8_t& b : *bytes) b = static_cast<uint8_t>(static_cast<int8_t>(byte(*rng)));
    }
  }
  t.a_scales.assign(size_t{kSlots} * kRank, 0.001f);
  t.b_scales.assign(size_t{kSlots} * out, 0.001f);
  return t;
}

// One call of the operator over `t` for the rows in `x` on `adapters`; false on an error.
bool call(const Kernel& kernel, Dtype dtype, Tables& t, std::vector<float>& x,
          std::vector<int64_t>& adapters, std::vector<float>& y) {
  const ScalarType type = dtype == Dtype::kF32   ? ScalarType::Float
                          : dtype == Dtype::kF16 ? ScalarType::Half
                                                 : ScalarType::Char;
  Tensor tx(ScalarType::Float, {kRows, kIn}, x.data());
  Tensor ta(type, {kSlots, kRank, kIn}, t.a.data());
  Tensor tb(type, {kSlots, kRank, t.out}, t.b.data());
  Tensor tas(ScalarType::Float, {kSlots, kRank}, t.a_scales.data());
  Tensor tbs(ScalarType::Float, {kSlots, t.out}, t.b_scales.data());
  Tensor tadapters(ScalarType::Long, {kRows}, adapters.data());
  Tensor ty(ScalarType::Float, {kRows, t.out}, y.data());
  if (dtype == Dtype::kInt8) {
    EValue values[] = {EValue(tx),  EValue(ta),        EValue(tas), EValue(tb),
                       EValue(tbs), EValue(tadapters), EValue(ty)};
    EValue* args[7];
    for (int i = 0; i < 7; ++i) args[i] = &values[i];
    return kernel.fn(Span<EValue* const>(args, 7)).ok();
  }
  EValue values[] = {EValue(tx), EValue(ta), EValue(tb), EValue(tadapters), EValue(ty)};
  EValue* args[5];
  for (int i = 0; i < 5; ++i) args[i] = &values[i];
  return kernel.fn(Span<EValue* const>(args, 5)).ok();
}

struct Case {
  std::string name;
  Dtype dtype;
  size_t threads;
  int mode;  // 0 hot, 1 cold, 2 none.
  std::vector<double> ms;
};

int run() {
  std::mt19937 rng(1);
  const Dtype dtypes[] = {Dtype::kF32, Dtype::kF16, Dtype::kInt8};
  const char* dtype_names[] = {"fp32", "fp16", "int8"};
  std::vector<std::vector<Tables>> tables(3);
  for (int d = 0; d < 3; ++d) {
    for (int32_t i = 0; i < kLayers * 4; ++i) {
      tables[d].push_back(make_tables(dtypes[d], kOut[i % 4], &rng));
    }
  }
  std::vector<float> x(size_t{kRows} * kIn), y(size_t{kRows} * kIn);
  std::uniform_real_distribution<float> real(-1, 1);
  for (float& v : x) v = real(rng);
  std::vector<int64_t> on_slots(kRows), on_none(kRows, -1);
  for (int32_t i = 0; i < kRows; ++i) on_slots[i] = i;

  Result<Threads> one = Threads::create(1), two = Threads::create(2);
  if (!one.ok() || !two.ok()) {
    std::fprintf(stderr, "lora_bgmv_bench: no threads\n");
    return 1;
  }
  std::vector<Case> cases;
  const char* modes[] = {"hot", "cold", "none"};
  for (int d = 0; d < 3; ++d) {
    for (size_t threads : {size_t{1}, size_t{2}}) {
      for (int mode = 0; mode < 3; ++mode) {
        cases.push_back({std::string(dtype_names[d]) + " " + modes[mode] + " " +
                             std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""),
                         dtypes[d],
                         threads,
                         mode,
                         {}});
      }
    }
  }
  for (int round = 0; round < kRounds; ++round) {
    for (Case& c : cases) {
      const ThreadsScope scope(c.threads == 1 ? &*one : &*two);
      const int d = static_cast<int>(c.dtype);
      const Kernel kernel =
          get_kernel(c.dtype == Dtype::kInt8 ? "edgeshare::lora_bgmv_q8" : "edgeshare::lora_bgmv");
      std::vector<int64_t>& adapters = c.mode == 2 ? on_none : on_slots;
      const auto start = std::chrono::steady_clock::now();
      for (int32_t i = 0; i < kLayers * 4; ++i) {
        Tables& t = tables[d][c.mode == 0 ? i % 4 : i];
        if (!call(kernel, c.dtype, t, x, adapters, y)) {
          std::fprintf(stderr, "lora_bgmv_bench: the operator refused its arguments\n");
          return 1;
        }
      }
      c.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  std::printf("lora_bgmv, a decode step of %d rows on %d adapters (120 calls), ms per step\n",
              kRows, kSlots);
  std::printf("%-24s %8s %8s\n", "case", "best", "median");
  for (Case& c : cases) {
    std::sort(c.ms.begin(), c.ms.end());
    std::printf("%-24s %8.3f %8.3f\n", c.name.c_str(), c.ms.front(), c.ms[c.ms.size() / 2]);
  }
  return 0;
}

}  // namespace
}  // namespace runtime
}  // namespace edgeshare

int main() { return edgeshare::runtime::run(); }
