// What the int8 fully connected kernels read per second, measured (printed, never asserted): one
// big weight ([8192 x 8192]: 64 MiB of int8, twice this machine's last-level cache), every path the
// CPU runs, INTERLEAVED round by round with the f32 GEMV over the same shape (256 MiB) as the peer
// so that other jobs on the shared machine slow all alike. Per path: the GEMV (one row, the
// quantizer apart), the whole one-row fully connected (quantize + GEMV +
// epilogue), and the GEMM at 32 rows, then the int4 fully connected (groups of 32) over the same
// shape at 1 and 32 rows; median and best over rounds, GB/s of weight bytes read.
// Weights live in memory advised for transparent huge pages, as the delegate keeps packed weights.
//
//   ./bazelw run -c opt //backends/xnnpack/runtime/kernels:qs8_qc8w_bench

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/qs8_fully_connected.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/f32_test_util.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kIn = 8192, kOut = 8192, kRows = 32, kRounds = 15;

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `bytes` in 2 MiB-aligned memory advised for huge pages (never freed: the process ends).
void* huge(size_t bytes) {
  const size_t rounded = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  void* p = std::aligned_alloc(2u << 20, rounded);
  if (p == nullptr) std::abort();
  madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

struct Case {
  std::string name;
  size_t weight_bytes;
  std::function<void()> run;
  std::vector<double> ms;
};

int run() {
  // The int8 weight, its packing, and the activations.
  std::vector<int8_t> w(kOut * kIn);
  uint32_t state = 1;
  for (int8_t& b : w) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<int8_t>(static_cast<int>((state >> 8) % 255) - 127);
  }
  const std::vector<float> w_scales(kOut, 1.0f / 1024), bias = values(kOut, 2);
  const size_t qc8_bytes = qc8_packed_bytes(kIn, kOut);
  void* qc8 = huge(qc8_bytes);
  qc8w_pack(w.data(), w_scales.data(), bias.data(), kIn, kOut, qc8);
  w.clear();
  w.shrink_to_fit();
  const std::vector<float> x = values(kRows * kIn, 3);
  std::vector<int8_t> q(kRows * qc8_padded_k(kIn));
  std::vector<float> scales(kRows * act_blocks(kIn)), y(kRows * kOut);
  std::vector<int32_t> sums(kRows * act_blocks(kIn));
  const QS8Scratch scratch{q.data(), scales.data(), sums.data(), kRows};
  qs8_quantize_scalar(x.data(), kIn, kRows, kIn, q.data(), qc8_padded_k(kIn), scales.data(),
                      sums.data());

  // The f32 peer: the same shape in XNNPACK's f32 layout.
  const size_t f32_bytes = f32_packed_bytes(kIn, kOut);
  float* f32 = static_cast<float*>(huge(f32_bytes));
  {
    const std::vector<float> packed = pack_f32(values(kOut * kIn, 4), bias, kIn, kOut);
    std::copy(packed.begin(), packed.end(), f32);
  }

  std::vector<Case> cases;
  const KernelSets<F32Kernels>::Candidate& f32_set = f32_kernel_sets().up_to(Isa::kAvx512Vnni);
  cases.push_back({std::string("f32 GEMV ") + to_string(f32_set.isa),
                   f32_bytes,
                   [&] { f32_set.kernels.gemv(f32, kIn, kOut, x.data(), y.data()); },
                   {}});
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!cpu_runs(isa)) continue;
    const QS8Kernels set = qs8_kernel_sets().up_to(isa).kernels;
    const std::string name = to_string(qs8_kernel_sets().up_to(isa).isa);
    cases.push_back({"int8 GEMV (quantized row) " + name,
                     qc8_bytes,
                     [&, set] { set.gemv(qc8, kIn, kOut, q.data(), scales.data(), sums.data(), y.data()); },
                     {}});
    cases.push_back({"int8 fully connected, 1 row " + name,
                     qc8_bytes,
                     [&, set] {
                       if (!qs8_qc8w_fully_connected(set, qc8, qc8_bytes, kIn, kOut, 1, x.data(),
                                                     kIn, y.data(), kOut, scratch)
                                .ok()) {
                         std::abort();
                       }
                     },
                     {}});
    if (isa == Isa::kScalar) continue;  // Minutes per round at 32 rows.
    cases.push_back({"int8 fully connected, 32 rows " + name,
                     qc8_bytes,
                     [&, set] {
                       if (!qs8_qc8w_fully_connected(set, qc8, qc8_bytes, kIn, kOut, kRows,
                                                     x.data(), kIn, y.data(), kOut, scratch)
                                .ok()) {
                         std::abort();
                       }
                     },
                     {}});
  }
  // The int4 weight of the same shape (groups of 32): the same time per weight reads half the
  // bytes.
  constexpr size_t kGroup = 32;
  const size_t qc4_bytes = qc4_packed_bytes(kIn, kOut, kGroup);
  void* qc4 = huge(qc4_bytes);
  {
    std::vector<uint8_t> nibbles(kOut * kIn / 2);
    for (uint8_t& b : nibbles) {
      state = state * 1664525u + 1013904223u;
      b = static_cast<uint8_t>(state >> 8);
    }
    const std::vector<uint16_t> w4_scales(kOut * kIn / kGroup, 0x1400);  // 2^-10 in float16
    qc4w_pack(nibbles.data(), w4_scales.data(), bias.data(), kIn, kOut, kGroup, qc4);
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni}) {
    if (!cpu_runs(isa)) continue;
    const QS8Kernels qs8 = qs8_kernel_sets().up_to(isa).kernels;
    const QC4Kernels set = qc4_kernel_sets().up_to(isa).kernels;
    for (size_t rows : {size_t{1}, kRows}) {
      cases.push_back(
          {"int4 g32 fully connected, " + std::to_string(rows) + " rows " + to_string(qc4_kernel_sets().up_to(isa).isa),
           qc4_bytes,
           [&, qs8, set, rows] {
             if (!qs8_qc4w_fully_connected(qs8, set, qc4, qc4_bytes, kIn, kOut, kGroup, rows,
                                           x.data(), kIn, y.data(), kOut, scratch)
                      .ok()) {
               std::abort();
             }
           },
           {}});
    }
  }
  for (Case& c : cases) c.run();  // Warm: pages faulted in, probes run.
  for (size_t round = 0; round < kRounds; ++round) {
    for (Case& c : cases) {
      const double start = now_ms();
      c.run();
      c.ms.push_back(now_ms() - start);
    }
  }
  std::printf("[%zu x %zu] weight: int8 %.1f MiB packed, f32 %.1f MiB; %zu interleaved rounds\n",
              kOut, kIn, qc8_bytes / 1048576.0, f32_bytes / 1048576.0, kRounds);
  for (Case& c : cases) {
    std::sort(c.ms.begin(), c.ms.end());
    const double median = c.ms[c.ms.size() / 2], best = c.ms.front();
    std::printf("  %-46s median %8.3f ms (%5.1f GB/s)  best %8.3f ms (%5.1f GB/s)\n",
                c.name.c_str(), median, c.weight_bytes / median / 1e6, best,
                c.weight_bytes / best / 1e6);
  }
  return 0;
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

int main() { return edgeshare::xnnpack::kernels::run(); }
