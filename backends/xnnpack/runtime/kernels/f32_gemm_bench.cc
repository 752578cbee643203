// What the f32 GEMMs cost at the fully connected shapes of //bench:llm's model, measured (printed,
// never asserted): each vector GEMM path the CPU runs against XNNPACK's operators over the same
// packed weight, at 64 rows (the bench's prompt) on one thread, INTERLEAVED round by round so that
// other jobs on the shared machine slow all alike; per shape the median over rounds in ms,
// GFLOP/s, and each path's time over XNNPACK's. The weight is cut into column slabs of about
// L2 / 8 bytes, one XNNPACK operator each, as the delegate runs it (packed_operator.h).
//
//   ./bazelw run -c opt //backends/xnnpack/runtime/kernels:f32_gemm_bench

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/f32_test_util.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kRows = 64, kRounds = 9;

struct Shape {
  const char* name;
  size_t out, in;
};
// q and o, k and v (4 of 16 heads), gate and up, down.
constexpr Shape kShapes[] = {{"q/o", 1024, 1024},
                             {"k/v", 256, 1024},
                             {"gate/up", 2816, 1024},
                             {"down", 1024, 2816}};

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run() {
  if (initialize_xnnpack() != xnn_status_success) {
    std::fprintf(stderr, "f32_gemm_bench: XNNPACK did not initialise\n");
    return 1;
  }
  size_t count = 0;
  const KernelSets<F32Kernels>::Candidate* sets = f32_kernel_sets().all(&count);
  std::vector<const KernelSets<F32Kernels>::Candidate*> paths;
  for (size_t i = 0; i < count; ++i) {
    if (sets[i].isa != Isa::kScalar && sets[i].kernels.gemm != nullptr) paths.push_back(&sets[i]);
  }
  std::printf("f32 GEMM at %zu rows, 1 thread, median of %zu interleaved rounds (ms; GFLOP/s)\n",
              kRows, kRounds);
  for (const Shape& s : kShapes) {
    const std::vector<float> w = values(s.out * s.in, 11), bias = values(s.out, 12);
    const std::vector<float> x = values(kRows * s.in, 13);
    std::vector<float> y(kRows * s.out);
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    const size_t slab_bytes = (l2 > 0 ? static_cast<size_t>(l2) : size_t{1} << 20) / 8;
    const size_t slab_cols =
        std::max(kF32Tile, slab_bytes / ((s.in + 1) * sizeof(float)) / kF32Tile * kF32Tile);
    std::vector<std::unique_ptr<XnnpackF32>> slabs;
    for (size_t first = 0; first < s.out; first += slab_cols) {
      const size_t cols = std::min(slab_cols, s.out - first);
      const std::vector<float> part(w.begin() + first * s.in, w.begin() + (first + cols) * s.in);
      slabs.emplace_back(new XnnpackF32(part, bias.data() + first, s.in, cols, s.out));
      if (slabs.back()->block == nullptr) {
        std::fprintf(stderr, "f32_gemm_bench: XNNPACK did not pack %s\n", s.name);
        return 1;
      }
    }
    std::vector<std::vector<double>> ms(paths.size() + 1);
    for (size_t round = 0; round < kRounds; ++round) {
      double t0 = now_ms();
      for (size_t i = 0; i < slabs.size(); ++i) {
        if (!slabs[i]->run(kRows, x.data(), y.data() + i * slab_cols)) return 1;
      }
      ms[0].push_back(now_ms() - t0);
      for (size_t p = 0; p < paths.size(); ++p) {
        t0 = now_ms();
        for (size_t i = 0; i < slabs.size(); ++i) {
          const size_t cols = std::min(slab_cols, s.out - i * slab_cols);
          paths[p]->kernels.gemm(slabs[i]->block, s.in, cols, kRows, x.data(), s.in,
                                 y.data() + i * slab_cols, s.out, nullptr, 0);
        }
        ms[p + 1].push_back(now_ms() - t0);
      }
    }
    const double flop = 2.0 * kRows * s.in * s.out;
    const double theirs = median(ms[0]);
    std::printf("%-8s [%5zu x %5zu]  XNNPACK %7.3f ms %6.1f", s.name, s.out, s.in, theirs,
                flop / theirs / 1e6);
    for (size_t p = 0; p < paths.size(); ++p) {
      const double ours = median(ms[p + 1]);
      std::printf("  %s %7.3f ms %6.1f (%.2fx)", runtime::kernels::to_string(paths[p]->isa), ours,
                  flop / ours / 1e6, ours / theirs);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

int main() { return edgeshare::xnnpack::kernels::run(); }
